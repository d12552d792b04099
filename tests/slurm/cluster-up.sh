#!/bin/bash
# defines: cluster-up.sh — a throw-away Slurm cluster on THIS machine for the tests (root, no systemd).
#   single DIR       one node (this host), daemons in the root namespaces, loopback only.
#   netns  DIR [N]   N nodes node1..nodeN (default 2), each slurmd in its own network namespace on a
#                    private bridge (10.77.0.0/24), with its own hostname and /etc/hosts.
# Every node has 288 CPUs (a Roihu GH200 node's count), 256 GB and 4 GPUs *for Slurm's bookkeeping
# only* (gres files are /dev/null clones), so the sites' #SBATCH lines (--cpus-per-task=128,
# --mem=32G, --gpus-per-node=2) are accepted, and the features projects and scratch (Delta's
# --constraint names its file systems).
# MUNGE runs privately (own key and socket under DIR); nothing under /etc is touched. Each cluster
# is listed in /run/ddpw-slurm-test.clusters until it is torn down.
# One netns cluster at a time (they share the bridge and its subnet): a second cluster-up waits for
# the first to be taken down (DDPW_CLUSTER_WAIT seconds, default 900) and takes down one whose
# controller is dead (left by a killed run), instead of clashing on the bridge.
# Settings (environment):
#   DDPW_CLUSTER_GPUS=N      GPUs per node for Slurm's bookkeeping (default 4): many jobs on one node
#   DDPW_CLUSTER_GPU_TYPES="gh200 l4"  the nodes' GPU types, in node order (the last for the nodes
#                            after it), as a site's --gres=gpu:TYPE:N names them; default untyped
#   DDPW_CLUSTER_BIND=1      (single mode) the node has this machine's real CPUs and srun binds each
#                            task to the CPUs of its step (TaskPlugin=task/affinity), as on a site:
#                            a task's affinity mask then shows how many CPUs srun gave it
#   DDPW_CLUSTER_USERS=1     non-root users may submit: DIR, its config and the MUNGE socket are
#                            readable by all (not the key), and inside the nodes the paths of
#                            DDPW_CLUSTER_SHARE (colon-separated folders, e.g. a venv under /root or
#                            under a mktemp -d home) are visible to them under the same names, also
#                            when a folder on their way is closed to others (/root is 0700).
# Afterwards: source DIR/env (sets SLURM_CONF); tear down with cluster-down.sh DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PATH=$PATH:/usr/sbin:/sbin  # mungekey, munged, slurmd: root's tools, not on the PATH `su` (without -) keeps

mode=${1:?usage: cluster-up.sh single|netns DIR [NNODES]}
dir=${2:?usage: cluster-up.sh single|netns DIR [NNODES]}
nodes=${3:-2}
cpus=288 memory_mb=256000 gpus=${DDPW_CLUSTER_GPUS:-4}
task_plugin=task/none task_param="" bind=${DDPW_CLUSTER_BIND:-0}
users=${DDPW_CLUSTER_USERS:-0}
subnet=10.77.0           # netns mode: controller .1, nodeI .(10+I)
bridge=ddpwbr0 netns_prefix=ddpw-node veth_prefix=ddpwv

die() { echo "cluster-up: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (daemons, namespaces)"
for tool in slurmctld slurmd munged mungekey sinfo; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || die "$tool not found: apt-get install slurm-wlm munge"
done
[[ $gpus =~ ^[1-9][0-9]?$ ]] || die "DDPW_CLUSTER_GPUS must be 1-99, got '$gpus'"
[ "$bind" = 0 ] || [ "$mode" = single ] || die "DDPW_CLUSTER_BIND=1 needs single mode (one node: this machine's CPUs)"
[ "$bind" = 0 ] || { cpus=$(nproc --all); task_plugin=task/affinity; task_param=TaskPluginParam=Cores; }
case $mode in
  single) nodes=1 ;;
  netns) [[ $nodes =~ ^[1-9]$ ]] || die "NNODES must be 1-9, got '$nodes'" ;;
  *) die "MODE must be single or netns, got '$mode'" ;;
esac
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)

