"""The delay sweep's table and plot (run/experiments/delay_sweep.sh calls this; it can be rerun on its own).

Reads every run's --metrics JSONL from --work (NAME.jsonl, NAME = <optimizer>_<setting>_s<seed>, and the
learning-rate tuning runs lr_<optimizer>_<lr>) and writes to --out:
  delay_sweep_<preset>.md    the table: final validation loss per optimizer and setting (mean over seeds, with
                             the half-range over seeds), the gap of each setting to sync, and the lr tuning
  delay_sweep_<preset>.csv   one row per run: optimizer, setting, seed, lr, final validation loss
  delay_sweep_<preset>.png   validation loss against step, one panel per optimizer, one line per setting
--view mitigations|momentum|depth adds that preset's section (delay_sweep_views.py); momentum's and depth's
plot is then the gap against the coefficient or the depth instead of the curves. Where the preset tuned
--delay-fix taylor's lambda, predict's lambda or lookahead's gamma (<rule>_<optimizer>_<value> runs,
chosen_<rule>.txt: --tuned) the tuning is listed too.
A run that failed (diverged) counts as missing and is listed as such.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import delay_sweep_views as views  # noqa: E402

SETTING_LABELS = {
    "sync": "sync (1f1b)",
    "2bw": "2bw (1-step delay)",
    "2bw_ef": "2bw + EF",
    "pd2": "pipedream P=2",
    "pd4": "pipedream P=4",
    "pd8": "pipedream P=8",
    "2bw4": "2bw P=4",
    "2bw8": "2bw P=8",
    "2bw_taylor": "2bw + Taylor",
    "2bw_ss": "2bw + sync start",
    "2bw_sc": "2bw + sync cool-down",
    "2bw_ef_sc": "2bw + EF + sync cool-down",
    "2bw_predict": "2bw + predict",
    "2bw_lookahead": "2bw + lookahead",
    "2bw_ef_predict": "2bw + EF + predict",
}
# The tuned mitigations' coefficients: the section heading's words per rule (delay_sweep.sh's TUNED_FLAG).
TUNED_NAMES = {"taylor": ("Taylor's lambda", "2bw + Taylor"), "predict": ("predict's lambda", "2bw + predict"),
               "lookahead": ("lookahead's gamma", "2bw + lookahead")}


def read_curve(path):
    """[(step, val_loss)] of one run, or None when the run did not finish."""
    if not os.path.exists(path):
        return None
    points = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "val_loss" in record:
                points.append((record["step"], record["val_loss"]))
    log = path[: -len(".jsonl")] + ".log"
    finished = os.path.exists(log) and any(l.startswith("final weights sha256") for l in open(log))
    return points if finished and points else None


def read_chosen(path):
    """{variant: value} from lines 'variant value' (empty when the file is missing or empty)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return dict(line.split() for line in f if line.strip())


