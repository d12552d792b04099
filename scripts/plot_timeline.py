"""Draws the timelines that --trace FILE writes (Chrome trace JSON) into one PNG, and measures them.

One panel per trace, on one time scale: for each rank a lane of backward (the autograd nodes as
they ran) and a lane of its all-reduces (launch to completion; the gradients' in colour, the
others grey), over a few consecutive training steps (dotted lines: where each step starts). Also
prints, per trace, over all the steps it recorded: the median step time (the slowest rank's per
step), the gradient all-reduces per step and their time, and the share of that time during which
backward was still running on the rank (what overlapping hides). With two traces, the ratio of
their median step times. Run it through scripts/plot (it picks a Python that has matplotlib).
"""
import json
import statistics
from pathlib import Path


class TraceError(Exception):
    pass


def read_trace(path):
    """{'about', 'ranks': {rank: {'backward': [(start, end)], 'collectives': [(start, end, name)],
    'steps': [(start, end, name)]}}}, times in ms."""
    try:
        data = json.loads(Path(path).read_text())
    except ValueError as e:
        raise TraceError(f"{path}: not JSON ({e}); traces come from a program's --trace FILE") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents: not a Chrome trace (they come from --trace FILE)")
    ranks = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            rank, start, end = int(e["pid"]), float(e["ts"]) / 1e3, (float(e["ts"]) + float(e["dur"])) / 1e3
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{path}: a span without pid, ts or dur: {e}") from None
        lanes = ranks.setdefault(rank, {"backward": [], "collectives": [], "steps": []})
        kind = e.get("cat")
        if kind == "backward":
            lanes["backward"].append((start, end))
        elif kind == "collective":
            lanes["collectives"].append((start, end, str(e.get("name", ""))))
        elif kind == "step":
            lanes["steps"].append((start, end, str(e.get("name", ""))))
    for lanes in ranks.values():
        for spans in lanes.values():
            spans.sort()
    if not ranks or not any(lanes["steps"] for lanes in ranks.values()):
        raise TraceError(f"{path}: no training step recorded (the run was shorter than the steps --trace skips?)")
    about = data.get("otherData", {}).get("about", "") if isinstance(data, dict) else ""
    return {"about": about or Path(path).name, "ranks": ranks}


def is_gradient(name):
    return "gradient" in name


def merged(spans):
    """The union of (start, end, ...) spans as sorted disjoint (start, end)."""
    out = []
    for s in sorted((s[0], s[1]) for s in spans):
        if out and s[0] <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], s[1]))
        else:
            out.append(s)
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def clip(intervals, start, end):
    return [(max(s, start), min(e, end)) for s, e in intervals if e > start and s < end]


def measure(trace):
    """Over every recorded step: the median of the slowest rank's step time, gradient all-reduces per
    step and their (union) time per step, and the share of it while backward still ran."""
    ranks = trace["ranks"]
    steps = min(len(lanes["steps"]) for lanes in ranks.values())
    per_step, counts, times, hidden = [], [], [], []
    for i in range(steps):
        per_step.append(max(lanes["steps"][i][1] - lanes["steps"][i][0] for lanes in ranks.values()))
        for lanes in ranks.values():
            start, end, _ = lanes["steps"][i]
            grads = [c for c in lanes["collectives"] if is_gradient(c[2]) and start <= c[0] < end]
            comm = merged(grads)
            backward = clip(merged(lanes["backward"]), start, end)
            backward_end = backward[-1][1] if backward else start
            counts.append(len(grads))
            times.append(length(comm))
            hidden.append(length(clip(comm, start, backward_end)))
    comm_total = sum(times)
    return {"steps": steps, "ranks": len(ranks), "step_ms": statistics.median(per_step),
            "allreduces": statistics.median(counts) if counts else 0,
            "allreduce_ms": statistics.median(times) if times else 0,
            "hidden": sum(hidden) / comm_total if comm_total > 0 else 0.0}


