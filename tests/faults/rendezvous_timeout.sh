#!/usr/bin/env bash
# Fault: the master is unreachable, or a rank never arrives. With --rendezvous-timeout 3 every
# rank that is there must give up after about 3 s (its message says how long it waited: at most
# 3 s + 1.5 s) and name where it waited (host:port, or the rendezvous file), exit non-zero, and
# the whole run must end within 3 s + 5 s (start-up included). Loopback only; nobody listens.
source "$(dirname "$0")/lib.sh"
T=3 MAX_WAIT=4.5 BOUND=8
common=(5 1 --threads 1 --rendezvous-timeout "$T" --collective-timeout 20)

# The "waited X s" / "within X s" / "after X s" figure of the error line must be <= MAX_WAIT.
check_wait() {
  local waited
  waited=$(grep -m1 'error:' "$1" | grep -oE '(waited|within|after) [0-9.]+ s' | head -n1 | grep -oE '[0-9.]+')
  [ -n "$waited" ] || { cat "$1"; fail "$2: the error does not say how long it waited"; }
  over "$waited" "$MAX_WAIT" && fail "$2: waited ${waited}s with --rendezvous-timeout $T"
  return 0
}

port=$(free_port)
expect_error "rank 1, master unreachable" "$BOUND" 1 "rank 1 could not reach the master at 127.0.0.1:$port within .*--rendezvous-timeout" \
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$STEP2" "${common[@]}"
check_wait "$LOG" "rank 1, master unreachable"

port=$(free_port)
expect_error "rank 0, rank 1 never arrives" "$BOUND" 1 "rank 0 waited .* at 127.0.0.1:$port but not all 2 ranks arrived" \
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$STEP2" "${common[@]}"
check_wait "$LOG" "rank 0, rank 1 never arrives"

# Three ranks expected, two come: both must give up.
mkdir two_of_three && cd two_of_three
start=$(now)
for r in 0 1; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
    timeout --kill-after=5 60 "$STEP2" "${common[@]}" >"rank$r.log" 2>&1 &
  STARTED_PIDS+=($!)
done
for r in 0 1; do
  wait_bounded "${STARTED_PIDS[$((${#STARTED_PIDS[@]} - 2 + r))]}" 30; rc=$RC
  late "$start" "$BOUND" && { cat "rank$r.log"; fail "2 of 3: rank $r took $(took_text)"; }
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { cat "rank$r.log"; fail "2 of 3: rank $r exit $rc"; }
  echo "ok   2 of 3 ranks: rank $r exit $rc after $(took_text): $(grep -m1 error: "rank$r.log" | cut -c1-150)"
done
grep -q "rank 0 waited .* at 127.0.0.1:$port but not all 3 ranks arrived" rank0.log || { cat rank0.log; fail "2 of 3: rank 0 message"; }
check_wait rank0.log "2 of 3, rank 0"
cd "$WORK"

# Rendezvous through a file (--init-method file://): rank 1 never comes.
expect_error "file rendezvous, rank 1 never arrives" "$BOUND" 1 "rank 0 .*$WORK/rdzv" \
  env RANK=0 WORLD_SIZE=2 "$STEP2" "${common[@]}" --init-method "file://$WORK/rdzv"
check_wait "$LOG" "file rendezvous"
pass "unreachable master and missing ranks: errors within the rendezvous timeout, naming where"
