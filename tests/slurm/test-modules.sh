#!/bin/bash
# defines: test-modules.sh — the sites' real clusters/<site>/env.sh, with a stand-in `module`
#          (fake-module.sh) that fails for the names in DDPW_FAKE_MODULES_MISSING, as Lmod does for a
#          name a site does not have.
#   On a login node (env.sh sourced to build): every site's file loads; one module that does not
#   load stops it with a message naming the module and how to find the right name, and the shell
#   that sourced it stays open.
#   In a job (a one-node Slurm cluster): only the "run" modules load, so a build module a site
#   renamed cannot stop a job; an unconfirmed run module that does not load is a warning; a
#   confirmed one ends the job at once with the same message (not later, in every rank).
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step1_multigpu_fork solutions/step2_env_launch
require_torchrun
source "$slurm_tests/fake-module.sh"

# ---- login node: source env.sh in a shell of its own, then show that the shell is still there.
# login_source SITE [MISSING...]: sets OUT to what the shell printed
login_source() {
  local site=$1; shift
  OUT=$(DDPW_FAKE_MODULES_MISSING="$*" bash -c '
    source "$1/tests/slurm/fake-module.sh"
    conda() { echo "conda $*"; }            # Della activates its environment with conda
    source "$1/clusters/$2/env.sh" && echo "env.sh loaded"
    echo "shell still open"' _ "$DDPW_ROOT" "$site" 2>&1)
}
declare -A site_name=([delta]=Delta [della]=Della [hipergator]=HiPerGator [puhti]=Puhti [supercloud]=SuperCloud)
declare -A missing=([delta]=cmake [della]=cudatoolkit [hipergator]=cuda [puhti]=cmake [supercloud]=gcc)
for site in delta della hipergator puhti supercloud; do
  login_source "$site"
  grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh did not load with every module there"; }
  login_source "$site" "${missing[$site]}"
  want="ddpw: error: module '${missing[$site]}' did not load (a name the course could not confirm for ${site_name[$site]}) (fix: find the name ${site_name[$site]} uses with \`module spider ${missing[$site]}\` (or \`module avail ${missing[$site]}\`), then fix clusters/$site/env.sh or point DDPW_SITE_ENV at your own copy)"
  grep -qxF -- "$want" <<< "$OUT" || { echo "$OUT"; fail "$site: no message naming the missing module '${missing[$site]}'"; }
  ! grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh went on after a module failed"; }
  grep -qx "shell still open" <<< "$OUT" || { echo "$OUT"; fail "$site: a failed module closed the shell that sourced env.sh"; }
  note "$site: login node: '${missing[$site]}' missing stops env.sh with the fix, the shell stays open"
done

# ---- jobs: the real env.sh (no DDPW_SITE_ENV), the stand-in `module` exported with the environment.
start_cluster single
unset DDPW_SITE_ENV

# Build modules that do not exist, and an unconfirmed run module: the job runs, with one warning.
DDPW_FAKE_MODULES_MISSING="cmake cuda nccl gcc" submit delta step2.sbatch 2 1
expect_success
expect_lines 1 "^ddpw: warning: module 'gcc' did not load \(a name the course could not confirm for Delta\); the job goes on"
expect_lines 0 "'(cmake|cuda|nccl)'"
expect_lines 1 "Epoch 1 \| train loss"
# Della's jobs load nothing: its whole module list is for the build.
DDPW_FAKE_MODULES_MISSING="anaconda3/2023.9 cudatoolkit gcc-toolset/12 cmake" submit della step2.sbatch 2 1
expect_success
expect_lines 1 "Epoch 1 \| train loss"
# torchrun comes from the site's pytorch module (here: the stand-in puts the test's torch on PATH).
submit puhti step2.sbatch 2 1
expect_success
expect_lines 1 "Epoch 1 \| train loss"
# A confirmed run module that does not load ends the job at once, saying which and how to fix it.
DDPW_FAKE_MODULES_MISSING=pytorch submit hipergator step1.sbatch 2 1
expect_failure "^ddpw: error: module 'pytorch' did not load \(fix: find the name HiPerGator uses with \`module spider pytorch\`"
expect_lines 1 "env.sh failed \(its message is above\)"
expect_lines 0 "Epoch 0"
[ "$JOB_SECONDS" -le 30 ] || fail "the job with a missing module took $JOB_SECONDS s to fail"
# SuperCloud's env.sh sources /etc/profile first, as its example does, then its four run modules.
submit supercloud step1.sbatch 2 1
expect_success
expect_lines 1 "Epoch 1 \| train loss"
echo "PASS: the sites' env.sh split build from run modules; a module that does not load says which and how to fix it"
