#!/bin/bash
# defines: test-modules.sh — the sites' real clusters/<site>/env.sh under Debian's Lmod, with a
#          module tree that mirrors each site's names (site-modulefiles.sh); a module a site does
#          not have is one left out of the tree, and Lmod refuses it as the site's would.
#   On a login node (env.sh sourced to build): every site's file loads; one module that does not
#   load stops it with a message naming the module and how to find the right name, and the shell
#   that sourced it stays open.
#   In a job (a one-node Slurm cluster): only the "run" (and "job") modules load, so a build module
#   a site renamed cannot stop a job; an unconfirmed run or job module that does not load is a
#   warning; a confirmed one ends the job at once with the same message (not later, in every rank).
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step1_multigpu_fork solutions/step2_env_launch
require_torchrun
lmod_init=/usr/share/lmod/lmod/init/bash
[ -f "$lmod_init" ] || fail "Lmod is not installed: apt-get install lmod (scripts/setup.sh installs it)"
source "$slurm_tests/site-modulefiles.sh"
# The sites' venv (ddpw_venv): the test's torch.
export DDPW_VENV=${DDPW_TEST_TORCH_BIN%/bin}
[ -x "$DDPW_VENV/bin/python3" ] || fail "$DDPW_TEST_TORCH_BIN is not a venv's bin (no python3 beside torchrun)"
start_cluster single   # (its folder also holds the module trees: removed with it)
trees=$TEST_DIR/module-trees
mkdir -p "$trees"
# tree [MISSING...]: prints a fresh module tree without those modules.
tree() {
  local dir
  dir=$(mktemp -d "$trees/tree.XXXXXX")
  site_modulefiles "$dir" "$DDPW_TEST_TORCH_BIN" "$@"
  echo "$dir"
}

# ---- login node: source env.sh in a shell of its own, then show that the shell is still there.
# login_source SITE [MISSING...]: sets OUT to what the shell printed
login_source() {
  local site=$1; shift
  OUT=$(MODULEPATH=$(tree "$@") bash -c '
    source "$2" && export MODULEPATH
    source "$1/clusters/$3/env.sh" && echo "env.sh loaded"
    echo "shell still open"' _ "$DDPW_ROOT" "$lmod_init" "$site" 2>&1)
}
declare -A site_name=([delta]=Delta [della]=Della [hipergator]=HiPerGator [puhti]=Puhti [roihu]=Roihu [supercloud]=SuperCloud)
# The name env.sh asks for | the tree's modules to leave out (all versions of an unversioned name).
declare -A missing=([delta]="cudatoolkit/25.9_13.0|cudatoolkit/25.9_13.0" [della]="cudatoolkit/12.8|cudatoolkit/12.8"
                    [hipergator]="cuda/12.8.1|cuda/12.8.1" [puhti]="cmake|cmake/3.25" [roihu]="cuda/12.8|cuda/12.8 cuda/12.8.1"
                    [supercloud]="gcc|gcc/14.2.0 gcc/11.3.0 gcc/12")
for site in delta della hipergator puhti roihu supercloud; do
  login_source "$site"
  grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh did not load with every module there"; }
  name=${missing[$site]%%|*}
  read -r -a leave_out <<< "${missing[$site]#*|}"
  login_source "$site" "${leave_out[@]}"
  want="ddpw: error: module '$name' did not load (a name the course could not confirm for ${site_name[$site]}) (fix: find the name ${site_name[$site]} uses with \`module spider ${name%%/*}\` (or \`module avail ${name%%/*}\`), then fix clusters/$site/env.sh or point DDPW_SITE_ENV at your own copy)"
  grep -qxF -- "$want" <<< "$OUT" || { echo "$OUT"; fail "$site: no message naming the missing module '$name'"; }
  grep -q 'Lmod has detected the following error' <<< "$OUT" || { echo "$OUT"; fail "$site: Lmod's own message is missing"; }
  ! grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh went on after a module failed"; }
  grep -qx "shell still open" <<< "$OUT" || { echo "$OUT"; fail "$site: a failed module closed the shell that sourced env.sh"; }
  note "$site: login node: '$name' missing stops env.sh with the fix, the shell stays open"
done

# ---- jobs: the real env.sh (no DDPW_SITE_ENV); Lmod's `module` (exported by its init) and the
# tree (MODULEPATH) go to the job with the environment, as a site's login shell passes them on.
unset DDPW_SITE_ENV
set +u                # Lmod's set-up is not written for `set -u`
# shellcheck source=/dev/null
source "$lmod_init"
set -u
export MODULEPATH

# Delta: module reset (its defaults: a CUDA 12.8 toolkit, as Delta's RH9 loads), the torch module,
# the CUDA 13 toolkit in its place; an unconfirmed job module that does not load: one warning.
export LMOD_SYSTEM_DEFAULT_MODULES=cudatoolkit/25.3_12.8
MODULEPATH=$(tree aws-ofi-nccl/1.14.2) submit delta step2.sbatch 2 1
expect_success
expect_lines 1 "^ddpw: warning: module 'aws-ofi-nccl/1.14.2' did not load \(a name the course could not confirm for Delta\); the job goes on"
expect_lines 1 "did not load|module reset failed"
expect_lines 1 "Epoch 1 \| train loss"
# Build modules that do not exist cannot stop a job: Della's jobs load anaconda3 and the venv
# (torchrun); its other modules are for the build.
MODULEPATH=$(tree cudatoolkit/12.8 gcc-toolset/12 cmake/3.25) submit della step2.sbatch 2 1
expect_success
expect_lines 0 "did not load|cudatoolkit|gcc-toolset|cmake"
expect_lines 1 "Epoch 1 \| train loss"
# torchrun comes from the site's pytorch module (here: the tree's puts the test's torch on PATH).
MODULEPATH=$(tree) submit roihu step2.sbatch 2 1
expect_success
expect_lines 1 "Epoch 1 \| train loss"
# A confirmed run module that does not load ends the job at once, saying which and how to fix it.
MODULEPATH=$(tree pytorch/2.5 pytorch/2.10) submit puhti step1.sbatch 2 1
expect_failure "^ddpw: error: module 'pytorch' did not load \(fix: find the name Puhti uses with \`module spider pytorch\`"
expect_lines 1 "env.sh failed \(its message is above\)"
expect_lines 0 "Epoch 0"
[ "$JOB_SECONDS" -le 30 ] || fail "the job with a missing module took $JOB_SECONDS s to fail"
# SuperCloud's env.sh sources /etc/profile first, as its example does (Lmod's own set-up), then its
# run module (mpirun) and the venv.
MODULEPATH=$(tree) submit supercloud step1.sbatch 2 1
expect_success
expect_lines 1 "Epoch 1 \| train loss"
echo "PASS: the sites' env.sh under Lmod split build from run modules; a module that does not load says which and how to fix it"
