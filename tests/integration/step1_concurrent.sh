#!/usr/bin/env bash
# Two learners start step 1 at the same moment on one node, each in their own folder (as two jobs
# sharing a node do). With upstream's fixed port 12355 one failed with "master port 12355 ... is
# already in use" and the other's worker joined the first job's group ("two processes claim rank 1").
# Step 1 now picks a free port, held from the moment it is chosen until rank 0 serves on it: both
# runs must train to the end, each in its own group, and say which port it used.
source "$(dirname "$0")/lib.sh"
runs=${DDPW_CONCURRENT_RUNS:-3}
for i in $(seq "$runs"); do
  mkdir -p "run$i"
  (cd "run$i" && run_logged out.log "$BIN/solutions/step1_multigpu_fork" 4 1 --nproc 2 --device cpu --threads 1) &
  pids[i]=$!
done
for i in $(seq "$runs"); do
  rc=0; wait "${pids[i]}" || rc=$?
  [ "$rc" -eq 0 ] || { cat "run$i/out.log"; fail "run $i of $runs started together exited $rc"; }
done
ports=()
for i in $(seq "$runs"); do
  (cd "run$i" && check_training_log out.log 2 "[CPU0]") || fail "run $i"
  ! grep -qE 'claim rank|already in use' "run$i/out.log" || { cat "run$i/out.log"; fail "run $i met another run"; }
  port=$(sed -nE 's/^rendezvous +\| +localhost:([0-9]+) *$/\1/p' "run$i/out.log")
  [ -n "$port" ] || { cat "run$i/out.log"; fail "run $i: the settings table does not say which port (rendezvous | localhost:PORT)"; }
  ports+=("$port")
done
[ "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" -eq "$runs" ] || fail "runs shared a port: ${ports[*]}"
pass "$runs step-1 runs started together on one node all trained, at ports ${ports[*]}"
