"""The delay sweep's per-preset views (summarize_delay_sweep.py --view): what the mitigations, momentum and
depth presets add to the table of final losses.

Every view works from the same finals {(variant, setting, seed): final validation loss or None} and measures a
setting's gap per seed (its loss minus sync's with the same seed), so the spread over seeds is that of the gap
itself, not of the two losses apart. Each returns markdown lines; momentum and depth also draw their plot (the
gap against the coefficient, against the depth), which replaces the loss curves as the preset's .png.
"""
import re


def gaps_by_seed(finals, seeds, variant, setting):
    """{seed: gap of setting to sync}, over the seeds where both finished."""
    gaps = {}
    for s in seeds:
        x, base = finals.get((variant, setting, s)), finals.get((variant, "sync", s))
        if x is not None and base is not None:
            gaps[s] = x - base
    return gaps


def seed_gaps(finals, seeds, variant, setting):
    """[gap per seed] of setting to sync, over the seeds where both finished."""
    return list(gaps_by_seed(finals, seeds, variant, setting).values())


def mean(xs):
    return sum(xs) / len(xs)


def half_range(xs):
    return (max(xs) - min(xs)) / 2


def gap_cell(gaps):
    return f"{mean(gaps):+.4f} ± {half_range(gaps):.4f}" if gaps else "missing"


def mitigations(finals, seeds, variants, settings, labels):
    """Per optimizer and mitigation: the gap to sync and the share of 2bw's gap it closes (1 - gap / 2bw's gap),
    the share from the mean gaps and, in brackets, its range over the seeds' own shares."""
    lines = ["", "## Each mitigation against 2bw's gap", "",
             "Gap: the setting's loss minus sync's, per seed, mean ± half the range over seeds. Share closed: "
             "1 - gap / 2bw's gap (100%: as good as sync; negative: worse than plain 2bw), from the mean gaps, "
             "in brackets the lowest and highest of the seeds' own shares.", "",
             "| optimizer | setting | gap to sync | share of 2bw's gap closed |", "|---|---|---:|---:|"]
    for v in variants:
        plain = gaps_by_seed(finals, seeds, v, "2bw")
        for setting in settings:
            if setting == "sync":
                continue
            by_seed = gaps_by_seed(finals, seeds, v, setting)
            gaps = list(by_seed.values())
            share = "n/a"
            if setting != "2bw" and gaps and plain and mean(list(plain.values())) != 0:
                per_seed = [1 - g / plain[s] for s, g in by_seed.items() if plain.get(s)]
                share = f"{100 * (1 - mean(gaps) / mean(list(plain.values()))):.0f}%"
                if per_seed:
                    share += f" [{100 * min(per_seed):.0f}% .. {100 * max(per_seed):.0f}%]"
            lines.append(f"| {v} | {labels.get(setting, setting)} | {gap_cell(gaps)} | {share} |")
    return lines


def save_gap_plot(fig, ax, xlabel, ylabel, title, png):
    """Labels, grid and legend of a gap plot (its bars the half range over seeds), written to png."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"{title}\n(bars: half range over seeds)", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_variant(variant):
    """('adamw', 'beta1', 0.8) from adamw_b0.8, ('muon', 'momentum', 0.95) from muon_m0.95."""
    m = re.fullmatch(r"([a-z]+)_([bm])([0-9.]+)", variant)
    if not m:
        raise SystemExit(f"nobubble: error: momentum view: variant '{variant}' is not <optimizer>_b|m<value>")
    return m.group(1), {"b": "beta1", "m": "momentum"}[m.group(2)], float(m.group(3))


def momentum(finals, seeds, variants, chosen, plt, png):
    """The sync-vs-2bw gap per optimizer and coefficient, a table and a plot of gap against the coefficient."""
    lines = ["", "## The 2bw gap against the momentum coefficient", "",
             "AdamW's --beta1, Muon's --momentum (its auxiliary AdamW keeps beta1 0.9); the lr re-tuned on sync "
             "at each coefficient. Gap: 2bw's loss minus sync's per seed, mean ± half the range over seeds.", "",
             "| optimizer | coefficient | lr | sync | gap of 2bw | gap / sync |", "|---|---|---:|---:|---:|---:|"]
    series = {}
    for v in variants:
        opt, name, value = parse_variant(v)
        gaps = seed_gaps(finals, seeds, v, "2bw")
        syncs = [finals[v, "sync", s] for s in seeds if finals.get((v, "sync", s)) is not None]
        sync = f"{mean(syncs):.4f}" if syncs else "missing"
        ratio = f"{100 * mean(gaps) / mean(syncs):.1f}%" if gaps and syncs else "n/a"
        lines.append(f"| {opt} | {name} {value:g} | {chosen.get(v, '?')} | {sync} | {gap_cell(gaps)} | {ratio} |")
        if gaps:
            series.setdefault(f"{opt} ({name})", []).append((value, mean(gaps), half_range(gaps)))
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in series.items():
        xs, ys, es = zip(*sorted(points))
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    save_gap_plot(fig, ax, "momentum coefficient (AdamW beta1, Muon momentum)", "2bw loss - sync loss (nats/byte)",
                  "One-step delay penalty against momentum", png)
    return lines


def depth_of(setting):
    """('2bw', 4) from 2bw4, ('2bw', 2) from 2bw, ('pipedream', 8) from pd8; None for sync."""
    if setting == "2bw":
        return "2bw", 2
    m = re.fullmatch(r"(2bw|pd)([0-9]+)", setting)
    return ({"2bw": "2bw", "pd": "pipedream"}[m.group(1)], int(m.group(2))) if m else None


def depth(finals, seeds, variants, settings, plt, png):
    """The gap to sync of 2bw and pipedream at each depth P, a table and a plot of gap against P."""
    depths = sorted({depth_of(s)[1] for s in settings if depth_of(s)})
    lines = ["", "## The gap against pipeline depth", "",
             "2bw: every stage one step stale at any P; pipedream: stage s lags P - 1 - s steps. Gap: the loss "
             "minus sync's per seed, mean ± half the range over seeds.", "",
             "| optimizer | P | gap of 2bw | gap of pipedream |", "|---|---:|---:|---:|"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in variants:
        by = {}
        for setting in settings:
            kind_p = depth_of(setting)
            if kind_p:
                by[kind_p] = seed_gaps(finals, seeds, v, setting)
        for p in depths:
            lines.append(f"| {v} | {p} | {gap_cell(by.get(('2bw', p), []))} | "
                         f"{gap_cell(by.get(('pipedream', p), []))} |")
        for kind, style in (("2bw", "-o"), ("pipedream", "--s")):
            points = [(p, mean(by[kind, p]), half_range(by[kind, p])) for p in depths if by.get((kind, p))]
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(xs, ys, yerr=es, fmt=style, capsize=3, label=f"{v} {kind}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(p) for p in depths])
    save_gap_plot(fig, ax, "pipeline stages P", "loss - sync loss (nats/byte)", "Delay penalty against depth", png)
    return lines
