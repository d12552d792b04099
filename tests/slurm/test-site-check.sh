#!/bin/bash
# defines: test-site-check.sh — scripts/site-check roihu against a private Slurm cluster (3 nodes in
#          network namespaces: node1 and node2 with 4 gh200 each, node3 with 4 l4; a partition
#          gputest as Roihu's, reservations on the gh200 nodes and on the l4 node) and a module tree
#          that mirrors Roihu's SOURCES.md under Debian's Lmod. One cluster start for all cases:
#   1. all as the scripts ask: every check PASS (account and QoS SKIP: this cluster keeps no
#      accounts), the network job finds no internet and the MNIST files staged; exit 0. Each
#      *unconfirmed* row of Roihu's SOURCES.md is a row: module names by `module is-avail`, the
#      others by their command (--mem=0 PASS; gpuinteractive, not here: WARN), jobs and logins SKIP.
#   2. a module gone (python-pytorch): its row FAILs with what module spider offers and the fix.
#   3. a reservation of another GPU type (l4): FAIL, naming gpu:gh200 against gpu:l4, and the
#      torch build's check for the l4 runs (sm_89).
#   4. the scripts' partition gone (gputest deleted): FAIL, with what sinfo lists.
#   Each FAIL case exits 1 and says the fix; planted faults show each check can fail.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_torchrun
lmod_init=/usr/share/lmod/lmod/init/bash
[ -f "$lmod_init" ] || fail "Lmod is not installed: apt-get install lmod (scripts/setup.sh installs it)"
source "$slurm_tests/site-modulefiles.sh"
export DDPW_CLUSTER_GPU_TYPES="gh200 gh200 l4"
start_cluster netns 3
scontrol create PartitionName=gputest Nodes=ALL State=UP OverSubscribe=YES MaxTime=INFINITE ||
  fail "scontrol create partition refused"
scontrol create ReservationName=ws-gh200 Users=root Nodes=node1,node2 StartTime=now Duration=60 ||
  fail "scontrol create reservation (gh200) refused"
scontrol create ReservationName=ws-l4 Users=root Nodes=node3 StartTime=now Duration=60 ||
  fail "scontrol create reservation (l4) refused"
make_mnist_subset "$TEST_DIR/data"
export DDPW_VENV=${DDPW_TEST_TORCH_BIN%/bin}
export LMOD_SYSTEM_DEFAULT_MODULES=cuda/12.9.1   # `module reset`: Roihu-GPU's default CUDA (SOURCES.md)

set +u                # Lmod's set-up is not written for `set -u`
# shellcheck source=/dev/null
source "$lmod_init"
set -u
# check [CHANGE...] -- SITE-CHECK ARGS: runs scripts/site-check with a tree of Roihu's SOURCES.md
# names (CHANGEs as site-modulefiles.sh takes them); sets OUT and RC.
check() {
  local -a changes=()
  while [ "$1" != -- ]; do changes+=("$1"); shift; done
  shift
  local tree started=$SECONDS
  tree=$(mktemp -d "$TEST_DIR/tree.XXXXXX")
  site_modulefiles "$tree" "$DDPW_TEST_TORCH_BIN" roihu ${changes[@]+"${changes[@]}"}
  RC=0
  OUT=$(MODULEPATH=$tree timeout 300 "$DDPW_ROOT/scripts/site-check" roihu --install-dir "$TEST_DIR" --need-gb 1 \
          --data-dir "$TEST_DIR/data" "$@" 2>&1) || RC=$?
  echo "$OUT"
  note "site-check roihu $*: exit $RC in $((SECONDS - started)) s"
}
expect_row() {  # expect_row CHECK RESULT PATTERN: a row of the table (grep -E on the rest)
  grep -Eq -- "^$1 +\| $2 +\| $3" <<< "$OUT" || { echo "$OUT"; fail "no row '$1 | $2 | $3'"; }
}

