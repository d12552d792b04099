#!/usr/bin/env bash
# --trace FILE and scripts/plot on real runs (2 CPU ranks, Gloo):
#  1. solution 1b and solution 1 (synthetic, 2 epochs of 32 steps) write one Chrome trace each: both
#     ranks, the 20 steps after the first 5, autograd nodes of backward on each rank, and the
#     gradient all-reduces: 1b one per tensor (2 per step), each launched after its step's backward
#     ended; DDP one bucket per step. Tracing changes nothing: the checksum is the one without it;
#  2. on the CNN (Fashion-MNIST, 2 buckets) DDP launches its first bucket before backward ends, on
#     every recorded step of both ranks (the overlap the hand-written loop cannot have);
#  3. scripts/plot draws both traces into a PNG and prints the ratio of their step times; a file that
#     is not a trace is an error naming it.
source "$(dirname "$0")/lib.sh"
ROOT=${DDPW_ROOT:?DDPW_ROOT must point at the project}
ARGS=(2 2 --nproc 2 --device cpu --rendezvous-timeout 60 --collective-timeout 120 --fresh)

for program in step1b_average_by_hand step1_multigpu_fork; do
  run_logged "$program.log" "$BIN/solutions/$program" "${ARGS[@]}" --trace "$program.json" ||
    { cat "$program.log"; fail "$program --trace failed"; }
  grep -q "Timeline of 20 steps from epoch 0 step 5 of 2 ranks written to $program.json" "$program.log" ||
    { cat "$program.log"; fail "$program: no line saying where the timeline went"; }
  run_logged "$program.plain.log" "$BIN/solutions/$program" "${ARGS[@]}" --snapshot plain.pt ||
    { cat "$program.plain.log"; fail "$program without --trace failed"; }
  with=$(grep -m1 'final weights checksum' "$program.log" | awk '{print $NF}')
  without=$(grep -m1 'final weights checksum' "$program.plain.log" | awk '{print $NF}')
  [ -n "$with" ] && [ "$with" = "$without" ] || fail "$program: --trace changed the result ($with vs $without)"
done

# check_trace FILE GRADIENT_NAME PER_STEP AFTER_BACKWARD: the trace's facts (python3's json only).
check_trace() {
  python3 - "$@" <<'EOF'
import json, sys
path, gradient, per_step, after = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "after"
events = json.load(open(path))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {(0, "rank 0"), (1, "rank 1")}, names
for rank in (0, 1):
    mine = [e for e in spans if e["pid"] == rank]
    steps = sorted((e for e in mine if e["cat"] == "step"), key=lambda e: e["ts"])
    assert len(steps) == 20 and steps[0]["name"] == "epoch 0 step 5", (rank, [s["name"] for s in steps])
    for s in steps:
        start, end = s["ts"], s["ts"] + s["dur"]
        inside = lambda e: start <= e["ts"] < end
        backward = [e for e in mine if e["cat"] == "backward" and inside(e)]
        grads = [e for e in mine if e["cat"] == "collective" and e["name"] == gradient and inside(e)]
        assert backward, (rank, s["name"], "no autograd node")
        assert len(grads) == per_step, (rank, s["name"], len(grads), "gradient all-reduces")
        assert all(g["args"]["bytes"] > 0 and g["dur"] >= 0 for g in grads), grads
        last_node = max(e["ts"] + e["dur"] for e in backward)
        if after:
            assert all(g["ts"] >= last_node for g in grads), (rank, s["name"], "an all-reduce before backward ended")
        else:
            assert min(g["ts"] for g in grads) < last_node, (rank, s["name"], "no all-reduce while backward runs")
print(f"{path}: 2 ranks x 20 steps, {per_step} x '{gradient}' per step, all {sys.argv[4]} backward" if after
      else f"{path}: 2 ranks x 20 steps, {per_step} x '{gradient}' per step, the first launched while backward runs")
EOF
}
check_trace step1b_average_by_hand.json "gradient sum" 2 after || fail "step 1b's trace"
check_trace step1_multigpu_fork.json "gradient allreduce (bucket 1 of 1)" 1 after || fail "step 1's trace"

# 2. The CNN: its 2 buckets, the first (the fully connected layers) sent while the convolutions'
#    backward still runs. The first 5200 images of Fashion-MNIST (and 1000 to test) give each rank
#    26 steps of 100: the 20 recorded after the first 5, with a tenth of a whole epoch's work.
require_fashion_mnist
make_fashion_subset fashion-subset 5200 1000
start=$SECONDS
DDPW_TEST_TIMEOUT=300 run_logged cnn.log "$BIN/solutions/step1_multigpu_fork" 1 1 --nproc 2 --device cpu --dataset fashion-mnist \
  --data-dir fashion-subset --batch-size 100 --rendezvous-timeout 60 --collective-timeout 120 --fresh --trace cnn.json ||
  { cat cnn.log; fail "the CNN with --trace failed"; }
python3 - cnn.json <<'EOF' || fail "the CNN's trace"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for rank in (0, 1):
    mine = [e for e in events if e["pid"] == rank]
    steps = [e for e in mine if e["cat"] == "step"]
    assert len(steps) == 20, len(steps)
    for s in steps:
        inside = lambda e: s["ts"] <= e["ts"] < s["ts"] + s["dur"]
        first = min(e["ts"] for e in mine if e["name"] == "gradient allreduce (bucket 1 of 2)" and inside(e))
        assert any(e["cat"] == "backward" and e["ts"] > first for e in mine if inside(e)), (rank, s["name"])
        assert sum(e["name"] == "gradient allreduce (bucket 2 of 2)" and inside(e) for e in mine) == 1
print("cnn.json: on both ranks, every step's first bucket is launched while backward still runs")
EOF
echo "the CNN's run took $((SECONDS - start)) s"

# 3. The plot.
"$ROOT/scripts/plot" step1b_average_by_hand.json step1_multigpu_fork.json --out timeline.png >plot.log 2>&1 ||
  { cat plot.log; fail "scripts/plot failed on the traces"; }
cat plot.log
python3 - timeline.png <<'EOF' || fail "timeline.png is not a picture"
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
assert width >= 800 and height >= 300, (width, height)
EOF
grep -qE '^plot: median step time step1b_average_by_hand \(solution\) / step1_multigpu_fork \(solution\) = [0-9.]+$' plot.log ||
  fail "scripts/plot did not print the ratio of the step times"
echo '{"not": "a trace"}' > bad.json
if "$ROOT/scripts/plot" bad.json >bad.log 2>&1; then cat bad.log; fail "scripts/plot accepted a file that is not a trace"; fi
grep -q "plot: error: bad.json: no traceEvents" bad.log || { cat bad.log; fail "scripts/plot's error does not name the file"; }
pass "--trace writes every rank's timeline (by hand: all-reduces after backward; DDP: buckets during it), unchanged results; scripts/plot draws and measures it"
