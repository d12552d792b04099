# defines: what SuperCloud's DDP example sets before `mpirun ${MPI_FLAGS} ...` (sourced by the
#          mpirun scripts here): the flags, the leader's host and a free port on it (the example
#          binds port 0 and prints it; here the port is derived from the job and checked free on
#          this host, so it is outside the range the kernel hands out to other connections).
# shellcheck shell=bash
# -x exports a variable to every rank; --tag-output prefixes each line with [job,rank].
MPI_FLAGS="--tag-output --bind-to socket -map-by core -x PSM2_GPUDIRECT=1 -x NCCL_NET_GDR_LEVEL=5"
MPI_FLAGS+=" -x NCCL_P2P_LEVEL=5 -x NCCL_NET_GDR_READ=1 -x MASTER_ADDR -x MASTER_PORT"
MPI_FLAGS+=" ${DDPW_MPI_FLAGS_EXTRA:-}"   # e.g. --allow-run-as-root --oversubscribe (containers, tests)
export MPI_FLAGS
MASTER_ADDR=$(hostname -s)           # the batch script runs on the first node: rank 0's host
MASTER_PORT=$(ddpw_job_port)
export MASTER_ADDR MASTER_PORT
echo "# MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT MPI_FLAGS=$MPI_FLAGS"
