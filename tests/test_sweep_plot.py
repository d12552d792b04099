#!/usr/bin/env python3
"""scripts/sweep and scripts/plot, end to end, without training anything.

1. sweep --dry-run prints one launch command per (ranks x threads), with the right arguments; the
   batch per rank is the global batch / world size (or fixed with --batch-per-rank).
2. sweep runs a stand-in program under torchrun (it writes the metrics CSV rank 0 would write),
   so the launch, the per-configuration files and the exit codes are real.
3. plot draws those CSVs; the PNG is decoded here with the standard library alone (an independent
   reader, not the library that wrote it) and must be a real picture: large, many colours, the
   configurations' line colours present.
4. plot's errors: an empty folder and a foreign CSV exit 1 with a message naming the problem.
Needs torchrun (scripts/setup.sh installs it) and a Python with matplotlib for scripts/plot.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import unittest
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "scripts" / "sweep"
PLOT = ROOT / "scripts" / "plot"
TIMEOUT = 120  # seconds per script run: nothing may hang

# Stands in for step2_env_launch: the same arguments, and rank 0 writes the same CSV columns with
# numbers that depend on the configuration (throughput grows with ranks and threads), and a
# metrics file of the version before data_seconds (ranks 1 x threads 2) still plots.
FAKE_PROGRAM = textwrap.dedent("""\
    #!/usr/bin/env bash
    set -euo pipefail
    epochs=$1; shift 2
    threads=1 metrics=""
    while [ $# -gt 0 ]; do
      case $1 in --threads) threads=$2; shift 2 ;; --metrics) metrics=$2; shift 2 ;; *) shift ;; esac
    done
    : "${RANK:?RANK not set: not started by a launcher}" "${WORLD_SIZE:?}" "${LOCAL_WORLD_SIZE:?}"
    [ "$RANK" -eq 0 ] || exit 0
    old=0; [ "$WORLD_SIZE" = 1 ] && [ "$threads" = 2 ] && old=1
    header=epoch,world_size,ranks_per_node,threads,train_loss,test_loss,test_accuracy,samples_per_s,epoch_seconds
    [ $old = 1 ] && echo "$header" > "$metrics" || echo "$header,data_seconds" > "$metrics"
    for ((e = 0; e < epochs; e++)); do
      awk -v e=$e -v w=$WORLD_SIZE -v n=$LOCAL_WORLD_SIZE -v t=$threads -v old=$old 'BEGIN {
        s = 900 * w * (0.6 + 0.4 * t) * (e == 0 ? 0.8 : 1);
        printf "%d,%d,%d,%d,%.4f,%.4f,%.4f,%.1f,%.2f", e, w, n, t, 0.9 / (e + 1) + 0.01 * w,
               1.0 / (e + 1) + 0.02 * t, 0.70 + 0.05 * e - 0.01 * w, s, 60000 / s;
        if (!old) printf ",%.3f", 0.006 * 60000 / s;  # data: 0.6 % of the epoch
        printf "\\n" }' >> "$metrics"
    done
    """)

TAB10_BLUE = (31, 119, 180)   # the first two configurations' colours in scripts/plot.py
TAB10_ORANGE = (255, 127, 14)


def run(cmd, **kwargs):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def decode_png(path):
    """(width, height, set of RGB colours) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"{path} is not a PNG (signature {data[:8]!r})")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(kind + body) != crc:
            raise AssertionError(f"{path}: bad CRC in chunk {kind!r}")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace != 0:
        raise AssertionError(f"{path}: unexpected PNG format {header}")
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    colours = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # PNG filters: None, Sub, Up, Average, Paeth
            a = row[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                row[i] = (row[i] + a) & 255
            elif kind == 2:
                row[i] = (row[i] + b) & 255
            elif kind == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(row[x:x + 3]) for x in range(0, stride, bpp))
        previous = row
    return width, height, {tuple(c) for c in colours}


