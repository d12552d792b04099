# shellcheck shell=bash
# defines: the shell code every batch script under clusters/ shares (sourced, never run):
#   ddpw_setup SITE     project paths, the site's modules (env.sh), placeholder checks, a banner
#   ddpw_first_host     first host of the job's nodelist (the master / rendezvous host)
#   ddpw_job_port       a port derived from the job id (two jobs sharing a node differ)
#   ddpw_free_port      a port nobody listens on right now, on this host
#   ddpw_export_master  exports WORLD_SIZE, MASTER_ADDR (first node) and MASTER_PORT (PORT or job's)
#   ddpw_gpus_per_node  GPUs Slurm gave this job on each node
#   ddpw_check_data DIR the four MNIST-style IDX files are in DIR (compute nodes have no internet)
#   ddpw_run CMD...     runs the job step, forwards the time-limit signal, requeues on exit 75
#
# Settings a user (or a test) may export before sbatch — sbatch passes the environment on:
#   DDPW_ROOT        the project (default: the folder sbatch was run from)
#   DDPW_BIN         the programs (default: $DDPW_ROOT/build/bin)
#   DDPW_PROGRAMS    the steps the scripts run (default: $DDPW_BIN/solutions; DDPW_PROGRAMS=$DDPW_BIN
#                    runs your own exercises instead)
#   DDPW_SITE_ENV    a file sourced instead of clusters/<site>/env.sh (other modules, a test env)
#   DDPW_EXTRA_ARGS  appended to every program's arguments, e.g. "--device cpu"
#   DDPW_SNAPSHOT    the snapshot file (default: snapshots/<job name>.pt in the submit folder)
#   DDPW_MPI_FLAGS_EXTRA  appended to mpirun's flags (e.g. --allow-run-as-root --oversubscribe)

ddpw_die() { echo "ddpw: error: $*" >&2; exit 2; }

ddpw_setup() {
  local site=${1:?ddpw_setup SITE}
  # Run by hand (bash clusters/<site>/x.sbatch): $0 is the script itself; under sbatch, a copy.
  [ -n "${SLURM_JOB_ID:-}" ] || ddpw_die "not inside a Slurm job: submit it from the project folder with sbatch clusters/$site/${0##*/}"
  DDPW_SITE=$site
  DDPW_BIN=${DDPW_BIN:-$DDPW_ROOT/build/bin}
  DDPW_PROGRAMS=${DDPW_PROGRAMS:-$DDPW_BIN/solutions}
  DDPW_SNAPSHOT=${DDPW_SNAPSHOT:-$SLURM_SUBMIT_DIR/snapshots/$SLURM_JOB_NAME.pt}
  # shellcheck disable=SC2034  # used by the scripts that source this file
  read -r -a DDPW_EXTRA <<< "${DDPW_EXTRA_ARGS:-}"  # as an array: "${DDPW_EXTRA[@]}"
  mkdir -p "$(dirname "$DDPW_SNAPSHOT")"

  local env_file=${DDPW_SITE_ENV:-$DDPW_ROOT/clusters/$site/env.sh}
  [ -f "$env_file" ] || ddpw_die "$env_file not found: set DDPW_SITE_ENV or DDPW_ROOT (the project folder)"
  # Module scripts are not written for `set -u`: relax it while they run.
  set +u
  # shellcheck source=/dev/null
  source "$env_file"
  set -u

  # Placeholders left in the #SBATCH lines: say which option to give instead of failing later.
  local what value
  for what in account partition qos reservation; do
    case $what in
      account) value=${SLURM_JOB_ACCOUNT:-} ;; partition) value=${SLURM_JOB_PARTITION:-} ;;
      qos) value=${SLURM_JOB_QOS:-} ;; reservation) value=${SLURM_JOB_RESERVATION:-} ;;
    esac
    case ${value,,} in   # Slurm lower-cases account names
      *change_me*) ddpw_die "--$what is still the placeholder '$value': submit with sbatch --$what=<yours> (or edit the #SBATCH line)" ;;
    esac
  done
  [ -d "$DDPW_BIN" ] || ddpw_die "$DDPW_BIN not found: build first (see clusters/$site/README.md) or set DDPW_BIN"
  [ -d "$DDPW_PROGRAMS" ] || ddpw_die "$DDPW_PROGRAMS not found: build first, or set DDPW_PROGRAMS (the folder of the step programs)"

  echo "# ddp-workshop | site $site | job ${SLURM_JOB_ID} (${SLURM_JOB_NAME:-?})" \
       "restart ${SLURM_RESTART_COUNT:-0} | $(date '+%F %T')"
  echo "# nodes ${SLURM_JOB_NUM_NODES:-1}: ${SLURM_JOB_NODELIST:-$(hostname -s)} |" \
       "tasks ${SLURM_NTASKS:-?} | GPUs per node $(ddpw_gpus_per_node) | batch host $(hostname -s)"
  echo "# programs $DDPW_PROGRAMS"
}