# One cluster-up at a time (fd 8, never inherited by the daemons: 8>&- below), and in netns mode
# one cluster at a time: wait while another one holds the bridge.
if [ "$mode" = netns ]; then
  wait_s=${DDPW_CLUSTER_WAIT:-900}
  exec 8> /run/ddpw-slurm-cluster-up.lock
  flock -w "$wait_s" 8 || die "another cluster-up.sh held /run/ddpw-slurm-cluster-up.lock for $wait_s s"
  deadline=$((SECONDS + wait_s)) said=0
  while ip link show "$bridge" >/dev/null 2>&1; do
    # A listed cluster whose controller is dead was left by a killed run: take it down.
    if [ -f /run/ddpw-slurm-test.clusters ]; then
      while read -r other; do
        [ -f "$other/bridge" ] || continue
        pid=$(cat "$other/slurmctld.pid" 2>/dev/null || true)
        if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
          echo "cluster-up: taking down $other (its controller is gone: left by a killed run)" >&2
          "$here/cluster-down.sh" "$other" 8>&- || true
        fi
      done < <(cat /run/ddpw-slurm-test.clusters)
    fi
    ip link show "$bridge" >/dev/null 2>&1 || break
    [ "$SECONDS" -lt "$deadline" ] ||
      die "bridge $bridge still exists after $wait_s s: another test cluster is up (see /run/ddpw-slurm-test.clusters; cluster-down.sh DIR takes it down)"
    [ $said = 1 ] || echo "cluster-up: another test cluster holds bridge $bridge; waiting up to $wait_s s for it to be taken down" >&2
    said=1
    sleep 2
  done
fi
# Every cluster is listed here until cluster-down.sh removes it, so one left by a killed run can
# be found and taken down later (tests/slurm/lib.sh does, before starting its own).
echo "$dir" >> /run/ddpw-slurm-test.clusters
# Whatever fails below, take down what was already started (daemons, namespaces, bridge).
up=0
trap '[ $up = 1 ] || { echo "cluster-up: failed; tearing down what it started" >&2; "$here/cluster-down.sh" "$dir"; }' EXIT
mkdir -p "$dir"/{etc,state,log,spool,tmp,dev,munge,munge-socket}
chmod 0700 "$dir/munge"
if [ "$users" = 1 ]; then   # other users reach the config and the socket, never the key
  chmod 0755 "$dir" "$dir/etc" "$dir/munge-socket"
else
  chmod 0700 "$dir/munge-socket"
fi
echo "$mode" > "$dir/mode"

# A TCP port nobody listens on (the controller's, and slurmd's in single mode).
free_port() {
  local port
  for port in $(shuf -i 20000-29999 -n 200); do
    [ -n "$(ss -Htln "sport = :$port")" ] || { echo "$port"; return; }
  done
  die "no free TCP port found"
}

# ---- MUNGE: a private daemon, key and socket (Slurm is told via AuthInfo=socket=...)
socket=$dir/munge-socket/munge.socket
mungekey --create --keyfile="$dir/munge/munge.key" 2>/dev/null || die "mungekey could not create $dir/munge/munge.key (apt-get install munge)"
/usr/sbin/munged --force --socket="$socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" 8>&-
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || die "munged did not start (see $dir/log/munged.log)"
cp "$dir/munge/munged.pid" "$dir/munged.pid"

# ---- network
host=$(hostname -s)
if [ "$mode" = netns ]; then
  ctl_addr=$subnet.1
  # Guard first, never removed: traffic for 10.77/16 that is not on our bridge fails here
  # ("No route to host") instead of following the default route off the machine.
  routes=$(ip route show)   # (not piped into grep -q: with pipefail, SIGPIPE would read as "absent")
  grep -q '^unreachable 10.77.0.0/16' <<< "$routes" || ip route add unreachable 10.77.0.0/16
  ip link add "$bridge" type bridge && echo "$bridge" > "$dir/bridge"
  ip addr add "$ctl_addr/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq "$nodes"); do
    ip netns add "$netns_prefix$i" && echo "$netns_prefix$i" >> "$dir/netns"
    ip link add "$veth_prefix$i" type veth peer name eth0 netns "$netns_prefix$i"
    echo "$veth_prefix$i" >> "$dir/veths"
    ip link set "$veth_prefix$i" master "$bridge" up
    ip -n "$netns_prefix$i" addr add "$subnet.$((10 + i))/24" dev eth0
    ip -n "$netns_prefix$i" link set eth0 up
    ip -n "$netns_prefix$i" link set lo up
  done
  { echo "127.0.0.1 localhost"; echo "$ctl_addr $host"
    for i in $(seq "$nodes"); do echo "$subnet.$((10 + i)) node$i"; done; } > "$dir/etc/hosts"
  node_names=$(for i in $(seq "$nodes"); do printf 'node%s ' "$i"; done)
else
  ctl_addr=127.0.0.1
  node_names=$host
fi

# ---- fake GPUs: character devices like /dev/null, enough for Slurm to count and hand them out
for g in $(seq 0 $((gpus - 1))); do
  [ -e "$dir/dev/gpu$g" ] || mknod "$dir/dev/gpu$g" c 1 3
done

