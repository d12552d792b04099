#!/usr/bin/env bash
# scripts/setup.sh's choice of the torch build (DDPW_TORCH_CUDA), without the network: as a user
# without root (no Debian packages), with wheel indexes made here (file:// folders holding small
# stand-in wheels named and versioned as torch's, so pip resolves them as it would PyTorch's).
#   - an unknown build is refused, naming the three;
#   - cu126 without its index stops before anything is installed, naming DDPW_TORCH_INDEX_URL and
#     the Get Started page's choice;
#   - a venv that holds the build asked for is reused;
#   - a venv of another build is replaced by a fresh one, torch coming from DDPW_TORCH_INDEX_URL;
#   - an index that gives another build than the one asked for is an error naming the fix;
#   - without DDPW_TORCH_CUDA a cached torch of any build stays; on a cluster (MODULEPATH set) with
#     none cached, it names both ways: the site's module or a build for its GPUs.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
PATH=$PATH:/usr/sbin:/sbin
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (runs the set-up as the user nobody, so that it installs no Debian package)"
command -v runuser >/dev/null || skip "no runuser"
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || skip "Debian's python3 has no venv module (apt-get install python3-venv)"

tmp=$(mktemp -d /tmp/ddpw-setup.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir -p "$tmp/scripts" "$tmp/home"
cp "$root/scripts/setup.sh" "$tmp/scripts/"

# Wheel indexes (PEP 503 folders): torch-2.11.0+cuXYZ for each build, numpy and matplotlib stand-ins.
/usr/bin/python3 - "$tmp" <<'PY'
import base64, hashlib, os, sys, zipfile
tmp = sys.argv[1]
def wheel(index, name, version, body):
    folder = os.path.join(tmp, index, name)
    os.makedirs(folder, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": body,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: ddpw-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    file = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(folder, file), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    with open(os.path.join(folder, "index.html"), "a") as page:  # the project's page of the simple API
        page.write(f'<a href="{file.replace("+", "%2B")}">{file}</a>\n')
for build in ("cu126", "cu128", "cu130"):
    wheel(f"index-{build}", "torch", f"2.11.0+{build}", f'__version__ = "2.11.0+{build}"\n')
for name in ("numpy", "matplotlib"):
    wheel("index-default", name, "1.0", "")
PY
chown -R nobody "$tmp/home"

# setup VAR=VALUE...: scripts/setup.sh as nobody, with only these variables (and pip offline but
# for the indexes above); sets OUT and RC.
setup() {
  RC=0
  OUT=$(cd "$tmp" && runuser -u nobody -- env -i HOME="$tmp/home" PATH=/usr/bin:/bin DDPW_HOME="$tmp/home/ddpw" \
        DDPW_TORCH=2.11.0 PIP_INDEX_URL="file://$tmp/index-default" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "$@" \
        bash scripts/setup.sh 2>&1) || RC=$?
}
expect() {  # expect RC TEXT...: the exit code, and each text in the output
  local want=$1 text; shift
  [ "$RC" = "$want" ] || { echo "$OUT"; fail "exit code $RC, expected $want"; }
  for text in "$@"; do grep -qF -- "$text" <<<"$OUT" || { echo "$OUT"; fail "the output lacks: $text"; }; done
}
venv_torch() { "$tmp/home/ddpw/venv/bin/python3" -c 'import torch; print(torch.__version__)'; }

setup DDPW_TORCH_CUDA=cu121
expect 1 "DDPW_TORCH_CUDA=cu121 is not a build of torch 2.11.0: use cu126 (V100 and older), cu128, cu130 or cu132"

setup DDPW_TORCH_CUDA=cu126 PIP_INDEX_URL=
expect 1 "DDPW_TORCH_CUDA=cu126 needs PyTorch's cu126 wheel index, and none is set" \
         "export DDPW_TORCH_INDEX_URL=<the --index-url that PyTorch's Get Started page gives for" "Linux / Pip / CUDA 12.6>"
[ ! -e "$tmp/home/ddpw/venv" ] || fail "a venv was made although the set-up stopped"
echo "ok: an unknown build and cu126 without its index stop before installing anything, naming the fix"

setup DDPW_TORCH_CUDA=cu126 DDPW_TORCH_INDEX_URL="file://$tmp/index-cu126"
expect 0 "installing torch==2.11.0 (cu126) into $tmp/home/ddpw/venv" "LibTorch: torch 2.11.0+cu126 in $tmp/home/ddpw/venv"
[ "$(venv_torch)" = 2.11.0+cu126 ] || fail "the venv holds torch $(venv_torch), not 2.11.0+cu126"
setup DDPW_TORCH_CUDA=cu126
expect 0 "LibTorch: torch 2.11.0+cu126 cached in $tmp/home/ddpw/venv"
echo "ok: cu126 from its index; asked again, the venv is reused (no index needed)"

touch "$tmp/home/ddpw/venv/marker-of-the-old-venv"
setup DDPW_TORCH_CUDA=cu128 DDPW_TORCH_INDEX_URL="file://$tmp/index-cu128"
expect 0 "the venv holds torch 2.11.0+cu126, not the cu128 build: making a new venv" "LibTorch: torch 2.11.0+cu128 in"
[ ! -e "$tmp/home/ddpw/venv/marker-of-the-old-venv" ] || fail "the cu126 venv was not replaced by a fresh one"
[ "$(venv_torch)" = 2.11.0+cu128 ] || fail "the venv holds torch $(venv_torch), not 2.11.0+cu128"
echo "ok: another build replaces the venv with a fresh one"

setup DDPW_TORCH_CUDA=cu126 DDPW_TORCH_INDEX_URL="file://$tmp/index-cu130"
expect 1 "the index gave torch 2.11.0+cu130, not the cu126 build of 2.11.0" "Fix: set DDPW_TORCH_INDEX_URL to PyTorch's cu126 wheel index"
echo "ok: an index that gives another build is an error naming the fix"

# Without DDPW_TORCH_CUDA a cached torch of any build stays (as before this variable existed).
setup
expect 0 "LibTorch: torch 2.11.0+cu130 cached in"
rm -rf "$tmp/home/ddpw"
setup MODULEPATH=/opt/modulefiles
expect 1 "load the site's pytorch module (clusters/<site>/env.sh)" "DDPW_TORCH_CUDA=cu126|cu128|cu130|cu132 scripts/setup.sh"
echo "PASS: the set-up installs the torch build asked for, from the index given, and says how when it cannot"