def window(trace, count):
    """(start, end) of `count` consecutive steps of rank 0 (the first run of them that holds no
    step longer than twice the median: an epoch's end evaluates the test set inside a step)."""
    steps = trace["ranks"][min(trace["ranks"])]["steps"]
    typical = statistics.median(e - s for s, e, _ in steps)
    count = max(1, min(count, len(steps)))
    for i in range(len(steps) - count + 1):
        if all(e - s <= 2 * typical for s, e, _ in steps[i:i + count]):
            return steps[i][0], steps[i + count - 1][1]
    return steps[0][0], steps[count - 1][1]


def short_label(trace):
    return trace["about"].split(":")[0]


def plot(paths, out, count):
    traces = [read_trace(p) for p in paths]
    stats = [measure(t) for t in traces]

    import matplotlib
    matplotlib.use("Agg")  # no display on a cluster
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    backward_colour, gradient_colour, other_colour = "#1f77b4", "#ff7f0e", "#9a9a9a"
    windows = [window(t, count) for t in traces]
    span = max(e - s for s, e in windows)
    rows = [2 * len(t["ranks"]) for t in traces]
    fig, axes = plt.subplots(len(traces), 1, figsize=(13, 1.2 + 0.55 * sum(rows) + 0.9 * len(traces)),
                             gridspec_kw={"height_ratios": rows}, squeeze=False)
    for ax, trace, stat, (w0, w1) in zip(axes[:, 0], traces, stats, windows):
        labels = []
        y = 0
        for rank in sorted(trace["ranks"], reverse=True):  # rank 0 on top
            lanes = trace["ranks"][rank]
            comm = [(s - w0, e - s, name) for s, e, name in lanes["collectives"] if e > w0 and s < w1]
            # Collectives in flight together: each its own thin row inside the lane.
            ends, rows_of = [], []
            for s, d, _ in comm:
                k = next((k for k, end in enumerate(ends) if end <= s), len(ends))
                if k < len(ends):
                    ends[k] = s + d
                else:
                    ends.append(s + d)
                rows_of.append(k)
            depth = max(1, len(ends))
            for (s, d, name), k in zip(comm, rows_of):
                ax.broken_barh([(s, max(d, span * 0.0008))], (y + 0.1 + 0.8 * k / depth, 0.8 / depth),
                               color=gradient_colour if is_gradient(name) else other_colour)
            labels.append((y + 0.5, f"rank {rank} all-reduce"))
            y += 1
            back = [(s - w0, e - s) for s, e in merged(lanes["backward"]) if e > w0 and s < w1]
            ax.broken_barh([(s, max(d, span * 0.0008)) for s, d in back], (y + 0.1, 0.8), color=backward_colour)
            labels.append((y + 0.5, f"rank {rank} backward"))
            y += 1
        for s, e, _ in trace["ranks"][min(trace["ranks"])]["steps"]:
            if w0 <= s <= w1:
                ax.axvline(s - w0, color="black", linestyle=":", linewidth=1)
        ax.set_yticks([p for p, _ in labels], [t for _, t in labels])
        ax.set_ylim(0, y)
        ax.set_xlim(0, span)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{short_label(trace)}: median step {stat['step_ms']:.1f} ms; "
                     f"{stat['allreduces']:g} gradient all-reduce(s) per step, {stat['allreduce_ms']:.1f} ms, "
                     f"{100 * stat['hidden']:.0f} % of it while backward still runs", fontsize="medium")
    axes[-1, 0].set_xlabel(f"ms from the start of the window ({count} steps; dotted: a step starts)")
    axes[0, 0].legend(handles=[Patch(color=backward_colour, label="backward (autograd nodes)"),
                               Patch(color=gradient_colour, label="gradient all-reduce (launch to done)"),
                               Patch(color=other_colour, label="other collective")],
                      loc="upper right", fontsize="small", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot: wrote {out}")
    for trace, stat in zip(traces, stats):
        print(f"plot: {short_label(trace)}: {stat['ranks']} ranks, {stat['steps']} steps: median step "
              f"{stat['step_ms']:.2f} ms, {stat['allreduces']:g} gradient all-reduce(s) per step taking "
              f"{stat['allreduce_ms']:.2f} ms, {100 * stat['hidden']:.0f} % of it while backward runs")
    if len(traces) == 2:
        ratio = stats[0]["step_ms"] / stats[1]["step_ms"]
        print(f"plot: median step time {short_label(traces[0])} / {short_label(traces[1])} = {ratio:.3f}")
    return stats
