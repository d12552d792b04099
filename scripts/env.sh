# Sourced by the course's scripts: where the build and the cached torch live.
# shellcheck shell=bash
DDPW_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DDPW_HOME=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
DDPW_BUILD=${DDPW_BUILD:-$DDPW_ROOT/build}
DDPW_BIN=$DDPW_BUILD/bin
# torchrun and the Python of the plots come from the set-up's venv when there is one.
if [ -d "$DDPW_HOME/venv/bin" ]; then PATH=$PATH:$DDPW_HOME/venv/bin; fi
export DDPW_ROOT DDPW_HOME DDPW_BUILD DDPW_BIN PATH
