#!/usr/bin/python3
"""The comparison report of a run directory that run/compare.sh (or run/slurm/compare.sbatch) wrote.

Usage: run/report.py RUN_DIR

Reads RUN_DIR/grid.csv (one row per grid point, see run/compare.sh) and the metrics and traces of its train
points, and writes under RUN_DIR/report/:
  tokens_per_s.png  tokens/s per schedule (bench points by P and m; train points when there are no bench points)
  bubble.png        measured bubble per schedule against the analytic (P-1)/(m+P-1) and nobubble schedule's
                    simulation (forward 1, backward 2)
  val_loss.png      validation loss against tokens trained, per schedule and optimizer (train points)
  val_loss_time.png validation loss against wall-clock seconds (each metrics record's elapsed_s)
  stage_busy.png    per stage, the share of the run spent computing (forward, backward, optimizer), in
                    transfers, waiting for a peer, evaluating, and otherwise idle (from each train point's trace)
  table.md          the table (also printed), with the 2bw / 1f1b tokens/s ratio of each pair, and the time to a
                    target loss: per train point, the seconds it took to first reach the final validation loss of
                    the synchronous run of its optimizer (or "not reached")
  index.html        one self-contained page: the tables and the five charts inline
The last line printed is the page's path.
"""
import base64
import csv
import io
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHEDULE_ORDER = ["gpipe", "1f1b", "zb-h1", "zb-v", "2bw", "pipedream"]
# Trace categories, in the order the busy bar stacks them (moe spans sit inside forward/backward: not counted).
BUSY_PARTS = [("compute", ("forward", "backward", "weight", "optimizer"), "tab:blue"),
              ("transfer", ("send", "recv"), "tab:orange"),
              ("wait", ("wait",), "tab:red"),
              ("eval", ("eval",), "tab:gray")]


def die(message):
    print(f"nobubble: error: report.py: {message}", file=sys.stderr)
    sys.exit(2)


def number(text):
    return float(text) if text not in ("", None) else None


def read_grid(run_dir):
    path = os.path.join(run_dir, "grid.csv")
    if not os.path.exists(path):
        die(f"{path} is missing (run run/compare.sh first)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("tokens_per_s", "ms_per_iter", "bubble_pct", "bubble_analytic_pct", "bubble_simulated_pct",
                    "peak_act_mib", "tokens_per_step", "final_val_loss"):
            r[key] = number(r.get(key))
        r["stages"] = int(r["stages"])
        r["replicas"] = int(r.get("replicas") or 1)  # grids from before the D axis have none
        r["replica_wait_pct"] = number(r.get("replica_wait_pct"))
        r["microbatches"] = int(r["microbatches"])
    return rows


def label(r):
    """What a train point is called in the charts: schedule, optimizer, mitigation."""
    text = f'{r["schedule"]} {r["optimizer"]}'
    return text + (f' + {r["delay_fix"]}' if r["delay_fix"] not in ("", "none") else "")


def shape(r):
    """A point's pipeline: "P=2 m=4", with D pipeline replicas "P=2 D=2 m=4"."""
    replicas = f' D={r["replicas"]}' if r["replicas"] > 1 else ""
    return f'P={r["stages"]}{replicas} m={r["microbatches"]}'


def schedule_rank(name):
    return SCHEDULE_ORDER.index(name) if name in SCHEDULE_ORDER else len(SCHEDULE_ORDER)


def throughput_groups(rows):
    """(title of a group, [(bar label, row)]) for the bench points by (P, m), or the train points in one group."""
    bench = [r for r in rows if r["kind"] == "bench" and r["status"] == "ok"]
    if bench:
        groups = defaultdict(list)
        for r in bench:
            groups[(r["stages"], r["replicas"], r["microbatches"])].append(r)
        return [(shape(g[0]), [(r["schedule"], r) for r in sorted(g, key=lambda r: schedule_rank(r["schedule"]))])
                for _, g in sorted(groups.items())]
    train = [r for r in rows if r["kind"] == "train" and r["status"] == "ok"]
    if not train:
        return []
    r0 = train[0]
    return [(f'train {shape(r0)}', [(label(r), r) for r in train])]