def mean(xs):
    return sum(xs) / len(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--optimizers", nargs="+", required=True)
    ap.add_argument("--settings", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--lrs", default="", help="opt=lr1,lr2,... per optimizer: the lr tuning grid")
    ap.add_argument("--config", default="")
    ap.add_argument("--minutes", default="?")
    ap.add_argument("--view", default="curves", choices=["curves", "mitigations", "momentum", "depth"])
    ap.add_argument("--tuned", nargs="*", default=[], help="rule=v1,v2,...: each tuned mitigation's grid")
    args = ap.parse_args()

    chosen = read_chosen(os.path.join(args.work, "chosen_lr.txt"))
    grid = dict(item.split("=") for item in args.lrs.split())

    curves, finals, rows = {}, {}, []
    for opt in args.optimizers:
        for setting in args.settings:
            for seed in args.seeds:
                curve = read_curve(os.path.join(args.work, f"{opt}_{setting}_s{seed}.jsonl"))
                curves[opt, setting, seed] = curve
                final = curve[-1][1] if curve else None
                finals[opt, setting, seed] = final
                rows.append((opt, setting, seed, chosen.get(opt, "?"), "" if final is None else f"{final:.4f}"))

    base = os.path.join(args.out, f"delay_sweep_{args.preset}")
    with open(base + ".csv", "w") as f:
        f.write("optimizer,setting,seed,lr,final_val_loss\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")

    def summary(opt, setting):
        vals = [finals[opt, setting, s] for s in args.seeds if finals[opt, setting, s] is not None]
        if not vals:
            return None, None, 0
        return mean(vals), (max(vals) - min(vals)) / 2, len(vals)

    lines = [
        f"# Delay sweep ({args.preset})",
        "",
        f"Model and data: {args.config}; fortunes corpus (bytes), final validation loss in nats per byte.",
        f"Seeds: {' '.join(args.seeds)}. Each cell: mean over seeds ± half the range over seeds; "
        "the gap is the setting's mean minus sync's mean (positive: worse than sync).",
        f"Produced by `run/experiments/delay_sweep.sh --preset {args.preset}`: {args.minutes} minutes of wall time "
        "on the machine that ran it (runs resumed from an earlier call are not counted).",
        "",
        "| optimizer | lr | " + " | ".join(SETTING_LABELS.get(s, s) for s in args.settings) + " |",
        "|---|---:|" + "---:|" * len(args.settings),
    ]
    for opt in args.optimizers:
        sync_mean, _, _ = summary(opt, "sync")
        cells = []
        for setting in args.settings:
            m, spread, n = summary(opt, setting)
            if m is None:
                cells.append("diverged")
                continue
            cell = f"{m:.4f} ± {spread:.4f}"
            if n < len(args.seeds):
                cell += f" ({len(args.seeds) - n} diverged)"
            if setting != "sync" and sync_mean is not None:
                cell += f" ({m - sync_mean:+.4f})"
            cells.append(cell)
        lines.append(f"| {opt} | {chosen.get(opt, '?')} | " + " | ".join(cells) + " |")

    lines += ["", "## Learning-rate tuning (sync, seed 1)", "", "| optimizer | lr | final val loss |", "|---|---:|---:|"]
    for opt in args.optimizers:
        for lr in grid.get(opt, chosen.get(opt, "")).split(","):
            curve = read_curve(os.path.join(args.work, f"lr_{opt}_{lr}.jsonl"))
            value = f"{curve[-1][1]:.4f}" if curve else "diverged"
            mark = " (chosen)" if lr == chosen.get(opt) else ""
            lines.append(f"| {opt} | {lr}{mark} | {value} |")
    for item in args.tuned:
        rule, values = item.split("=")
        chosen_value = read_chosen(os.path.join(args.work, f"chosen_{rule}.txt"))
        title, setting = TUNED_NAMES[rule]
        coefficient = title.split()[-1]
        lines += ["", f"## {title[0].upper() + title[1:]} ({setting} at the chosen lr, seed 1)", "",
                  f"| optimizer | {coefficient} | final val loss |", "|---|---:|---:|"]
        for opt in args.optimizers:
            for v in values.split(","):
                curve = read_curve(os.path.join(args.work, f"{rule}_{opt}_{v}.jsonl"))
                value = f"{curve[-1][1]:.4f}" if curve else "diverged"
                mark = " (chosen)" if v == chosen_value.get(opt) else ""
                lines.append(f"| {opt} | {v}{mark} | {value} |")
    if args.view == "mitigations":
        lines += views.mitigations(finals, args.seeds, args.optimizers, args.settings, SETTING_LABELS)
    elif args.view == "momentum":
        lines += views.momentum(finals, args.seeds, args.optimizers, chosen, plt, base + ".png")
    elif args.view == "depth":
        lines += views.depth(finals, args.seeds, args.optimizers, args.settings, plt, base + ".png")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.view in ("momentum", "depth"):
        print(f"wrote {base}.md, {base}.csv, {base}.png")
        return

    cols = min(3, len(args.optimizers))
    nrows = (len(args.optimizers) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False, sharey=True)
    for k, opt in enumerate(args.optimizers):
        ax = axes[k // cols][k % cols]
        for setting in args.settings:
            runs = [curves[opt, setting, s] for s in args.seeds if curves[opt, setting, s]]
            if not runs:
                continue
            n = min(len(r) for r in runs)
            steps = [runs[0][i][0] for i in range(n)]
            values = [mean([r[i][1] for r in runs]) for i in range(n)]
            ax.plot(steps, values, label=SETTING_LABELS.get(setting, setting))
        ax.set_title(f"{opt} (lr {chosen.get(opt, '?')})")
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        if k % cols == 0:
            ax.set_ylabel("validation loss (nats/byte)")
    for k in range(len(args.optimizers), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Delay sweep ({args.preset}): mean over seeds {' '.join(args.seeds)}")
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=110)
    print(f"wrote {base}.md, {base}.csv, {base}.png")


if __name__ == "__main__":
    main()
