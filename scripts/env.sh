# Sourced by the course's scripts: where the build and the cached torch live.
# shellcheck shell=bash
DDPW_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DDPW_HOME=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
DDPW_BUILD=${DDPW_BUILD:-$DDPW_ROOT/build}
DDPW_BIN=$DDPW_BUILD/bin
# torchrun and the Python of the plots come from the set-up's venv. On PATH even before it exists:
# on a fresh machine setup.sh creates it after this file is sourced, and the same script then
# needs torchrun (the shell looks a command up at each call, so a folder made later is found).
case ":$PATH:" in
  *":$DDPW_HOME/venv/bin:"*) ;;
  *) PATH=$PATH:$DDPW_HOME/venv/bin ;;
esac
# Root's tools (slurmctld, munged, useradd, runuser: /usr/sbin) are not on the PATH that Debian's
# `su` without - keeps: the course would skip its Slurm steps, the tests' clusters would not start.
case ":$PATH:" in
  *:/usr/sbin:*) ;;
  *) PATH=$PATH:/usr/sbin:/sbin ;;
esac
export DDPW_ROOT DDPW_HOME DDPW_BUILD DDPW_BIN PATH