def bars(ax, groups, value, colors=None):
    """Grouped bars: one group per (P, m), one bar per schedule; returns each bar's x and row."""
    names = []
    for _, members in groups:
        for name, _ in members:
            if name not in names:
                names.append(name)
    width = 0.8 / max(len(names), 1)
    placed = []
    for i, name in enumerate(names):
        xs, ys = [], []
        for g, (_, members) in enumerate(groups):
            for member_name, r in members:
                if member_name == name and value(r) is not None:
                    x = g + (i - (len(names) - 1) / 2) * width
                    xs.append(x)
                    ys.append(value(r))
                    placed.append((x, width, r))
        ax.bar(xs, ys, width * 0.95, label=name, color=(colors or {}).get(name))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([title for title, _ in groups])
    return placed


def finish_chart(fig, ax, path, ylabel, title, xlabel=None, grid_axis="y"):
    """Labels, legend and grid of a one-axis chart, written to path."""
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis=grid_axis, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def chart_tokens(rows, path):
    groups = throughput_groups(rows)
    if not groups:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    bars(ax, groups, lambda r: r["tokens_per_s"])
    return finish_chart(fig, ax, path, "tokens/s", "Throughput per schedule")


def chart_bubble(rows, path):
    groups = throughput_groups(rows)
    if not groups:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    placed = bars(ax, groups, lambda r: r["bubble_pct"])
    analytic = "analytic: (P-1)/(m+P-1); zb-h1 (P-1)/(3m+P-1); zb-v (P-1)/(6m+P-1)"
    for marker, key, text in (("_", "bubble_analytic_pct", analytic),
                              ("x", "bubble_simulated_pct", "nobubble schedule (simulated)")):
        xs = [x for x, _, r in placed if r[key] is not None]
        ys = [r[key] for _, _, r in placed if r[key] is not None]
        ax.scatter(xs, ys, marker=marker, s=260 if marker == "_" else 50, color="black", zorder=3, label=text,
                   linewidths=2)
    return finish_chart(fig, ax, path, "bubble (% of stage time idle)",
                        "Measured bubble against the analytic and simulated bubble")


def read_metrics(run_dir, r):
    path = os.path.join(run_dir, r["metrics"])
    if not r["metrics"] or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def val_curve(run_dir, r, x_key, metrics=None):
    """(x, val_loss) of a train point's evaluated iterations; x: tokens trained or elapsed seconds. `metrics`: the
    point's records when the caller has read them already."""
    points = []
    for m in read_metrics(run_dir, r) if metrics is None else metrics:
        if "val_loss" not in m:
            continue
        if x_key == "tokens":
            points.append((m["step"] * r["tokens_per_step"], m["val_loss"]))
        elif "elapsed_s" in m:  # metrics of runs from before the clock was kept have none
            points.append((m["elapsed_s"], m["val_loss"]))
    return points


def chart_val(run_dir, rows, path, x_key, xlabel, title):
    """Validation loss of every train point that ran, against x_key ("tokens" or "seconds"); False: none."""
    train = [r for r in rows if r["kind"] == "train" and r["status"] == "ok"]
    curves = [(label(r), val_curve(run_dir, r, x_key)) for r in train]
    curves = [(name, points) for name, points in curves if points]
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, points in curves:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=name)
    return finish_chart(fig, ax, path, "validation loss (nats per token)", title, xlabel=xlabel, grid_axis="both")


def chart_val_loss(run_dir, rows, path):
    return chart_val(run_dir, rows, path, "tokens", "tokens trained",
                     "Validation loss per schedule and optimizer (same model, data and seed)")


def chart_val_loss_time(run_dir, rows, path):
    return chart_val(run_dir, rows, path, "seconds", "seconds since the run began",
                     "Validation loss against wall-clock time (same model, data and seed)")


SYNCHRONOUS = ("gpipe", "1f1b", "zb-h1", "zb-v")


def first_time_at(curve, loss):
    """The first elapsed second of (seconds, val_loss) points whose loss is <= `loss`; None if none is."""
    return next((t for t, value in curve if value <= loss), None)


def seconds_text(seconds):
    return "%.2f" % seconds if seconds is not None else "not reached"


