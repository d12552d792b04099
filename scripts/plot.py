"""Draws the metrics CSVs of a sweep (scripts/sweep) into one PNG, or the timelines of --trace.

    scripts/plot DIR [--out PNG]                          a sweep's folder (default PNG: DIR/scaling.png)
    scripts/plot TRACE.json [TRACE2.json] [--out PNG] [--steps N]
                                                          traces (default PNG: TRACE.png): plot_timeline.py

For a sweep:

Left: training loss (solid) and test loss (dashed) per epoch, one colour per configuration.
Middle: test accuracy per epoch. Right: throughput (samples/s, all ranks) against the world size,
one line per threads-per-rank value, with ideal linear scaling for reference. Also prints one
line per configuration (throughput, epoch time, data-loading share, final accuracy). Run it
through scripts/plot, which picks a Python that has matplotlib.
"""
import argparse
import csv
import statistics
import sys
from pathlib import Path

COLUMNS = ["epoch", "world_size", "ranks_per_node", "threads", "train_loss", "test_loss",
           "test_accuracy", "samples_per_s", "epoch_seconds"]
# Added later (the slowest rank's seconds producing batches): files written before lack it.
OPTIONAL = ["data_seconds"]


class PlotError(Exception):
    pass


def read_run(path):
    """One configuration's rows, keyed by epoch (a resumed run's later row for an epoch wins)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise PlotError(f"{path}: not a metrics CSV (missing columns: {', '.join(missing)}); "
                            "metrics files come from --metrics")
        rows = {}
        for line, row in enumerate(reader, start=2):
            try:
                values = {c: float(row[c]) for c in COLUMNS}
                values.update({c: float(row[c]) for c in OPTIONAL if row.get(c) not in (None, "")})
            except (TypeError, ValueError):
                raise PlotError(f"{path}:{line}: not a number in {row}") from None
            rows[int(values["epoch"])] = values
    return [rows[e] for e in sorted(rows)]


def steady(values):
    """The median without the first epoch when there are more (it includes warm-up)."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def steady_throughput(rows):
    return steady([r["samples_per_s"] for r in rows])


