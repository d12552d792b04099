#!/usr/bin/env bash
# Every exercise compiles (the build made it) and runs as shipped, with the new concept missing:
# step 0 and the step 1, 3 and 4 exercises as one process, the step 2 exercise (still step 1's
# program) with the 2 workers it starts itself; each writes its own snapshot file. Launched for
# several ranks, an exercise must refuse at once, naming the TODO to complete, instead of its
# ranks training alone or fighting over one port: the step 2 exercise under torchrun, the step 3
# exercise as one of several srun tasks, the step 4 exercise (still step 3's DDP program) under
# torchrun, and given step 4's options (--zero, --deepspeed-config); the step 6 exercise (still step 4's
# ZeRO program) runs as one process and, given step 6's options (--accumulate), names TODO(step6).
source "$(dirname "$0")/lib.sh"
for step in step0_single_gpu step1_multigpu_fork step2_env_launch step3_multinode_slurm step4_sharded \
            step6_fully_sharded; do
  n=${step:4:1}
  snapshot=snapshot-step$n-exercise.pt
  [ "$n" = 0 ] && snapshot="snapshot-step0.pt"  # the starting program: no exercise, no solution
  MASTER_PORT=$(free_port) run_logged "$step.log" "$BIN/$step" 2 1 --device cpu \
    || { cat "$step.log"; fail "exercise $step does not run"; }
  [ -s "$snapshot" ] || fail "exercise $step wrote no $snapshot"
  echo "exercise $step: runs ($(last_loss "$step.log") final loss, $snapshot)"
done

# expect_refusal NAME REGEX COMMAND...: exits non-zero within 60 s (no hang), the output matches
# REGEX, no worker was started and no snapshot written.
expect_refusal() {
  local name=$1 regex=$2; shift 2
  rm -f snapshot-*.pt
  local start rc=0 took
  start=$(date +%s)
  DDPW_TEST_TIMEOUT=90 run_logged "$name.log" "$@" || rc=$?
  took=$(( $(date +%s) - start ))
  [ "$rc" -ne 0 ] || { cat "$name.log"; fail "$name exited 0"; }
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { cat "$name.log"; fail "$name hung (killed after 90 s)"; }
  [ "$took" -le 60 ] || { cat "$name.log"; fail "$name took ${took}s to fail (bound 60 s)"; }
  grep -qE "$regex" "$name.log" || { cat "$name.log"; fail "$name did not say why it stopped"; }
  ! grep -qE 'already in use|DDPW_SPAWN|Epoch 0' "$name.log" || { cat "$name.log"; fail "$name started training"; }
  [ -z "$(ls snapshot-*.pt 2>/dev/null)" ] || fail "$name wrote a snapshot"
  echo "$name: refused in ${took}s: $(grep -m1 -E "$regex" "$name.log" | cut -c1-200)"
}

command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
expect_refusal "step 2 exercise under torchrun" \
  'error: step2_env_launch starts its own workers, but was started by torchrun .*\(fix: run it without the launcher, or complete TODO\(step2\)' \
  torchrun --standalone --nproc_per_node=2 --no-python "$BIN/step2_env_launch" 2 1 --device cpu

# Task 1 of 2 of an srun step, as srun starts it (the variables srun sets), rank 0 nowhere: the
# exercise must refuse before it joins anything.
expect_refusal "step 3 exercise as an srun task" \
  'error: slurm started step3_multinode_slurm \(exercise\) as rank 1 of 2, but the program read no rank from the environment \(fix: complete TODO\(step3\) in step3_multinode_slurm/main.cpp' \
  env SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=0 SLURM_NODEID=1 SLURM_NTASKS=2 \
  SLURM_NNODES=2 SLURM_TASKS_PER_NODE='1(x2)' SLURM_JOB_NODELIST='node[1-2]' \
  "$BIN/step3_multinode_slurm" 2 1 --device cpu --rendezvous-timeout 30
# Step 4's exercise trains with DDP: one process has nothing to shard; several ranks would each keep
# the whole optimizer state. Its command line with ZeRO's options names the TODO before anything starts.
expect_refusal "step 4 exercise under torchrun" \
  'error: step4_sharded \(exercise\) was started as 2 ranks, but wraps the model in DistributedDataParallel.*\(fix: complete TODO\(step4\) in step4_sharded/main.cpp' \
  torchrun --standalone --nproc_per_node=2 --no-python "$BIN/step4_sharded" 2 1 --device cpu
expect_refusal "step 4 exercise given --zero" \
  'step4_sharded: error: .*--zero.*\(fix: complete TODO\(step4\) in step4_sharded/main.cpp: offer the ZeRO options' \
  "$BIN/step4_sharded" 2 1 --device cpu --zero 2
expect_refusal "step 6 exercise given --accumulate" \
  'step6_fully_sharded: error: .*--accumulate.*\(fix: complete TODO\(step6\) in step6_fully_sharded/main.cpp: offer the FSDP options' \
  "$BIN/step6_fully_sharded" 2 1 --device cpu --model gpt --accumulate 2
pass "all exercises run; the step 2 exercise refuses torchrun, the step 3 exercise a multi-task srun, the step 4 exercise several ranks and ZeRO's options, the step 6 exercise FSDP's options, naming their TODOs"
