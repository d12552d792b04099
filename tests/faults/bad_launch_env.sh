#!/usr/bin/env bash
# Fault: an inconsistent launcher environment. The program must stop with exit 1 and a message
# naming the variable before any collective: quickly (the rendezvous timeout is 30 s, the bound
# 5 s), before the settings table (printed after joining the group), without writing anything.
source "$(dirname "$0")/lib.sh"
port=$(free_port)  # nobody listens there: a rendezvous attempt could only wait

check() {  # check NAME PROGRAM REGEX VAR=VALUE...
  local name=$1 prog=$2 regex=$3; shift 3
  mkdir run && cd run
  expect_error "$name" 5 1 "$regex" env -i PATH="$PATH" HOME="$HOME" "$@" \
    "$prog" 5 1 --threads 1 --rendezvous-timeout 30 --collective-timeout 30
  ! grep -q 'launcher  *|' "$LOG" || fail "$name: the run got past joining the group"
  [ -z "$(ls -A)" ] || fail "$name: wrote $(ls -A)"
  cd "$WORK" && rm -rf run
}

check "torchrun: RANK >= WORLD_SIZE" "$STEP2" 'rank 2 is outside the world of 2 ranks \(launcher: torchrun\).*RANK must be in \[0, WORLD_SIZE\)' \
  RANK=2 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
check "torchrun: negative RANK" "$STEP2" 'rank -1 is outside the world of 2 ranks' \
  RANK=-1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
check "torchrun: RANK not a number" "$STEP2" "RANK='one' is not a whole number" \
  RANK=one WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
check "torchrun: LOCAL_RANK >= LOCAL_WORLD_SIZE" "$STEP2" "local rank 2 is outside the node's 2 local ranks \(launcher: torchrun\).*LOCAL_RANK must be in" \
  RANK=0 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
check "torchrun: LOCAL_WORLD_SIZE > WORLD_SIZE" "$STEP2" 'local world size 3 does not fit a world of 2' \
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
check "torchrun: several nodes, no MASTER_ADDR" "$STEP2" 'no master address: 4 ranks over several nodes \(torchrun\) but MASTER_ADDR is not set.*export MASTER_ADDR' \
  RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_PORT="$port"
check "MASTER_PORT out of range" "$STEP2" 'master port 70000 is not a TCP port.*--master-port or MASTER_PORT' \
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000
check "openmpi: rank >= size" "$STEP2" 'rank 3 is outside the world of 2 ranks \(launcher: openmpi\).*OMPI_COMM_WORLD_RANK must be in \[0, OMPI_COMM_WORLD_SIZE' \
  OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT="$port"
check "openmpi: several nodes, no MASTER_ADDR" "$STEP2" 'no master address: 4 ranks over several nodes \(openmpi\)' \
  OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT="$port"
check "pmix: no world size" "$STEP2" 'PMIX_RANK is set but OMPI_COMM_WORLD_SIZE is not' \
  PMIX_RANK=0 MASTER_PORT="$port"
check "slurm: SLURM_LOCALID >= tasks per node" "$STEP3" "local rank 2 is outside the node's 2 local ranks \(launcher: slurm\).*SLURM_LOCALID must be in \[0, --ntasks-per-node\)" \
  SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_NNODES=2 SLURM_NTASKS_PER_NODE=2 SLURM_LOCALID=2 \
  SLURM_NODEID=0 SLURM_JOB_NODELIST=localhost,127.0.0.2 MASTER_PORT="$port"
check "slurm: SLURM_PROCID >= SLURM_NTASKS" "$STEP3" 'rank 4 is outside the world of 4 ranks \(launcher: slurm\)' \
  SLURM_PROCID=4 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_TASKS_PER_NODE='2(x2)' SLURM_LOCALID=0 \
  SLURM_NODEID=0 SLURM_JOB_NODELIST=localhost,127.0.0.2 MASTER_PORT="$port"
check "slurm: no task count" "$STEP3" 'inside an srun step but none of SLURM_NTASKS' \
  SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_JOB_NODELIST=localhost MASTER_PORT="$port"
pass "every inconsistent launch environment stops before joining the group, naming the variable"
