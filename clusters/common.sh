# shellcheck shell=bash
# defines: the shell code every batch script under clusters/ shares (sourced, never run):
#   ddpw_setup SITE       project paths, the site's run-time modules (env.sh), placeholder checks, a banner
#   ddpw_args DEFAULTS... -- "$@"   the program's arguments: the script's, else DDPW_ARGS, else DEFAULTS
#   ddpw_program PROG [OPTIONS...]   DDPW_CMD: PROG, --device cuda, OPTIONS, those arguments, DDPW_EXTRA_ARGS
#   ddpw_first_host       first host of the job's nodelist (the master / rendezvous host)
#   ddpw_job_port         a rendezvous port for this job on this host (concurrent jobs, array tasks and
#                         requeues never get the same one)
#   ddpw_export_master    exports WORLD_SIZE, MASTER_ADDR (first node) and MASTER_PORT (ddpw_job_port)
#   ddpw_rendezvous       the same, or with DDPW_RENDEZVOUS=file a fresh rendezvous file (--init-method)
#   ddpw_gpus_per_node    GPUs Slurm gave this job on each node
#   ddpw_check_data DIR   the four MNIST-style IDX files are in DIR (compute nodes have no internet)
#   ddpw_run CMD...       runs the job step, forwards the time-limit signal, requeues on exit 75
#
# Settings a user (or a test) may export before sbatch — sbatch passes the environment on:
#   DDPW_ROOT        the project (default: the folder sbatch was run from)
#   DDPW_BIN         the programs (default: $DDPW_ROOT/build/bin)
#   DDPW_PROGRAMS    the steps the scripts run (default: $DDPW_BIN/solutions; DDPW_PROGRAMS=$DDPW_BIN
#                    runs your own exercises instead)
#   DDPW_SITE_ENV    a file sourced instead of clusters/<site>/env.sh (other modules, a test env)
#   DDPW_ARGS        the program's arguments when the script gets none (e.g. "50 10"; for submit
#                    commands that may not pass a script's arguments on, like LLsub)
#   DDPW_EXTRA_ARGS  appended to every program's arguments, after the script's own, so they win
#                    (e.g. "--device cpu": the scripts pass --device cuda first)
#   DDPW_SNAPSHOT    the snapshot file (default: see ddpw_setup)
#   DDPW_RENDEZVOUS  "file": the ranks meet through a fresh file in the submit folder, not over TCP
#                    (the scripts that call ddpw_rendezvous: Della's)
#   DDPW_MPI_FLAGS_EXTRA  appended to mpirun's flags (e.g. --allow-run-as-root --oversubscribe)

ddpw_die() { echo "ddpw: error: $*" >&2; exit 2; }

ddpw_setup() {
  local site=${1:?ddpw_setup SITE}
  # Run by hand (bash clusters/<site>/x.sbatch): $0 is the script itself; under sbatch, a copy.
  [ -n "${SLURM_JOB_ID:-}" ] || ddpw_die "not inside a Slurm job: submit it from the project folder with sbatch clusters/$site/${0##*/}"
  DDPW_SITE=$site
  DDPW_BIN=${DDPW_BIN:-$DDPW_ROOT/build/bin}
  DDPW_PROGRAMS=${DDPW_PROGRAMS:-$DDPW_BIN/solutions}
  [ -d "$DDPW_BIN" ] || ddpw_die "$DDPW_BIN not found: build first (see clusters/$site/README.md) or set DDPW_BIN"
  [ -d "$DDPW_PROGRAMS" ] || ddpw_die "$DDPW_PROGRAMS not found: build first, or set DDPW_PROGRAMS (the folder of the step programs)"
  DDPW_KIND=$(ddpw_programs_kind)
  DDPW_SNAPSHOT=${DDPW_SNAPSHOT:-$(ddpw_default_snapshot)}
  mkdir -p "$(dirname "$DDPW_SNAPSHOT")"
  # --device cuda, not auto: on a node whose driver is too old for the build, auto would train on
  # the CPU without a word; cuda stops with the reason. (DDPW_EXTRA_ARGS="--device cpu" still wins.)
  DDPW_DEFAULTS=(--device cuda)
  # Slurm 22.05-23.02: srun does not take the job's --cpus-per-task (SLURM_CPUS_PER_TASK) and binds
  # each task to one CPU: step 1's workers and every torchrun would share one core. Equal values
  # also suit the Slurm versions that read SLURM_CPUS_PER_TASK again.
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
  DDPW_EXTRA=()
  read -r -a DDPW_EXTRA <<< "${DDPW_EXTRA_ARGS:-}"

  local env_file=${DDPW_SITE_ENV:-$DDPW_ROOT/clusters/$site/env.sh}
  [ -f "$env_file" ] || ddpw_die "$env_file not found: set DDPW_SITE_ENV or DDPW_ROOT (the project folder)"
  # A job loads the run-time modules only (env.sh: ddpw_load run ...); a build module that a site
  # renamed cannot stop it. Module scripts are not written for `set -u`: relax it while they run.
  export DDPW_MODULES=run
  set +u
  # shellcheck source=/dev/null
  source "$env_file" || { set -u; ddpw_die "$env_file failed (its message is above): fix it, or point DDPW_SITE_ENV at your own copy"; }
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

  echo "# ddp-workshop | site $site | job ${SLURM_JOB_ID} (${SLURM_JOB_NAME:-?})" \
       "restart ${SLURM_RESTART_COUNT:-0} | $(date '+%F %T')"
  echo "# nodes ${SLURM_JOB_NUM_NODES:-1}: ${SLURM_JOB_NODELIST:-$(hostname -s)} |" \
       "tasks ${SLURM_NTASKS:-?} | GPUs per node $(ddpw_gpus_per_node) | batch host $(hostname -s)"
  echo "# programs $DDPW_PROGRAMS"
  echo "# snapshot $DDPW_SNAPSHOT"
}

