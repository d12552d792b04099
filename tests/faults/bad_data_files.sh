#!/usr/bin/env bash
# Fault: missing, truncated or malformed MNIST-format (IDX) files. Each must end with exit 1 and
# an error naming the file and what is wrong with it, within seconds, before any training.
source "$(dirname "$0")/lib.sh"

# A good tiny set to damage one file at a time (64 training images, 32 test images).
make_idx good 64
make_idx good_gz 64 gz

# run_case DIR REGEX: trains on the files in DIR; the error must match REGEX.
run_case() {
  local dir=$1 regex=$2
  mkdir -p "run_$dir" && cd "run_$dir"
  expect_error "$dir" 8 1 "$regex" "$STEP0" 1 1 --dataset mnist --data-dir "$WORK/$dir" --threads 1
  [ -z "$(ls -A)" ] || fail "$dir: wrote $(ls -A) despite the bad data"
  grep -q 'Epoch 0' "$LOG" && fail "$dir: training started despite the bad data"
  cd "$WORK"
}
damaged() { rm -rf "$1"; cp -r "${2:-good}" "$1"; }
# Rewrites bytes of a file: patch FILE OFFSET PYTHON-BYTES-EXPRESSION
patch() { python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(eval(sys.argv[3]))' "$@"; }

run_case missing_dir "data folder $WORK/missing_dir does not exist"

damaged no_train_images; rm no_train_images/train-images-idx3-ubyte
run_case no_train_images "no_train_images/train-images-idx3-ubyte not found"

damaged truncated_images; truncate -s 20000 truncated_images/train-images-idx3-ubyte
run_case truncated_images "truncated_images/train-images-idx3-ubyte: truncated: expected 64 images"

damaged empty_labels; : > empty_labels/t10k-labels-idx1-ubyte
run_case empty_labels "empty_labels/t10k-labels-idx1-ubyte: truncated: expected the magic number"

damaged swapped; cp good/train-labels-idx1-ubyte swapped/train-images-idx3-ubyte
run_case swapped "swapped/train-images-idx3-ubyte: not an IDX images file.*found 2049 \(a labels file\)"

damaged wrong_shape; patch wrong_shape/train-images-idx3-ubyte 8 'b"\0\0\0\x20"'
run_case wrong_shape "wrong_shape/train-images-idx3-ubyte: expected 28x28 images, found 32x28"

damaged bad_label; patch bad_label/train-labels-idx1-ubyte 8 'b"\x0c"'
run_case bad_label "bad_label/train-labels-idx1-ubyte: label 12 found, expected classes 0-9"

damaged huge_count; patch huge_count/train-images-idx3-ubyte 4 'b"\x7f\xff\xff\xff"'
run_case huge_count "huge_count/train-images-idx3-ubyte: truncated: expected 2147483647 images.*the file has"

damaged extra_bytes; printf 'xyz' >> extra_bytes/train-labels-idx1-ubyte
run_case extra_bytes "extra_bytes/train-labels-idx1-ubyte: longer than its header says"

damaged count_mismatch; patch count_mismatch/train-labels-idx1-ubyte 4 'b"\0\0\0\x3c"'; truncate -s 68 count_mismatch/train-labels-idx1-ubyte
run_case count_mismatch "count_mismatch/train-images-idx3-ubyte holds 64 images but .*count_mismatch/train-labels-idx1-ubyte holds 60 labels"

damaged truncated_gz good_gz; truncate -s 20000 truncated_gz/train-images-idx3-ubyte.gz
run_case truncated_gz "truncated_gz/train-images-idx3-ubyte.gz: (truncated|read error)"

# A flipped byte inside the compressed stream: gzip's own CRC (or the inflater) must catch it.
damaged corrupt_gz good_gz; patch corrupt_gz/train-images-idx3-ubyte.gz 30000 'bytes([open(sys.argv[1], "rb").read()[30000] ^ 0xff])'
run_case corrupt_gz "corrupt_gz/train-images-idx3-ubyte.gz: read error"

pass "every damaged data file: exit 1 naming the file and the damage, no training, no snapshot"
