#!/usr/bin/env bash
# Fault: malformed or out-of-range options. Each must give exit 2 and ONE line on stderr that names
# the option and says how to fix it, within a few seconds, and write nothing (no snapshot, no CSV:
# each case runs in an empty folder, with the default snapshot path and a --metrics file there).
source "$(dirname "$0")/lib.sh"

check() {  # check PROGRAM REGEX ARGS...
  local prog=$1 regex=$2; shift 2
  local name; name="$(basename "$prog") $*"
  local extra=(--metrics m.csv)  # a CSV that must not appear (unless the case is about --metrics)
  [[ " $* " == *" --metrics "* ]] && extra=()
  mkdir run && cd run
  expect_error "$name" 5 2 "$regex" "$prog" "$@" "${extra[@]}"
  cd ..
  local lines; lines=$(grep -c . "$LOG")
  [ "$lines" -eq 1 ] || fail "$name: $lines lines of output, expected one error line"
  grep -q '(fix: ' "$LOG" || fail "$name: no fix in the message"
  [ -z "$(ls -A run)" ] || fail "$name: wrote $(ls -A run) despite the error"
  rm -rf run
}

check "$STEP0" 'total_epochs.*0'                 0 1
check "$STEP0" "total_epochs: 'abc' is not a whole number.*give total_epochs a whole number" abc 1
check "$STEP0" "total_epochs: '5.5' is not a whole number" 5.5 1
check "$STEP0" "--batch-size: 'x' is not a whole number" 5 1 --batch-size x
check "$STEP0" "--lr: 'fast' is not a number"     5 1 --lr fast
check "$STEP0" 'save_every is required'          5
check "$STEP0" 'save_every.*0'                   5 0
check "$STEP0" 'not expected: --bogus'           5 1 --bogus
check "$STEP0" '--batch-size.*0'              5 1 --batch-size 0
check "$STEP0" '--batch-size.*99999999999'    5 1 --batch-size 99999999999
check "$STEP0" '--dataset.*cifar'             5 1 --dataset cifar
check "$STEP0" "--device 'gpu'.*use auto, cpu" 5 1 --device gpu
check "$STEP0" '--threads.*-1'                5 1 --threads -1
check "$STEP0" '--seed.*-3'                   5 1 --seed -3
check "$STEP0" '--lr.*-1'                     5 1 --lr -1
check "$STEP0" '--gamma.*2'                   5 1 --gamma 2
check "$STEP0" '--log-every.*-1'              5 1 --log-every -1
check "$STEP0" "--snapshot '/nonexistent/x.pt'.*mkdir -p /nonexistent" 5 1 --snapshot /nonexistent/x.pt
check "$STEP0" "--metrics '/nonexistent/m.csv'.*mkdir -p /nonexistent" 5 1 --metrics /nonexistent/m.csv
check "$STEP0" "--snapshot '/tmp' is a folder" 5 1 --snapshot /tmp
check "$STEP0" "--snapshot '/proc/s.pt': cannot create a file in folder '/proc'" 5 1 --snapshot /proc/s.pt
check "$STEP0" "--metrics '/proc/m.csv': cannot create a file in folder '/proc'" 5 1 --metrics /proc/m.csv
check "$STEP1" '--nproc.*0'                   5 1 --nproc 0
check "$STEP1" 'not expected:.*--master-addr' 5 1 --master-addr n1   # its workers meet on this node
check "$STEP2" '--master-port.*70000'         5 1 --master-port 70000
check "$STEP2" '--rendezvous-timeout.*0'      5 1 --rendezvous-timeout 0
check "$STEP2" '--collective-timeout.*-1'     5 1 --collective-timeout -1
check "$STEP2" '--backend.*mpi'               5 1 --backend mpi
check "$STEP2" '--bucket-mb.*0'               5 1 --bucket-mb 0
check "$STEP2" "--init-method 'tcp://.*file:///" 5 1 --init-method tcp://127.0.0.1:5
pass "every malformed option: exit 2, one line naming the option and the fix, nothing written"
