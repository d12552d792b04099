# defines: the test cluster's stand-in for clusters/<site>/env.sh (given as DDPW_SITE_ENV): what a
#          site's `module load pytorch` provides here — torchrun (and its python) on PATH.
# shellcheck shell=bash
if [ -n "${DDPW_TEST_TORCH_BIN:-}" ]; then export PATH="$DDPW_TEST_TORCH_BIN:$PATH"; fi
