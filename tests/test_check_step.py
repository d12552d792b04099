#!/usr/bin/env python3
"""The logic of scripts/check-step and scripts/progress, without building or training: what a run's
output says (ranks, checksums, steps per epoch, who saved, an open TODO), the verdict against the
solution's run, the progress lines (whole under concurrent appends, below PIPE_BUF) and the table.
The real runs are tested in tests/integration/check_step.sh and tests/slurm/test-progress.sh."""
import importlib.machinery
import importlib.util
import multiprocessing
import os
import pathlib
import shutil
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load(name, path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


check_step = load("check_step", ROOT / "scripts" / "check-step")
progress = load("progress", ROOT / "scripts" / "progress")


def training_log(ranks=2, steps=32, sums=("69.162603791803122", "69.162603791803122"), savers=("CPU0",)):
    """What a step program prints, trimmed to the lines the check reads (the README's format)."""
    lines = ["setting             | value", f"world size          | {ranks}"]
    for epoch in range(2):
        for r in range(ranks):
            lines.append(f"[CPU{r}] Epoch {epoch} | Batchsize: 32 | Steps: {steps}")
        lines.append(f"Epoch {epoch} | train loss 0.6{epoch} | test loss 0.5 | 42859 samples/s | 0.05 s | data 2.2 %")
    for tag in savers:
        lines.append(f"[{tag}] Training snapshot saved at snapshot-step1-exercise.pt (2 epochs run, step 0)")
    for r in range(ranks):
        lines.append(f"[CPU{r}] final weights checksum {sums[r]}")
    return "\n".join(lines) + "\n"


SOLUTION = check_step.Run(training_log(), 0)


class RunOutput(unittest.TestCase):
    def test_reads_ranks_checksums_steps_and_savers(self):
        run = check_step.Run(training_log(), 0)
        self.assertEqual(run.checksums, {"[CPU0]": "69.162603791803122", "[CPU1]": "69.162603791803122"})
        self.assertEqual(run.steps, {"[CPU0]": 32, "[CPU1]": 32})
        self.assertEqual(run.savers, {"[CPU0]"})
        self.assertIsNone(run.todo_error())

    def test_the_programs_own_message_naming_a_todo(self):
        text = ("[rank 0] error: step2_env_launch starts its own workers, but was started by torchrun as rank 0 of 2 "
                "(fix: run it without the launcher, or complete TODO(step2) in step2_env_launch/main.cpp)\n")
        run = check_step.Run(text, 1)
        self.assertIn("complete TODO(step2)", run.todo_error())

    def test_kept_result_round_trip(self):
        again = check_step.Run.from_json(SOLUTION.to_json())
        self.assertEqual((again.checksums, again.steps, again.savers), (SOLUTION.checksums, SOLUTION.steps,
                                                                         SOLUTION.savers))


class Verdict(unittest.TestCase):
    def verdict(self, exercise_text, rc=0, timed_out=False, step=1):
        return check_step.compare(step, check_step.Run(exercise_text, rc, timed_out), SOLUTION)

    def test_done_when_everything_matches(self):
        self.assertEqual(self.verdict(training_log()), ("DONE", []))

    def test_one_rank_where_the_solution_has_two(self):
        # Step 1 untouched: --nproc is ignored, one process trains all the data (step 0's checksum).
        result, findings = self.verdict(training_log(ranks=1, steps=64, sums=("72.847004756331444",)))
        self.assertEqual(result, "TODO")
        self.assertIn("ran as 1 rank, the solution as 2: TODO(step1) is still open", findings[0])
        self.assertIn("final checksum 72.847004756331444, the solution's is 69.162603791803122", findings[-1])

    def test_an_open_todo_named_by_the_program(self):
        text = "error: step4_sharded (exercise) was started as 2 ranks (fix: complete TODO(step4) in step4_sharded/main.cpp)\n"
        result, findings = self.verdict(text, rc=1, step=4)
        self.assertEqual(result, "TODO")
        self.assertIn("naming an open TODO: step4_sharded (exercise) was started as 2 ranks", findings[0])

    def test_ranks_that_end_with_different_weights(self):
        result, findings = self.verdict(training_log(sums=("70.1", "68.9")))
        self.assertEqual(result, "DIFFERS")
        self.assertIn("ranks end with different weights ([CPU0] 70.1, [CPU1] 68.9): is the model wrapped", findings[0])

    def test_step1b_open_or_ranks_apart(self):
        # The optional step 1b stops at the end-of-run check, naming its own TODO; ranks that still end
        # apart point to the averaging, not to the wrapper (1b has none).
        text = ("[rank 0 @ vm] error: the ranks' final weights differ: the replicas went out of sync (fix: after "
                "backward(), sum every parameter's gradient over the ranks and divide it by the world size: "
                "TODO(step1b) in step1b_average_by_hand/main.cpp)\n")
        result, findings = self.verdict(text, rc=1, step="1b")
        self.assertEqual(result, "TODO")
        self.assertIn("naming an open TODO: ", findings[0])
        self.assertIn("TODO(step1b)", findings[0])
        result, findings = self.verdict(training_log(sums=("70.1", "68.9")), step="1b")
        self.assertIn("summed over the ranks and divided by the world size after backward()? TODO(step1b)", findings[0])
        self.assertNotIn("wrapped", findings[0])

    def test_every_rank_on_all_the_data(self):
        # Sampler not sharded: both ranks run 64 steps and end equal, with step 0's weights.
        result, findings = self.verdict(training_log(steps=64, sums=("72.847004756331444",) * 2))
        self.assertEqual(result, "DIFFERS")
        self.assertIn("each rank ran 64 steps per epoch, the solution's ranks 32: does each rank train on its own shard",
                      findings[0])
        self.assertIn("the solution's is 69.162603791803122", findings[1])

    def test_every_rank_writes_the_snapshot(self):
        result, findings = self.verdict(training_log(savers=("CPU0", "CPU1")))
        self.assertEqual(result, "DIFFERS")
        self.assertEqual(findings, ["'snapshot saved' is printed by [CPU0] [CPU1], in the solution by [CPU0]: "
                                    "which ranks write the snapshot?"])

    def test_a_crash_without_a_todo(self):
        result, findings = self.verdict("Segmentation fault\n",
                                        rc=139)
        self.assertEqual(result, "FAILED")
        self.assertIn("exit code 139", findings[0])

    def test_a_hang(self):
        result, findings = self.verdict("[CPU0] Epoch 0 | Batchsize: 32 | Steps: 32\n", rc=-9, timed_out=True)
        self.assertEqual(result, "FAILED")
        self.assertIn("did not end within", findings[0])

    def test_the_verdict_line(self):
        exercise = check_step.Run(training_log(), 0)
        self.assertEqual(check_step.verdict(1, "DONE", [], exercise),
                         "step 1: DONE (2 ranks, equal weights, checksum 69.162603791803122 = the solution's)")
        self.assertEqual(check_step.verdict(2, "TODO", ["x is open", "y"]), "step 2: NOT DONE: x is open")


class ProgressLines(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="ddpw-progress-test-")

    def tearDown(self):
        shutil.rmtree(self.folder)

    def test_a_line_stays_below_pipe_buf_and_whole(self):
        line = check_step.progress_line("ana", 3, "TODO", "é\t" * 600 + "\nmore", when=0)
        self.assertLess(len(line.encode("utf-8")), 512)
        self.assertTrue(line.endswith("\n"))
        self.assertEqual(line.count("\n"), 1)
        self.assertEqual(line.split("\t")[:4], ["1970-01-01T00:00:00Z", "ana", "3", "TODO"])
        self.assertIsNotNone(progress.parse_line(line))

    def test_concurrent_appends_keep_every_line_whole(self):
        writers, lines_each = 8, 150
        with multiprocessing.Pool(writers) as pool:
            pool.starmap(append_many, [(self.folder, w, lines_each) for w in range(writers)])
        with open(os.path.join(self.folder, "shared.tsv")) as f:
            lines = f.readlines()
        self.assertEqual(len(lines), writers * lines_each)
        self.assertTrue(all(progress.parse_line(l) for l in lines), "a line was cut or interleaved")
        records, skipped = progress.read_folder(self.folder)
        self.assertEqual((len(records), skipped), (writers * lines_each, 0))

    def test_user_names_become_file_names(self):
        os.environ["DDPW_PROGRESS_USER"] = "../evil name"
        try:
            self.assertEqual(check_step.progress_user(), ".._evil_name")
        finally:
            del os.environ["DDPW_PROGRESS_USER"]

    def test_a_missing_or_closed_folder_is_named_with_the_fix(self):
        with self.assertRaisesRegex(check_step.CheckError, "does not exist .*mkdir -m 1777"):
            check_step.check_progress_dir(os.path.join(self.folder, "missing"))


def append_many(folder, writer, count):
    for i in range(count):
        line = check_step.progress_line(f"user{writer}", i % 6, "TODO", f"writer {writer} line {i} " + "x" * 300)
        check_step.append_progress(folder, line, "shared")


class Table(unittest.TestCase):
    def test_latest_result_per_user_and_step_in_any_order(self):
        lines = [check_step.progress_line(u, s, r, d, when=t) for u, s, r, d, t in [
            ("zoe", 1, "DONE", "", 300), ("ana", 1, "DONE", "", 200), ("ana", 1, "TODO", "open", 100),
            ("ana", 2, "TODO", "the program stopped, naming an open TODO", 400)]]
        records = [progress.parse_line(l) for l in reversed(lines)]
        table = progress.latest(records)
        self.assertEqual(table["ana"][1][1], "DONE")
        self.assertEqual(table["ana"][2][1], "TODO")
        text = progress.render(table)
        rows = text.splitlines()
        self.assertTrue(rows[0].startswith("user | step 1"), text)
        self.assertIn("step 2", rows[0])
        self.assertTrue(rows[2].startswith("ana ") and rows[3].startswith("zoe "), text)  # sorted by name
        self.assertIn("step 2 TODO", rows[2])
        self.assertIn("2 learners; done: step 1: 2, step 2: 0", text)

    def test_the_optional_step_sits_after_the_step_it_branches_off(self):
        lines = [check_step.progress_line(u, s, "DONE", "", when=t) for u, s, t in [
            ("ana", 2, 300), ("ana", "1b", 200), ("ana", 1, 100), ("zoe", 10, 400)]]
        records = [progress.parse_line(l) for l in lines]
        self.assertNotIn(None, records)
        text = progress.render(progress.latest(records))
        header = [cell.strip() for cell in text.splitlines()[0].split("|")]
        self.assertEqual(header[:5], ["user", "step 1", "step 1b", "step 2", "step 10"], text)
        self.assertIn("done: step 1: 1, step 1b: 1, step 2: 1, step 10: 1", text)

    def test_lines_not_written_by_check_step(self):
        self.assertIsNone(progress.parse_line("hello\n"))
        self.assertIsNone(progress.parse_line("2026-01-01T00:00:00Z\tana\tx\tDONE\t\n"))
        self.assertIsNone(progress.parse_line("2026-01-01T00:00:00Z\tana\t1\tMAYBE\t\n"))
        self.assertEqual(progress.render({}), "no checks recorded yet")

    def test_missing_folder(self):
        self.assertEqual(progress.main(["/nonexistent/ddpw-progress"]), 2)


class CommandLine(unittest.TestCase):
    def test_bad_steps_stop_before_any_build(self):
        self.assertEqual(check_step.main(["x"]), 2)
        self.assertEqual(check_step.main(["9", "--no-build"]), 2)
        self.assertEqual(check_step.main(["1c", "--no-build"]), 2)  # no such optional step
        self.assertEqual(check_step.main(["1", "--no-build", "--progress", "/nonexistent/ddpw-progress"]), 2)

    def test_gpu_needs_two_gpus(self):
        # One GPU: one rank, as a program that starts no second rank: it would look done.
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
        try:
            with self.assertRaisesRegex(check_step.CheckError, "needs 2 GPUs or more; 1 GPU visible"):
                check_step.check(1, True, True, None)
        finally:
            if before is None:
                del os.environ["CUDA_VISIBLE_DEVICES"]
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before


class SharedResults(unittest.TestCase):
    """The solution's results in the progress folder: trusted only as its owner's, read-only to others."""

    def setUp(self):
        self.progress = tempfile.mkdtemp(prefix="ddpw-results-")
        os.chmod(self.progress, 0o1777)
        self.folder = os.path.join(self.progress, ".solutions")
        os.mkdir(self.folder, 0o755)
        self.path = os.path.join(self.folder, "step1.key.json")
        check_step.write_atomically(self.path, {"program": "p", "run": {"rc": 0, "checksums": {}, "steps": {},
                                                                         "savers": []}})

    def tearDown(self):
        shutil.rmtree(self.progress)

    def refused(self, text):
        with self.assertRaises(check_step.CheckError) as caught:
            check_step.trusted_shared_result(self.progress, self.path)
        self.assertIn(text, str(caught.exception))
        self.assertIn(f"scripts/progress --prepare {self.progress}", str(caught.exception))

    def test_the_owners_result_is_read(self):
        self.assertEqual(check_step.trusted_shared_result(self.progress, self.path)["program"], "p")
        self.assertIsNone(check_step.trusted_shared_result(self.progress, self.path + ".none"))

    def test_a_result_others_may_write_is_refused(self):
        os.chmod(self.path, 0o666)
        self.refused("may be written by others (mode 666)")

    def test_a_folder_others_may_write_is_refused(self):
        os.chmod(self.folder, 0o1777)
        self.refused("may be written by others (mode 1777)")

    def test_a_link_is_refused(self):
        os.rename(self.path, self.path + ".real")
        os.symlink(self.path + ".real", self.path)
        self.refused("is not a plain file")

    @unittest.skipUnless(os.geteuid() == 0, "chown to another user needs root")
    def test_another_users_result_is_refused_and_prepare_removes_it(self):
        os.chown(self.path, 65534, 65534)  # nobody's
        self.refused("belongs to")
        os.chmod(self.folder, 0o1777)  # as an older check-step made it
        check_step.secure_results_folder(self.progress)
        self.assertEqual(os.stat(self.folder).st_mode & 0o7777, 0o755)
        self.assertFalse(os.path.exists(self.path))


if __name__ == "__main__":
    unittest.main(verbosity=2)