# sed reads the whole list: `| head -n 1` ends the pipe early, and on a job of a few hundred nodes
# scontrol then dies of SIGPIPE, which `set -o pipefail` turns into a failed script.
ddpw_first_host() { scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p; }

ddpw_job_port() { echo $((20000 + SLURM_JOB_ID % 20000)); }

ddpw_free_port() {
  # Bind port 0 and read what the kernel chose (SuperCloud's trick); python3 is on every site.
  python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}

# The env:// rendezvous by hand (Delta, Della): every task reads these three, rank = SLURM_PROCID.
ddpw_export_master() {
  export WORLD_SIZE=$SLURM_NTASKS
  MASTER_ADDR=$(ddpw_first_host)
  MASTER_PORT=${1:-$(ddpw_job_port)}
  export MASTER_ADDR MASTER_PORT
  echo "# WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
}

# Slurm's own count. Not Della's old recipe, which counts the *digits* of SLURM_JOB_GPUS
# (sed 's/[^0-9]*//g' | wc --chars): 2 GPUs numbered "10,11" count as 4.
ddpw_gpus_per_node() {
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    echo "$SLURM_GPUS_ON_NODE"
  elif [ -n "${SLURM_JOB_GPUS:-}" ]; then
    local -a ids
    IFS=, read -r -a ids <<< "$SLURM_JOB_GPUS"
    echo "${#ids[@]}"
  else
    echo "${SLURM_NTASKS_PER_NODE:-1}"
  fi
}

ddpw_check_data() {
  local dir=${1:?ddpw_check_data DIR} f
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$dir/$f" ] || [ -f "$dir/$f.gz" ] ||
      ddpw_die "$dir/$f(.gz) missing: compute nodes have no internet; copy the MNIST files there from a login node (see clusters/$DDPW_SITE/README.md) or set DDPW_DATA_DIR"
  done
}

# ddpw_run [--torchrun] CMD...
# Runs CMD (srun/mpirun ...) in the background so this shell can catch the signals Slurm sends it:
# `#SBATCH --signal=B:USR1@120` signals only the batch shell, 120 s before the time limit. The trap
# passes the stop on; the programs write a snapshot and exit 75, and the job is requeued to resume.
#   srun, mpirun: SIGUSR1 to srun/mpirun, which relay it to every task; their exit code is the tasks'.
#   --torchrun:   torchrun dies of SIGUSR1, so every process of the step gets SIGTERM instead
#                 (scancel); torchrun relays it and waits for its workers, but exits 1 whatever
#                 they return, so a snapshot newer than the stop request counts as "stopped".
ddpw_run() {
  local torchrun=0
  if [ "${1:-}" = --torchrun ]; then torchrun=1; shift; fi
  echo "+ $*"
  "$@" &
  DDPW_STEP_PID=$! DDPW_STOP_AT=
  if [ $torchrun = 1 ]; then
    trap 'DDPW_INTERRUPTED=1 DDPW_STOP_AT=$(date +%s); echo "ddpw: stop requested: SIGTERM to the job steps"
          scancel --signal=TERM "$SLURM_JOB_ID"' USR1 TERM
  else
    trap 'DDPW_INTERRUPTED=1 DDPW_STOP_AT=$(date +%s); echo "ddpw: stop requested: SIGUSR1 to the job step"
          kill -USR1 "$DDPW_STEP_PID" 2>/dev/null' USR1 TERM
  fi
  local rc
  while :; do
    DDPW_INTERRUPTED=0 rc=0
    wait "$DDPW_STEP_PID" || rc=$?
    # A trapped signal ends `wait` early (status > 128): wait again for the step's own status.
    [ "$DDPW_INTERRUPTED" = 1 ] && [ "$rc" -gt 128 ] && continue
    break
  done
  trap - USR1 TERM
  if [ $torchrun = 1 ] && [ "$rc" != 0 ] && [ -n "$DDPW_STOP_AT" ] && [ -f "$DDPW_SNAPSHOT" ] &&
     [ "$(stat -c %Y "$DDPW_SNAPSHOT")" -ge "$DDPW_STOP_AT" ]; then
    rc=75
  fi
  if [ "$rc" -eq 75 ]; then
    echo "ddpw: the step stopped after writing a snapshot (exit 75): requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID" || echo "ddpw: requeue refused; resubmit the same script to resume" >&2
    return 75
  fi
  if [ "$rc" -eq 0 ]; then echo "# done $(date '+%F %T')"; else echo "ddpw: the job step failed with exit code $rc" >&2; fi
  return "$rc"
}
