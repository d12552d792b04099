#!/usr/bin/env bash
# Step 6's question 1 as its page gives it (the command with --steps 2 in step6_fully_sharded/
# README.md), run with the solution's program on 1 and 2 ranks: each epoch stops after 2 steps,
# every rank prints its peak memory at the end, and rank 0 alone prints the lines the GPT wrote
# (drawn at a temperature: non-empty, every character one of the text's). The untouched exercise
# (ZeRO-2), the question's first program, prints the same lines through the same reporter (not run
# here: the suite's time).
source "$(dirname "$0")/lib.sh"
page=${DDPW_ROOT:?DDPW_ROOT must point at the project}/step6_fully_sharded/README.md
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
[ -d /usr/share/games/fortunes ] || fail "the fortunes text is missing (scripts/setup.sh --rest installs it)"

# The page's command: question 1's line that runs the program with --steps 2.
line=$(awk '/^1\. \*\*The largest batch per device/ { q = 1 } q && /torchrun .*--steps 2/ { print; exit }' "$page")
[ -n "$line" ] || fail "no command with --steps 2 under question 1 of $page"
read -ra words <<< "$line"
[[ " ${words[*]} " == *" --nproc_per_node=2 "* && " ${words[*]} " == *" build/bin/step6_fully_sharded "* ]] ||
  fail "question 1's command is not 'torchrun --nproc_per_node=2 ... build/bin/step6_fully_sharded ...': $line"
mkdir -p out

# run RANKS PROGRAM LOG [ARGS...]: the page's command with RANKS ranks, PROGRAM (under $BIN) in place
# of the page's, and ARGS added.
run() {
  local ranks=$1 program=$2 log=$3 args=() word
  for word in "${words[@]}"; do
    case $word in
      --nproc_per_node=*) args+=("--nproc_per_node=$ranks") ;;
      build/bin/step6_fully_sharded) args+=("$BIN/$program") ;;
      *) args+=("$word") ;;
    esac
  done
  run_logged "$log" "${args[@]}" "${@:4}" --rendezvous-timeout 60 --collective-timeout 120 ||
    { cat "$log"; fail "$ranks rank(s) of $program exited non-zero: ${args[*]}"; }
}

# check_peaks LOG RANKS: one peak-memory line per rank, each rank its own, with a size in it.
check_peaks() {
  local log=$1 ranks=$2
  local tags; tags=$(grep -E '^\[CPU[0-9]+\] peak memory: [0-9.]+ (B|kB|MB) resident' "$log" | cut -d' ' -f1 | sort -u)
  [ "$(grep -c 'peak memory:' "$log")" -eq "$ranks" ] && [ "$(grep -c . <<< "$tags")" -eq "$ranks" ] ||
    { cat "$log"; fail "$log: expected one 'peak memory' line from each of $ranks rank(s), got: $tags"; }
  [ "$(grep -cE 'Epoch 0 \| Batchsize: [0-9]+ \| Steps: 2$' "$log")" -eq "$ranks" ] ||
    { cat "$log"; fail "$log: the epoch did not stop after the 2 steps of --steps 2"; }
  grep -qE '^steps per epoch +\| at most 2' "$log" || fail "$log: the settings table has no 'steps per epoch' row"
}

for ranks in 1 2; do
  log=fsdp-$ranks.log
  # Two steps teach the GPT little: its greedy lines may be blanks only (gpt_sample's unit test holds
  # greedy to the same lines every time); drawn at a temperature they are text.
  run "$ranks" solutions/step6_fully_sharded "$log" --sample-temperature 0.8
  check_peaks "$log" "$ranks"
  [ "$(grep -c 'final weights checksum' "$log")" -eq 1 ] || fail "$log: expected rank 0's checksum only"
  grep 'Sample: ' "$log" | grep -vq '^\[CPU0\] Sample: ' && fail "$log: a rank other than 0 printed a sample"
  grep -q 'Sample: (blanks only' "$log" && fail "$log: the GPT's draws were only blanks"
  samples=$(grep -c '^\[CPU0\] Sample: ' "$log" || true)
  [ "$samples" -ge 1 ] && [ "$samples" -le 3 ] || { cat "$log"; fail "$log: $samples sample lines, not 1 to 3"; }
  python3 - "$log" <<'PY' || fail "$log: a sample line is empty or has a character the text does not"
import glob, os, sys
text = set()
for path in glob.glob("/usr/share/games/fortunes/*.dat"):
    with open(path[:-4], "rb") as f:
        text |= set(f.read())
for line in open(sys.argv[1], "rb"):
    if line.startswith(b"[CPU0] Sample: "):
        sample = line[len(b"[CPU0] Sample: "):].rstrip(b"\n")
        assert sample.strip(), line
        assert set(sample) <= text | {ord(" "), ord("?")}, (line, set(sample) - text)
        sample.decode("utf-8")  # whole characters only
PY
  echo "FSDP on $ranks rank(s): $(grep 'peak memory' "$log" | sed -E 's/ resident.*//' | tr '\n' ';') $samples sample line(s): $(grep -m1 'Sample: ' "$log")"
done

pass "step 6's question 1 in short runs: peak memory per rank, the GPT's sample on rank 0"