def summary(rows):
    """One configuration in one line: what the plot shows, in numbers."""
    first, last = rows[0], rows[-1]
    text = (f"{int(first['world_size'])} rank(s) x {int(first['threads'])} thread(s): "
            f"{steady_throughput(rows):.0f} samples/s, epoch {steady([r['epoch_seconds'] for r in rows]):.1f} s")
    shares = [100 * r["data_seconds"] / r["epoch_seconds"] for r in rows if "data_seconds" in r and r["epoch_seconds"] > 0]
    if shares:
        text += f", data {steady(shares):.1f} %"
    text += f", {len(rows)} epoch(s), final train loss {last['train_loss']:.4g}"
    if last["test_accuracy"] > 0:
        text += f", test accuracy {100 * last['test_accuracy']:.2f} %"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="DIR|TRACE.json",
                        help="folder with the sweep's *.csv files, or one or two --trace files")
    parser.add_argument("--out", help="the PNG to write (default: DIR/scaling.png, or TRACE.png)")
    parser.add_argument("--steps", type=int, default=3, help="traces: how many consecutive steps to draw")
    args = parser.parse_args()

    if all(p.endswith(".json") for p in args.inputs):
        if len(args.inputs) > 2 or args.steps < 1:
            raise PlotError("give one or two trace files (--trace FILE of two programs, to compare), and --steps >= 1")
        import plot_timeline
        try:
            plot_timeline.plot(args.inputs, args.out or str(Path(args.inputs[0]).with_suffix(".png")), args.steps)
        except plot_timeline.TraceError as e:
            raise PlotError(str(e)) from None
        return 0
    if len(args.inputs) != 1:
        raise PlotError("give one sweep folder, or one or two .json trace files")
    folder = Path(args.inputs[0])
    if not folder.is_dir():
        raise PlotError(f"{folder} is not a folder; give the --out folder of scripts/sweep")
    runs = {}
    for path in sorted(folder.glob("*.csv")):
        rows = read_run(path)
        if rows:
            runs[path.stem] = rows
        else:
            print(f"plot: note: {path} has no rows yet (the run ended before its first epoch)", file=sys.stderr)
    if not runs:
        raise PlotError(f"no metrics rows in {folder}/*.csv; run scripts/sweep --out {folder} first")
    out = Path(args.out) if args.out else folder / "scaling.png"

    import matplotlib
    matplotlib.use("Agg")  # no display on a cluster
    import matplotlib.pyplot as plt

    # Order: world size, then threads, so the legend reads like the sweep.
    names = sorted(runs, key=lambda n: (runs[n][0]["world_size"], runs[n][0]["threads"], n))
    colours = plt.get_cmap("tab10" if len(names) <= 10 else "viridis")
    colour = {n: colours(i if len(names) <= 10 else i / max(1, len(names) - 1)) for i, n in enumerate(names)}

    fig, (ax_loss, ax_acc, ax_speed) = plt.subplots(1, 3, figsize=(16, 4.8))
    for n in names:
        rows = runs[n]
        epochs = [r["epoch"] for r in rows]
        label = f"{int(rows[0]['world_size'])} rank(s) x {int(rows[0]['threads'])} thread(s)"
        ax_loss.plot(epochs, [r["train_loss"] for r in rows], "-o", color=colour[n], label=label)
        ax_loss.plot(epochs, [r["test_loss"] for r in rows], "--s", color=colour[n])
        ax_acc.plot(epochs, [100 * r["test_accuracy"] for r in rows], "-o", color=colour[n], label=label)
    ax_loss.set(title="Loss (solid: training, dashed: test)", xlabel="epoch", ylabel="loss")
    if all(r["train_loss"] > 0 and r["test_loss"] > 0 for rows in runs.values() for r in rows):
        ax_loss.set_yscale("log")
    ax_loss.legend(fontsize="x-small")
    ax_acc.set(title="Test accuracy", xlabel="epoch", ylabel="accuracy (%)")
    if any(r["test_accuracy"] > 0 for rows in runs.values() for r in rows):
        ax_acc.legend(fontsize="x-small")
    else:
        ax_acc.text(0.5, 0.5, "no accuracy: a regression workload", ha="center", va="center",
                    transform=ax_acc.transAxes)
    for ax in (ax_loss, ax_acc):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)

    # Throughput: one line per threads-per-rank value; ideal = the smallest run scaled linearly.
    by_threads = {}
    for n in names:
        first = runs[n][0]
        by_threads.setdefault(int(first["threads"]), []).append((int(first["world_size"]), steady_throughput(runs[n])))
    # Other colours than the configurations': here a colour is a threads-per-rank value.
    threads_colours = plt.get_cmap("Dark2")
    for i, (threads, points) in enumerate(sorted(by_threads.items())):
        points.sort()
        sizes = [p[0] for p in points]
        speeds = [p[1] for p in points]
        line, = ax_speed.plot(sizes, speeds, "-D", color=threads_colours(i % 8), label=f"{threads} thread(s) per rank")
        if len(points) > 1:
            ax_speed.plot(sizes, [speeds[0] * s / sizes[0] for s in sizes], ":", color=line.get_color(),
                          label=f"ideal ({threads} thread(s))")
    all_sizes = sorted({p[0] for points in by_threads.values() for p in points})
    if all_sizes[-1] >= 4 * all_sizes[0]:
        ax_speed.set_xscale("log", base=2)  # 1, 2, 4, 8, ... evenly spaced
    ax_speed.set_xticks(all_sizes, [str(s) for s in all_sizes])
    ax_speed.minorticks_off()
    ax_speed.set(title="Throughput (all ranks)", xlabel="world size (ranks)",
                 ylabel="samples/s (median of epochs after the first)")
    ax_speed.set_ylim(bottom=0)
    ax_speed.grid(alpha=0.3)
    ax_speed.legend(fontsize="x-small")

    fig.suptitle(f"{folder.resolve().name}: {len(names)} configuration(s)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: wrote {out}")
    for threads, points in sorted(by_threads.items()):
        table = ", ".join(f"{w} rank(s) {s:.0f}" for w, s in sorted(points))
        print(f"plot: samples/s with {threads} thread(s) per rank: {table}")
    for n in names:
        print(f"plot: {summary(runs[n])}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PlotError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        sys.exit(1)
