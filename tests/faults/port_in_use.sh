#!/usr/bin/env bash
# Fault: the master port is already taken (another job, a previous run). Rank 0 must say which
# port is in use and how to choose another, at once. Step 1 (spawn) must then end its other worker
# (stuck trying to rendezvous with the foreign listener) and name the failed rank.
source "$(dirname "$0")/lib.sh"

# hold_port ADDRESS: a listener we own on a free port; sets PORT and HOLDER.
hold_port() {
  PORT=$(free_port)
  python3 -c 'import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print("listening", flush=True); time.sleep(120)' \
    "$1" "$PORT" >holder.log 2>&1 &
  HOLDER=$!; STARTED_PIDS+=("$HOLDER")
  wait_for_line holder.log listening 10
}
# The fix names what sets the port: MASTER_PORT under a launcher; for step 1, whose default is a
# free port, leaving out the --master-port that chose a taken one.
fix='choose another port: export MASTER_PORT=N'

for address in 0.0.0.0 127.0.0.1; do
  hold_port "$address"
  expect_error "step 2, port held on $address" 5 1 "master port $PORT on 127.0.0.1 is already in use.*$fix" \
    env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$PORT" "$STEP2" 5 1 --threads 1 --rendezvous-timeout 30
  kill "$HOLDER"
done

# Rank 1 waits on the foreign listener and takes SIGTERM as "stop at the next step": spawn's
# SIGKILL comes 3 s later; the bound of 18 s leaves room for a loaded machine.
hold_port 0.0.0.0
expect_error "step 1, port held" 18 1 "master port $PORT on .* is already in use.*leave out --master-port \\(the program then picks a free port\\)" \
  "$STEP1" 5 1 --threads 1 --master-port "$PORT" --rendezvous-timeout 30 --collective-timeout 30
grep -q '^spawn: worker rank 0 (pid [0-9]*) exited with code 1; the other workers were stopped' "$LOG" ||
  { cat "$LOG"; fail "step 1: the parent did not name rank 0"; }
kill "$HOLDER"
pass "a taken master port is named with the way to choose another"