# Which programs the job runs: solution (the default), exercise (DDPW_PROGRAMS=$PWD/build/bin, the
# learner's own), or programs-<cksum> for another folder.
ddpw_programs_kind() {
  local programs bin
  programs=$(cd "$DDPW_PROGRAMS" && pwd -P)
  bin=$(cd "$DDPW_BIN" && pwd -P)
  case $programs in
    "$bin/solutions") echo solution ;;
    "$bin") echo exercise ;;
    *) echo "programs-$(printf '%s' "$programs" | cksum | cut -d' ' -f1)" ;;  # another folder: its own file
  esac
}

# The job's name as submitted (#SBATCH --job-name), without the kind ddpw_name_job adds: a requeued
# job starts again under the name it was given.
ddpw_job_base_name() {
  local name=${SLURM_JOB_NAME:-ddpw}
  name=${name%-solution}
  echo "${name%-exercise}"
}

# snapshots/<job name>.<solution|exercise>[.<array task>].pt in the submit folder: the learner's
# exercise (DDPW_PROGRAMS=$PWD/build/bin) never resumes the solution's snapshot, nor the other way
# round, and the tasks of a job array (one job name) do not share one file.
ddpw_default_snapshot() {
  echo "$SLURM_SUBMIT_DIR/snapshots/$(ddpw_job_base_name).$DDPW_KIND${SLURM_ARRAY_TASK_ID:+.$SLURM_ARRAY_TASK_ID}.pt"
}

# A job that runs a step program (from DDPW_PROGRAMS) says in its name which kind: ddpw-hpg-step2
# becomes ddpw-hpg-step2-solution or ddpw-hpg-step2-exercise, so that squeue and sacct tell a
# learner's own exercise from the solution. Renamed at the job's start, since only then is it known
# (sbatch is run plainly; DDPW_PROGRAMS decides). Slurm expands %x in --output with the current
# name: the scripts name their log literally, and a job whose log is named after %x (its log would
# seem to move) gets its old name back. Never fails the job.
ddpw_name_job() {
  case $DDPW_KIND in solution | exercise) ;; *) return 0 ;; esac
  local name log
  name="$(ddpw_job_base_name)-$DDPW_KIND"
  [ "${SLURM_JOB_NAME:-}" = "$name" ] && return 0
  if ! scontrol update JobId="$SLURM_JOB_ID" JobName="$name" >/dev/null 2>&1; then
    echo "# note: could not rename the job to $name (scontrol update refused): its name stays ${SLURM_JOB_NAME:-?}"
    return 0
  fi
  log=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^StdOut=//p' || true)
  if [ -n "$log" ] && [ ! -e "$log" ]; then
    scontrol update JobId="$SLURM_JOB_ID" JobName="$SLURM_JOB_NAME" >/dev/null 2>&1 || true
    echo "# note: the job keeps its name ${SLURM_JOB_NAME:-?}: its log is named after it (--output=%x...); name the log literally for $name"
    return 0
  fi
  echo "# job name $name (was ${SLURM_JOB_NAME:-?})"
}