def time_to_target(run_dir, rows):
    """Markdown: per train point, the seconds until its validation loss first reached the target, the final
    validation loss of the synchronous run (first in the grid) with the same optimizer and shape; and its own
    final loss's time beside the seconds the synchronous run needed to reach that loss."""
    train = [r for r in rows if r["kind"] == "train" and r["status"] == "ok"]
    lines = []
    for r in train:
        sync = next((s for s in train if s["schedule"] in SYNCHRONOUS and s["optimizer"] == r["optimizer"]
                     and shape(s) == shape(r) and s["final_val_loss"] is not None), None)
        if sync is None:
            continue
        # Its last evaluation in full precision (the CSV's final_val_loss is rounded to 4 digits).
        sync_metrics = read_metrics(run_dir, sync)
        sync_curve = val_curve(run_dir, sync, "tokens", sync_metrics)
        target = sync_curve[-1][1] if sync_curve else sync["final_val_loss"]
        curve = val_curve(run_dir, r, "seconds")
        reached = first_time_at(curve, target)
        # The other way round: when the synchronous run got down to this run's final loss, against this run's
        # own time (which of the two got there sooner).
        final = curve[-1] if curve else None
        sync_at_final = first_time_at(val_curve(run_dir, sync, "seconds", sync_metrics), final[1]) if final else None
        if not lines:
            lines = ["| point | target (sync final val loss) | seconds to reach it | final val loss | its seconds |"
                     " sync's seconds to that loss |",
                     "|---|---:|---:|---:|---:|---:|"]
        lines.append(f'| {label(r)} {shape(r)} | {target:.4f} ({sync["schedule"]}) | {seconds_text(reached)} | '
                     f'{fmt(r["final_val_loss"], "%.4f")} | {seconds_text(final[0] if final else None)} | '
                     f'{seconds_text(sync_at_final)} |')
    return "\n".join(lines)