class SweepAndPlot(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ddpw_sweep_"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_dry_run_prints_one_command_per_configuration(self):
        r = run([SWEEP, "--dry-run", "--ranks", "1 2", "--threads", "1 3", "--epochs", "4", "--out", self.tmp,
                 "--", "--log-every", "50"])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 4, r.stdout)
        for line, (w, t) in zip(lines, [(1, 1), (1, 3), (2, 1), (2, 3)]):
            config = f"ranks{w}_threads{t}"
            self.assertTrue(line.startswith(f"torchrun --standalone --nproc_per_node={w} --no-python "), line)
            for part in ["solutions/step2_env_launch 4 4", f"--threads {t}", f"--metrics {self.tmp}/{config}.csv",
                         f"--snapshot {self.tmp}/{config}.pt", "--fresh", "--dataset fashion-mnist",
                         f"--batch-size {64 // w} ",  # the default: global batch 64 over w ranks
                         "--log-every 50"]:
                self.assertIn(part, line + " ")
        self.assertFalse(list(self.tmp.iterdir()), "a dry run wrote files")

    def batch_sizes(self, *args):
        r = run([SWEEP, "--dry-run", "--threads", "1", *args])
        self.assertEqual(r.returncode, 0, r.stderr)
        return [int(line.split("--batch-size ")[1].split()[0]) for line in r.stdout.strip().splitlines()]

    def test_global_batch_is_split_over_the_ranks(self):
        self.assertEqual(self.batch_sizes("--ranks", "1 2 3 4", "--global-batch", "48"), [48, 24, 16, 12])
        # --batch-per-rank: the same per rank, the global batch grows; the last of the two wins.
        self.assertEqual(self.batch_sizes("--ranks", "1 2 4", "--global-batch", "48", "--batch-per-rank", "10"),
                         [10, 10, 10])
        self.assertEqual(self.batch_sizes("--ranks", "1 2", "--batch-per-rank", "10", "--global-batch", "8"), [8, 4])

    def test_a_global_batch_that_does_not_split_is_a_usage_error(self):
        r = run([SWEEP, "--dry-run", "--ranks", "1 2 3", "--global-batch", "64"])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--global-batch 64 does not split evenly over 3 ranks", r.stderr)
        self.assertEqual(r.stdout, "", "commands printed before the error")
        r = run([SWEEP, "--dry-run", "--", "--batch-size", "32"])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--global-batch N or --batch-per-rank N", r.stderr)

    def test_other_launchers_in_dry_run(self):
        r = run([SWEEP, "--dry-run", "--launcher", "srun", "--ranks", "4", "--threads", "8"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("srun --ntasks=4 --cpus-per-task=8 ", r.stdout)
        r = run([SWEEP, "--dry-run", "--launcher", "mpirun", "--ranks", "2", "--threads", "1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("mpirun -np 2 ", r.stdout)
        self.assertIn("-x MASTER_ADDR=127.0.0.1", r.stdout)

    def test_bad_arguments_are_usage_errors(self):
        for args, message in [(["--ranks", "0"], "--ranks"), (["--threads", "x"], "--threads"),
                              (["--launcher", "ssh"], "--launcher"), (["--dataset", "cifar"], "--dataset"),
                              (["--global-batch", "0"], "--global-batch"), (["--batch-per-rank", "-1"], "--batch-per-rank"),
                              (["--bogus"], "unknown option")]:
            r = run([SWEEP, "--dry-run", *args])
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn(message, r.stderr)

    def test_missing_program_is_reported(self):
        r = run([SWEEP, "--program", self.tmp / "nope", "--out", self.tmp / "out"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not built", r.stderr)

    def test_sweep_then_plot(self):
        if shutil.which("torchrun", path=os.environ.get("PATH", "") + os.pathsep +
                        str(Path(os.environ.get("DDPW_HOME", Path.home() / ".cache/ddp-workshop")) / "venv/bin")) is None:
            self.fail("torchrun not found: run scripts/setup.sh (it installs torch, which brings torchrun)")
        fake = self.tmp / "fake_step2"
        fake.write_text(FAKE_PROGRAM)
        fake.chmod(0o755)
        out = self.tmp / "sweep"
        r = run([SWEEP, "--program", fake, "--ranks", "1 2", "--threads", "1 2", "--epochs", "3", "--out", out])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for w in (1, 2):
            for t in (1, 2):
                rows = (out / f"ranks{w}_threads{t}.csv").read_text().strip().splitlines()
                self.assertEqual(len(rows), 4, rows)  # header + 3 epochs
                self.assertTrue(rows[1].startswith(f"0,{w},{w},{t},"), rows[1])
                self.assertTrue((out / f"ranks{w}_threads{t}.log").exists())

        png = self.tmp / "scaling.png"
        r = run([PLOT, out, "--out", png])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("samples/s with 1 thread(s) per rank: 1 rank(s) 900, 2 rank(s) 1800", r.stdout)
        self.assertIn("plot: 2 rank(s) x 1 thread(s): 1800 samples/s, epoch 33.3 s, data 0.6 %, 3 epoch(s)", r.stdout)
        # the older file without data_seconds: no data share, but plotted
        self.assertIn("plot: 1 rank(s) x 2 thread(s): 1260 samples/s, epoch 47.6 s, 3 epoch(s)", r.stdout)
        self.assertGreater(png.stat().st_size, 30_000, "suspiciously small picture")
        width, height, colours = decode_png(png)
        self.assertGreaterEqual(width, 1200)
        self.assertGreaterEqual(height, 400)
        self.assertGreater(len(colours), 50, f"only {len(colours)} colours: hardly a plot")
        self.assertIn(TAB10_BLUE, colours, "the first configuration's line is missing")
        self.assertIn(TAB10_ORANGE, colours, "the second configuration's line is missing")

    def test_a_failing_run_fails_the_sweep(self):
        failing = self.tmp / "failing"
        failing.write_text("#!/bin/sh\necho 'error: no data' >&2\nexit 1\n")
        failing.chmod(0o755)
        r = run([SWEEP, "--program", failing, "--ranks", "1", "--threads", "1", "--out", self.tmp / "out"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("ranks1_threads1: FAILED", r.stderr)

    def test_plot_errors(self):
        empty = self.tmp / "empty"
        empty.mkdir()
        r = run([PLOT, empty])
        self.assertEqual(r.returncode, 1)
        self.assertIn("no metrics rows", r.stderr)
        (empty / "other.csv").write_text("a,b\n1,2\n")
        r = run([PLOT, empty])
        self.assertEqual(r.returncode, 1)
        self.assertIn("other.csv: not a metrics CSV", r.stderr)
        r = run([PLOT, self.tmp / "nowhere"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("is not a folder", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