# ---- configuration
ctl_port=$(free_port)
slurmd_port=6818; [ "$mode" = single ] && slurmd_port=$(free_port)
cat > "$dir/etc/slurm.conf" <<CONF
ClusterName=ddpwtest
SlurmctldHost=$host($ctl_addr)
SlurmctldPort=$ctl_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again
AuthInfo=socket=$socket,cred_expire=5
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
$task_param
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# The schedulers look every 1-2 s (defaults: backfill 30 s, main 60 s): a requeued job may start
# again cred_expire + 1 s after its requeue, and then waited for the backfill's next pass (21 s of
# each requeue's ~27 s; slurm.requeue 100 -> 53 s, the Slurm tests 653 -> 534 s, 2026-12-02).
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# a node may declare more CPUs, memory and GPUs than the machine has (no "Low CPUs" drain)
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
InactiveLimit=0
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
Waittime=0
CONF
read -r -a gpu_types <<< "${DDPW_CLUSTER_GPU_TYPES:-}"
i=0
for n in $node_names; do
  addr=127.0.0.1; [ "$mode" = netns ] && addr=$subnet.$((10 + ${n#node}))
  type=""   # DDPW_CLUSTER_GPU_TYPES: the i-th node's GPU type (the last one for the nodes after it)
  [ ${#gpu_types[@]} = 0 ] || type=${gpu_types[$((i < ${#gpu_types[@]} ? i : ${#gpu_types[@]} - 1))]}
  i=$((i + 1))
  echo "NodeName=$n NodeHostname=$n NodeAddr=$addr CPUs=$cpus RealMemory=$memory_mb Gres=gpu:${type:+$type:}$gpus Features=projects,scratch State=UNKNOWN"
  echo "NodeName=$n Name=gpu ${type:+Type=$type }File=$dir/dev/gpu[0-$((gpus - 1))]" >> "$dir/etc/gres.conf"
done >> "$dir/etc/slurm.conf"
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$dir/etc/slurm.conf"
export SLURM_CONF=$dir/etc/slurm.conf
echo "export SLURM_CONF=$SLURM_CONF" > "$dir/env"

# ---- paths the users' jobs need that lie in a folder only root may enter (a venv under /root, a
# set-up home made by mktemp -d; netns nodes only): inside each node's mount namespace that folder
# becomes a readable one holding just those paths, bound from the real ones.
# private_folder PATH: the outermost folder on the way to PATH that others may not enter; none: "".
private_folder() {
  local part walked="" parts perm
  IFS=/ read -r -a parts <<< "${1#/}"
  for part in "${parts[@]}"; do
    walked+=/$part
    perm=$(stat -c %A "$walked")
    case ${perm:9:1} in x | t) ;; *) echo "$walked"; return 0 ;; esac
  done
}
share_root=""
if [ "$users" = 1 ] && [ "$mode" = netns ] && [ -n "${DDPW_CLUSTER_SHARE:-}" ]; then
  declare -A views=()
  IFS=: read -r -a shared <<< "$DDPW_CLUSTER_SHARE"
  for path in "${shared[@]}"; do
    [ -d "$path" ] || die "DDPW_CLUSTER_SHARE: '$path' is not a folder"
    private=$(private_folder "$path")
    [ -n "$private" ] || continue  # others may reach it already
    [ "$private" != "$path" ] || die "DDPW_CLUSTER_SHARE: '$path' itself is closed to others: share what is inside it"
    if [ -z "${views[$private]:-}" ]; then
      views[$private]=$dir/view${#views[@]}
      mkdir -p "${views[$private]}" && chmod 0755 "${views[$private]}"
    fi
    inside=${views[$private]}/${path#"$private"/}
    (umask 022 && mkdir -p "$inside")
    share_root+="mount --bind '$path' '$inside' && "
  done
  for private in "${!views[@]}"; do share_root+="mount --rbind '${views[$private]}' '$private' && "; done
fi

# ---- daemons
/usr/sbin/slurmctld -c 8>&-
for n in $node_names; do
  mkdir -p "$dir/spool/$n" "$dir/tmp/$n"
  if [ "$mode" = netns ]; then
    # nsenter --net, NOT "ip netns exec": that remounts /sys and slurmd then finds no cgroup fs
    nsenter --net="/run/netns/$netns_prefix${n#node}" unshare --uts --mount --propagation private \
      bash -c "mount --bind '$dir/etc/hosts' /etc/hosts && hostname $n && $share_root exec /usr/sbin/slurmd" 8>&-
  else
    /usr/sbin/slurmd 8>&-
  fi
done
for _ in $(seq 150); do
  [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" -ge "$nodes" ] && break
  sleep 0.2
done
if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" -lt "$nodes" ]; then
  sinfo -N >&2 || true
  tail -n 20 "$dir"/log/slurm*.log >&2 || true
  die "nodes did not become idle within 30 s (logs above, all in $dir/log)"
fi
sinfo -N
up=1
