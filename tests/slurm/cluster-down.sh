#!/bin/bash
# defines: cluster-down.sh DIR — tears down what cluster-up.sh DIR started: its jobs, then its daemons
#          by PID file, then any process left in its namespaces (by PID), then the namespaces, veths and
#          bridge it recorded. Safe to run twice or on a half-built cluster. The guard route
#          (unreachable 10.77.0.0/16) stays on purpose: a stale client then fails locally.
dir=${1:?usage: cluster-down.sh DIR}
[ -d "$dir" ] || exit 0

# Jobs first, while the controller is still up, so their processes end the normal way.
if [ -f "$dir/etc/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
  export SLURM_CONF=$dir/etc/slurm.conf
  jobs=$(timeout 5 squeue -h -o %A 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 5 scancel $jobs 2>/dev/null
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

stop() {  # stop PIDFILE: TERM, wait up to 5 s, then KILL
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || { rm -f "$1"; return 0; }
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$1"
}
for f in "$dir"/slurmd-*.pid; do [ -e "$f" ] && stop "$f"; done
stop "$dir/slurmctld.pid"
stop "$dir/munged.pid"

# Whatever still lives in our namespaces (a stray slurmstepd or task) was started by this cluster.
if [ -f "$dir/netns" ]; then
  while read -r ns; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done < "$dir/netns"
  rm -f "$dir/netns"
fi
if [ -f "$dir/veths" ]; then
  while read -r link; do ip link del "$link" 2>/dev/null; done < "$dir/veths"
  rm -f "$dir/veths"
fi
if [ -f "$dir/bridge" ]; then
  ip link del "$(cat "$dir/bridge")" 2>/dev/null
  rm -f "$dir/bridge"
fi
if [ -f /run/ddpw-slurm-test.clusters ]; then
  dir_abs=$(cd "$dir" && pwd)
  grep -vxF -- "$dir_abs" /run/ddpw-slurm-test.clusters > /run/ddpw-slurm-test.clusters.new || true
  mv /run/ddpw-slurm-test.clusters.new /run/ddpw-slurm-test.clusters
fi
exit 0