# 1. All as the scripts ask: the workshop's reservation of gh200 nodes.
check -- --account project_0 --reservation ws-gh200
[ "$RC" = 0 ] || { echo "$OUT"; fail "site-check failed where everything is as the scripts ask"; }
expect_row "module: PyTorch" PASS "python-pytorch/2.10$"
expect_row "module: CUDA toolkit" PASS "cuda/12.9.1$"
expect_row "partition gputest" PASS "3 nodes, gpu:gh200, gpu:l4"
expect_row "GPU type gpu:gh200" PASS "in partition gputest"
expect_row "reservation ws-gh200" PASS "node\[1-2\]"
expect_row "LibTorch" PASS "the set-up's venv .*: torch [0-9.]+.*, CMake files in .*; in [0-9.]+ to [0-9.]+ \(cmake/LibTorch\.cmake\)"
# The build's kernels: torch's own list where it gives one without a GPU (2.15 does), else cu128's.
expect_row "torch build for gpu:gh200" PASS "sm_90 in (cu128: sm_75 to sm_120|the torch env.sh gives: .*sm_90)"
expect_row "sbatch step2-2nodes.sbatch" PASS ""
expect_row "compute node network" PASS "no internet on the compute nodes"
expect_row "data staged in $TEST_DIR/data" PASS "the four MNIST files"
expect_row "install in $TEST_DIR" PASS ""
n=$(grep -c "| FAIL" <<< "$OUT" || true)
[ "$n" = 0 ] || { echo "$OUT"; fail "$n FAIL rows where everything is as the scripts ask"; }
grep -q "^# [0-9]* PASS, 0 FAIL, [0-9]* SKIP, [0-9]* WARN: OK$" <<< "$OUT" || { echo "$OUT"; fail "no OK summary line"; }
# The unconfirmed facts, one row each; a WARN only where a fact does not hold on this cluster.
expect_row "unconfirmed: module reset" PASS "start from Roihu-GPU's defaults.*: .module reset && module list."
expect_row "unconfirmed: python-pytorch" PASS ".*module is-avail python-pytorch."
expect_row "unconfirmed: cuda/12" PASS ".*module is-avail cuda/12."
expect_row "unconfirmed: --mem=0" PASS ".*sbatch --test-only --reservation=ws-gh200 --account=project_0 -p gputest"
expect_row "unconfirmed: sbatch --partition=gpuinteractive" WARN ".*exit 1.* \| it does not hold here: correct clusters/roihu/SOURCES.md"
expect_row "unconfirmed: cu130" SKIP ".* \| a job or a login: run by hand: srun -A project_0"
expect_row "unconfirmed: no internet" PASS ".*see the compute node network row"
n=$(grep -Ev "^unconfirmed: " <<< "$OUT" | grep -c "| WARN" || true)
[ "$n" = 0 ] || { echo "$OUT"; fail "$n WARN rows besides the unconfirmed facts'"; }

# 2. A module gone: the PyTorch role has no name left.
check 'python-pytorch/*' -- --account project_0 --reservation ws-gh200 --no-job
[ "$RC" = 1 ] || { echo "$OUT"; fail "site-check exit $RC with the python-pytorch module gone, expected 1"; }
expect_row module FAIL "no PyTorch module loaded: Roihu has none of python-pytorch/2.10 python-pytorch; .module spider python-pytorch. offers: nothing \| module spider python-pytorch lists the versions Roihu has"

# 3. The reservation holds another GPU type than the scripts ask for.
check -- --account project_0 --reservation ws-l4 --no-job
[ "$RC" = 1 ] || { echo "$OUT"; fail "site-check exit $RC with an l4 reservation, expected 1"; }
asking=$(grep -l '^#SBATCH --gres=gpu:gh200' "$DDPW_ROOT"/clusters/roihu/*.sbatch | wc -l)  # every script of the folder
expect_row "reservation ws-l4: gpu:gh200" FAIL "the reservation holds gpu:l4; $asking scripts ask gpu:gh200 \(allreduce.sbatch, .*step3.sbatch.*\) \| sbatch --reservation=ws-l4 --gres=gpu:N"
expect_row "torch build for gpu:l4" PASS "sm_89"
expect_row "sbatch step3.sbatch" FAIL ""

# 4. The scripts' partition does not exist.
scontrol delete PartitionName=gputest || fail "scontrol delete partition refused"
check -- --account project_0 --no-job
[ "$RC" = 1 ] || { echo "$OUT"; fail "site-check exit $RC without the partition gputest, expected 1"; }
expect_row "partition gputest" FAIL "no such partition \(sinfo lists: debug\) \| sbatch --partition=<one sinfo -s lists>"
echo "PASS: scripts/site-check roihu: all PASS as the scripts ask; a missing module, a reservation of another GPU type and a missing partition each FAIL with the fix"