def stage_shares(trace_path):
    """Per stage: {part: share of the stage's span} and the remaining idle share, from a --trace file."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    stages = sorted({e["pid"] for e in events})
    shares = []
    for s in stages:
        mine = [e for e in events if e["pid"] == s]
        span = max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)
        total = defaultdict(float)
        for e in mine:
            total[e.get("cat", "")] += e["dur"]
        part = {name: sum(total[c] for c in cats) / span for name, cats, _ in BUSY_PARTS}
        part["idle"] = max(0.0, 1.0 - sum(part.values()))
        shares.append(part)
    return shares


def chart_stage_busy(run_dir, rows, path):
    runs = []
    for r in rows:
        trace = os.path.join(run_dir, r["trace"]) if r.get("trace") else ""
        if r["kind"] == "train" and r["status"] == "ok" and trace and os.path.exists(trace):
            runs.append((label(r), stage_shares(trace)))
    if not runs:
        return False
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 0.6 + 0.55 * sum(len(s) for _, s in runs) + 0.3 * len(runs)),
                             squeeze=False)
    for ax, (name, shares) in zip(axes[:, 0], runs):
        left = [0.0] * len(shares)
        ys = range(len(shares))
        for part, color in [(n, c) for n, _, c in BUSY_PARTS] + [("idle", "white")]:
            widths = [100 * s[part] for s in shares]
            ax.barh(ys, widths, left=left, color=color, edgecolor="black", linewidth=0.4, label=part)
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(list(ys))
        ax.set_yticklabels([f"stage {i}" for i in ys])
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_title(name, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("% of the run (from --trace)")
    axes[0, 0].legend(ncol=5, fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.15))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def fmt(value, pattern):
    return pattern % value if value is not None else ""


def table(rows):
    """The grid as Markdown, then the 2bw / 1f1b tokens/s ratio of each point pair that has both."""
    lines = ["| kind | point | status | tokens/s | ms/iter | bubble % | analytic % | simulated % | peak act MiB |"
             " final val loss | replica wait % |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        point = label(r) if r["kind"] == "train" else r["schedule"]
        point += " " + shape(r)
        status = r["status"] + (f': {r["reason"]}' if r["reason"] else "")
        lines.append(f'| {r["kind"]} | {point} | {status} | {fmt(r["tokens_per_s"], "%.0f")} | '
                     f'{fmt(r["ms_per_iter"], "%.1f")} | {fmt(r["bubble_pct"], "%.1f")} | '
                     f'{fmt(r["bubble_analytic_pct"], "%.1f")} | {fmt(r["bubble_simulated_pct"], "%.1f")} | '
                     f'{fmt(r["peak_act_mib"], "%.1f")} | {fmt(r["final_val_loss"], "%.4f")} | '
                     f'{fmt(r["replica_wait_pct"], "%.1f")} |')
    ratios = []
    ok = [r for r in rows if r["status"] == "ok"]
    for r in ok:
        if r["schedule"] != "2bw":
            continue
        for base in ok:
            if (base["schedule"] == "1f1b" and base["kind"] == r["kind"] and shape(base) == shape(r)
                    and base["optimizer"] == r["optimizer"]):
                ratios.append(f'2bw / 1f1b tokens/s, {r["kind"]} {label(r) if r["kind"] == "train" else shape(r)}: '
                              f'{r["tokens_per_s"] / base["tokens_per_s"]:.3f}'
                              f' (ideal (m+P-1)/m = {(r["microbatches"] + r["stages"] - 1) / r["microbatches"]:.3f})')
                break
    return "\n".join(lines), ratios


def inline_png(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def write_html(path, run_dir, table_md, ratios, target_md, charts):
    body = [f"<h1>nobubble comparison: {os.path.basename(os.path.abspath(run_dir))}</h1>",
            "<p>From <code>grid.csv</code> (run/compare.sh) and the metrics and traces of its train points. "
            "Bubble: the share of each stage's time it was not computing, averaged over stages.</p>",
            markdown_table_html(table_md)]
    body += [f"<p>{r}</p>" for r in ratios]
    if target_md:
        body += ["<h2>Time to the synchronous run's final validation loss</h2>",
                 "<p>Seconds since the run began (its metrics' elapsed_s, evaluation included) until the validation "
                 "loss first reached the final validation loss of the synchronous run of the same optimizer.</p>",
                 markdown_table_html(target_md)]
    for title, png in charts:
        body.append(f'<h2>{title}</h2><img alt="{title}" src="data:image/png;base64,{inline_png(png)}">')
    with open(path, "w") as f:
        f.write("<!doctype html><html><head><meta charset='utf-8'><title>nobubble comparison</title><style>"
                "body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
                "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
                "td:nth-child(n+4){text-align:right}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def markdown_table_html(table_md):
    lines = table_md.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = ["<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>"]
    for line in lines[2:]:
        out.append("<tr>" + "".join(f"<td>{c.strip()}</td>" for c in line.strip("|").split("|")) + "</tr>")
    return "\n".join(out + ["</table>"])


def main():
    if len(sys.argv) != 2:
        die("usage: run/report.py RUN_DIR")
    run_dir = sys.argv[1]
    rows = read_grid(run_dir)
    report = os.path.join(run_dir, "report")
    os.makedirs(report, exist_ok=True)
    charts = []
    for title, name, make in (("Tokens/s per schedule", "tokens_per_s.png", lambda p: chart_tokens(rows, p)),
                              ("Bubble: measured, analytic, simulated", "bubble.png", lambda p: chart_bubble(rows, p)),
                              ("Validation loss against tokens", "val_loss.png",
                               lambda p: chart_val_loss(run_dir, rows, p)),
                              ("Validation loss against wall-clock time", "val_loss_time.png",
                               lambda p: chart_val_loss_time(run_dir, rows, p)),
                              ("Per-stage busy and wait (trace)", "stage_busy.png",
                               lambda p: chart_stage_busy(run_dir, rows, p))):
        path = os.path.join(report, name)
        if make(path):
            charts.append((title, path))
    table_md, ratios = table(rows)
    target_md = time_to_target(run_dir, rows)
    with open(os.path.join(report, "table.md"), "w") as f:
        f.write(table_md + "\n\n" + "\n".join(f"- {r}" for r in ratios) + "\n")
        if target_md:
            f.write("\nTime to the synchronous run's final validation loss:\n\n" + target_md + "\n")
    index = os.path.join(report, "index.html")
    write_html(index, run_dir, table_md, ratios, target_md, charts)
    print(table_md)
    for r in ratios:
        print(r)
    if target_md:
        print(target_md)
    print("charts: " + " ".join(os.path.basename(p) for _, p in charts))
    print(f"report: {index}")


if __name__ == "__main__":
    main()