# ddpw_args DEFAULT... -- "$@": sets DDPW_ARGV to the script's arguments, else the words of
# DDPW_ARGS, else the defaults, and prints them in the log.
ddpw_args() {
  local -a defaults=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do defaults+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  local from="the script's arguments"
  if [ $# -gt 0 ]; then
    DDPW_ARGV=("$@")
  elif [ -n "${DDPW_ARGS:-}" ]; then
    read -r -a DDPW_ARGV <<< "$DDPW_ARGS"
    from=DDPW_ARGS
  else
    DDPW_ARGV=(${defaults[@]+"${defaults[@]}"})
    from="the script's defaults"
  fi
  echo "# arguments ${DDPW_ARGV[*]:-(none)} ($from)"
}

# ddpw_program PROGRAM [OPTIONS...]: DDPW_CMD is PROGRAM and its arguments, in the order that lets
# the user's win (CLI11 keeps the last value of an option): the course's defaults, the script's
# OPTIONS (snapshot, data), the job's arguments (ddpw_args), then DDPW_EXTRA_ARGS.
ddpw_program() {
  local program=${1:?ddpw_program PROGRAM [OPTIONS...]}; shift
  case $program in "$DDPW_PROGRAMS"/*) ddpw_name_job ;; esac  # a step program: the job's name says which kind
  # ${a[@]+"${a[@]}"}: an empty array under `set -u` is an error in bash < 4.4.
  # shellcheck disable=SC2034  # the scripts run "${DDPW_CMD[@]}"
  DDPW_CMD=("$program" "${DDPW_DEFAULTS[@]}" "$@" ${DDPW_ARGV[@]+"${DDPW_ARGV[@]}"} ${DDPW_EXTRA[@]+"${DDPW_EXTRA[@]}"})
}

# sed reads the whole list: `| head -n 1` ends the pipe early, and on a job of a few hundred nodes
# scontrol then dies of SIGPIPE, which `set -o pipefail` turns into a failed script.
ddpw_first_host() { scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p; }

# A TCP port for this job's rendezvous, chosen on the host that will serve it (the batch script
# runs on the job's first node). Not a fixed port: two jobs sharing a node would meet (one fails
# with "port in use", or silently joins the other's store, as torchrun's c10d rendezvous does).
# Not a port the kernel hands out for outgoing connections either (32768-60999): one could take it
# between choosing and serving. So: 15000-29999, starting at a place derived from the job id
# (each array task has its own SLURM_JOB_ID) and the restart count (a requeued job gets a new
# one), then the first port nothing on this host is bound to.
ddpw_job_port() {
  # Every TCP socket of this host's network namespace, listening, connected or closing, holds its
  # local port (/proc/net/tcp*: "sl local_address ...", the port in hex after the colon).
  local -A held=()
  local _ address port i first=15000 span=15000
  while read -r _ address _; do
    [[ $address == *:* ]] && held[$((16#${address##*:}))]=1
  done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  local start=$(( (SLURM_JOB_ID * 31 + ${SLURM_RESTART_COUNT:-0} * 7919) % span ))
  for ((i = 0; i < span; i++)); do
    port=$((first + (start + i) % span))
    [ -n "${held[$port]:-}" ] || { echo "$port"; return 0; }
  done
  ddpw_die "no free TCP port in $first-$((first + span - 1)) on $(hostname -s)"
}

# The env:// rendezvous by hand (Delta, Della): every task reads these three, rank = SLURM_PROCID.
ddpw_export_master() {
  export WORLD_SIZE=$SLURM_NTASKS
  MASTER_ADDR=$(ddpw_first_host)
  MASTER_PORT=$(ddpw_job_port)
  export MASTER_ADDR MASTER_PORT
  echo "# WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
}

# ddpw_rendezvous: how the ranks of this job meet. Over TCP (default): ddpw_export_master. With
# DDPW_RENDEZVOUS=file, through a file on the filesystem every node shares (the submit folder), as
# Della's guide shows (init_method='file://...'): a fresh path per job and per attempt (a requeued job
# keeps its id), so no run meets an earlier run's keys.
ddpw_rendezvous() {
  if [ "${DDPW_RENDEZVOUS:-tcp}" != file ]; then ddpw_export_master; return; fi
  local file=$SLURM_SUBMIT_DIR/rendezvous/$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}
  mkdir -p "${file%/*}"
  rm -f "$file"
  export WORLD_SIZE=$SLURM_NTASKS
  DDPW_DEFAULTS+=(--init-method "file://$file")
  echo "# WORLD_SIZE=$WORLD_SIZE rendezvous file://$file"
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

# ddpw_text: DDPW_TEXT, the GPT's text (--model gpt): a plain text file, or a folder of fortune files
# (Debian's fortunes package puts them in /usr/share/games/fortunes, where a compute node may have none).
ddpw_text() {
  DDPW_TEXT=${DDPW_TEXT:-/usr/share/games/fortunes}
  [ -e "$DDPW_TEXT" ] ||
    ddpw_die "$DDPW_TEXT missing: copy /usr/share/games/fortunes from a machine with Debian's fortunes package (or any plain text file) to the project folder and set DDPW_TEXT to it"
  echo "# text $DDPW_TEXT"
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
