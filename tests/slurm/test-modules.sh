#!/bin/bash
# defines: test-modules.sh — the sites' real clusters/<site>/env.sh under Debian's Lmod, with a
#          module tree that mirrors the names each site's SOURCES.md lists (site-modulefiles.sh),
#          not those env.sh asks for; a module a site does not have is one left out of the tree,
#          and Lmod refuses it as the site's would.
#   On a login node (env.sh sourced to build), per site: with the table's names every role loads
#   its first choice; with a first choice gone (a module update), the next one SOURCES.md names,
#   and env.sh says so; with none of a role's names left, env.sh stops with what `module spider`
#   offers and the fix, and the shell that sourced it stays open.
#   In a job (a one-node Slurm cluster): only the "run" (and "job") modules load, so a build module
#   a site renamed cannot stop a job; an unconfirmed run or job role of which nothing loads is a
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
# tree SITE [CHANGE...]: prints a fresh module tree of SITE's SOURCES.md names, with those changes
# (site-modulefiles.sh: NAME or GLOB left out, +NAME added).
tree() {
  local dir
  dir=$(mktemp -d "$trees/tree.XXXXXX")
  site_modulefiles "$dir" "$DDPW_TEST_TORCH_BIN" "$@"
  echo "$dir"
}

# ---- login node: source env.sh in a shell of its own, then show that the shell is still there.
# login_source SITE [CHANGE...]: sets OUT to what the shell printed
login_source() {
  local site=$1
  OUT=$(MODULEPATH=$(tree "$@") bash -c '
    source "$2" && export MODULEPATH
    source "$1/clusters/$3/env.sh" && echo "env.sh loaded"
    echo "shell still open"' _ "$DDPW_ROOT" "$lmod_init" "$site" 2>&1)
}
declare -A site_name=([delta]=Delta [della]=Della [hipergator]=HiPerGator [puhti]=Puhti [roihu]=Roihu [supercloud]=SuperCloud)
# A module update, site by site. first: a role, its first choice, a version the site may have added
# meanwhile (one the table does not name: `cuda/12` or the bare `pytorch` takes it), and what env.sh
# must load when the first choice is gone: the next name SOURCES.md gives. Delta's roles have one
# name each. none: a role, the names env.sh tries, what to leave out so that none of them is left,
# and what `module spider` then offers.
declare -A first=([della]="Python|anaconda3/2025.12||anaconda3/2023.9"
                  [hipergator]="CUDA toolkit|cuda/12.8.1|+cuda/12.4.0|cuda/12.4.0 (cuda/12)"
                  [puhti]="PyTorch|pytorch/2.5|+pytorch/2.4|pytorch/2.4 (pytorch)"
                  [roihu]="CUDA toolkit|cuda/12.9.1|+cuda/12.4.0|cuda/12.4.0 (cuda/12)"
                  [supercloud]="MPI|mpi/openmpi-4.1.5||mpi/openmpi-5.0.5")
declare -A none=([delta]="CUDA toolkit|cudatoolkit/26.5_13.2|cudatoolkit/26.5_13.2|cudatoolkit/11.7 cudatoolkit/25.3_12.8"
                 [della]="CUDA toolkit|cudatoolkit/12.9 cudatoolkit/12.8 cudatoolkit/12|cudatoolkit/12*|cudatoolkit/11.7"
                 [hipergator]="CUDA toolkit|cuda/12.8.1 cuda/12|cuda/12*|cuda/11.7.0"
                 [puhti]="CUDA toolkit|cuda/12.6.0 cuda/12|cuda/12*|cuda/11.7.0"
                 [roihu]="CUDA toolkit|cuda/12.9.1 cuda/12|cuda/12*|cuda/11.7.0 cuda/13.1.1"
                 [supercloud]="MPI|mpi/openmpi-4.1.5 mpi/openmpi-5.0.5|mpi/*|")
for site in delta della hipergator puhti roihu supercloud; do
  name=${site_name[$site]}
  # Every role finds its first choice among the site's own names.
  login_source "$site"
  grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh did not load with the names of its SOURCES.md"; }
  ! grep -q "is not at $name" <<< "$OUT" || { echo "$OUT"; fail "$site: a first choice is missing from its own SOURCES.md's names"; }
  if [ -n "${first[$site]:-}" ]; then
    IFS='|' read -r role gone added next <<< "${first[$site]}"
    login_source "$site" "$gone" ${added:+"$added"}
    grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh stopped when $gone was gone, though SOURCES.md names another $role"; }
    grep -qxF "ddpw: $role: $next; the first choice, $gone, is not at $name" <<< "$OUT" ||
      { echo "$OUT"; fail "$site: no line saying it loaded $next for the $role in place of $gone"; }
    note "$site: $gone gone: env.sh loads $next and says so"
  fi
  IFS='|' read -r role tried leave offers <<< "${none[$site]}"
  login_source "$site" "$leave"
  family=${tried%%/*}
  want="ddpw: error: no $role module loaded: $name has none of $tried"
  line=$(grep -F -- "$want" <<< "$OUT" || true)
  [ -n "$line" ] || { echo "$OUT"; fail "$site: no message naming the $role names ($tried) that are gone"; }
  grep -qF -- "\`module spider $family\` offers: ${offers:-nothing} (fix: module spider $family lists the versions $name has: put the one to use first in the $role line of clusters/$site/env.sh, with its source in clusters/$site/SOURCES.md" <<< "$line" ||
    { echo "$OUT"; fail "$site: the message does not say what module spider $family offers (${offers:-nothing}) and the fix"; }
  grep -q 'Lmod has detected the following error' <<< "$OUT" || { echo "$OUT"; fail "$site: Lmod's own message is missing"; }
  ! grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh went on without a $role"; }
  grep -qx "shell still open" <<< "$OUT" || { echo "$OUT"; fail "$site: a failed module closed the shell that sourced env.sh"; }
  note "$site: no $role left ($leave gone): env.sh stops with what module spider offers and the fix; the shell stays open"
done

# ---- jobs: the real env.sh (no DDPW_SITE_ENV); Lmod's `module` (exported by its init) and the
# tree (MODULEPATH) go to the job with the environment, as a site's login shell passes them on.
unset DDPW_SITE_ENV
set +u                # Lmod's set-up is not written for `set -u`
# shellcheck source=/dev/null
source "$lmod_init"
set -u
export MODULEPATH

# Delta: module reset (its RH9.6 defaults: the CUDA 13.2 toolkit). Your own cu128 torch (the
# alternative to pytorch-conda/2.12): the CUDA 12 toolkit in the default's place; an unconfirmed job
# module that does not load: one warning.
export LMOD_SYSTEM_DEFAULT_MODULES=cudatoolkit/26.5_13.2
DDPW_TORCH_CUDA=cu128 MODULEPATH=$(tree delta aws-ofi-nccl/1.14.2) submit delta step2.sbatch 2 1
expect_success
expect_lines 1 "^ddpw: warning: no NCCL network plugin module loaded \(aws-ofi-nccl/1.14.2: names the course could not confirm for Delta; .module spider aws-ofi-nccl. offers: aws-ofi-nccl/1.19.2\); the job goes on"
expect_lines 1 "^ddpw: (warning|error)|module reset failed"
expect_lines 1 "^ddpw: CUDA toolkit: cudatoolkit/25.3_12.8$"
expect_lines 1 "Epoch 1 \| train loss"
# An RH9.4 node, where NCSA's pytorch-conda/2.12 refuses to load: the cu130 job ends at once, naming
# NCSA's pytorch-conda/2.8 there and the fix (a cu128 venv).
MODULEPATH=$(tree delta '!pytorch-conda/2.12') submit delta step2.sbatch 2 1
expect_failure "^ddpw: error: pytorch-conda/2.12 did not load on .*use pytorch-conda/2.8 there.*export DDPW_TORCH_CUDA=cu128"
expect_lines 0 "Epoch 0"
[ "$JOB_SECONDS" -le 30 ] || fail "the job on an RH9.4 stand-in took $JOB_SECONDS s to fail"
# Build modules that do not exist cannot stop a job: Della's jobs load anaconda3 and the venv
# (torchrun); its other modules are for the build.
MODULEPATH=$(tree della 'cudatoolkit/*' 'gcc-toolset/*' 'cmake/*') submit della step2.sbatch 2 1
expect_success
expect_lines 0 "^ddpw: (warning|error)|cudatoolkit|gcc-toolset|cmake"
expect_lines 1 "Epoch 1 \| train loss"
# torchrun comes from the site's python-pytorch module (here: the tree's puts the test's torch on PATH).
MODULEPATH=$(tree roihu) submit roihu step2.sbatch 2 1
expect_success
expect_lines 1 "^ddpw: PyTorch: python-pytorch/2.10$"
expect_lines 1 "Epoch 1 \| train loss"
# A confirmed run role of which nothing loads ends the job at once, saying which and how to fix it.
MODULEPATH=$(tree puhti 'pytorch/*') submit puhti step1.sbatch 2 1
expect_failure "^ddpw: error: no PyTorch module loaded: Puhti has none of pytorch/2.5 pytorch; .module spider pytorch. offers: nothing \(fix: module spider pytorch lists"
expect_lines 1 "env.sh failed \(its message is above\)"
expect_lines 0 "Epoch 0"
[ "$JOB_SECONDS" -le 30 ] || fail "the job with a missing module took $JOB_SECONDS s to fail"
# SuperCloud's env.sh sources /etc/profile first, as its example does (Lmod's own set-up). The
# example's OpenMPI gone (the risk its SOURCES.md names): the job loads the next one and runs.
MODULEPATH=$(tree supercloud mpi/openmpi-4.1.5) submit supercloud step1.sbatch 2 1
expect_success
expect_lines 1 "^ddpw: MPI: mpi/openmpi-5.0.5; the first choice, mpi/openmpi-4.1.5, is not at SuperCloud$"
expect_lines 1 "Epoch 1 \| train loss"
echo "PASS: the sites' env.sh under Lmod with mirrors of their SOURCES.md: each role loads its first choice, the next when the first is gone, and stops with what module spider offers and the fix when none is left; jobs load only run modules"
