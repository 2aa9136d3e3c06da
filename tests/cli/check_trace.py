"""Checks a `nobubble train --trace` file (used by test_pipeline_trace.sh).

usage: check_trace.py TRACE.json STAGES MICROBATCHES OPTIMIZER_STEPS [MOE_LAYERS]

MOE_LAYERS, for an MoE model: each stage's MoE blocks, stages separated by '|' and blocks by ',' ("1|2", "|3,4"
for none on stage 0). Without it the run must have no MoE events.

Exit 0 and one line per check passed; exit 1 with the first failure. Checks:
  - the file is valid JSON with a traceEvents list (json.load);
  - one track per stage: process_name metadata "stage 0".."stage P-1", and every complete event on one of them;
  - every microbatch's F and B exactly once on every stage, and OPTIMIZER_STEPS optimizer steps per stage;
  - with more than one stage, waits, sends and receives on every stage;
  - the events of one stage never overlap in time (they follow one another on its one thread), the MoE dispatch
    spans (cat "moe") apart: each lies inside the F or B of its microbatch on its stage, every F and B holds one
    per MoE block of the stage (forward in block order, backward in reverse) and nothing else has any, named
    "moe L<block> F<i>" / "B<i>" with args layer, microbatch, load_max_over_mean (>= 1) and idle_fraction (0..1);
  - a split backward (zb-h1): where a stage has W events ("W<i>", category "weight"), every microbatch's W once,
    after its B, and F, B, W and the optimizer step each in a colour ("cname") of its own;
  - the stages share a clock: stage s+1 starts forward i only after stage s has finished forward i, and stage s
    starts backward i only after stage s+1 has finished it (within 2 ms, the origins' agreement).
"""
import json
import sys

TOLERANCE_US = 1e-3  # times are printed to the nanosecond
CLOCK_US = 2000.0


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def parse_moe_layers(arg, stages):
    per_stage = [[int(b) for b in part.split(",") if b] for part in arg.split("|")] if arg else [[]] * stages
    if len(per_stage) != stages:
        fail(f"MOE_LAYERS '{arg}' names {len(per_stage)} stages, want {stages}")
    return per_stage


def check_moe(by_stage, moe_by_stage, moe_layers, microbatches):
    """The MoE dispatch spans: inside their F or B, one per MoE block of the stage, in order."""
    spans = 0
    for s, evs in by_stage.items():
        enclosing = {e["name"]: e for e in evs}
        got = {}  # (kind, microbatch) -> the blocks in time order
        for m in moe_by_stage[s]:
            a = m["args"]
            kind = m["name"].split()[-1][0]
            if m["name"] != f"moe L{a['layer']} {kind}{a['microbatch']}" or kind not in "FB":
                fail(f"stage {s}: MoE span {m['name']} with args {a}")
            outer = enclosing.get(f"{kind}{a['microbatch']}")
            if outer is None or m["ts"] < outer["ts"] - TOLERANCE_US or \
                    m["ts"] + m["dur"] > outer["ts"] + outer["dur"] + TOLERANCE_US:
                fail(f"stage {s}: {m['name']} [{m['ts']}, +{m['dur']}] is not inside its {kind}{a['microbatch']}")
            if not (a["load_max_over_mean"] >= 1.0 and 0.0 <= a["idle_fraction"] < 1.0):
                fail(f"stage {s}: {m['name']} has load {a}")
            got.setdefault((kind, a["microbatch"]), []).append(a["layer"])
        for i in range(microbatches):
            for kind, want in (("F", moe_layers[s]), ("B", moe_layers[s][::-1])):
                if got.get((kind, i), []) != want:
                    fail(f"stage {s}: {kind}{i} holds MoE spans of blocks {got.get((kind, i), [])}, want {want}")
        spans += len(moe_by_stage[s])
    return spans


def check_weight_halves(by_stage, microbatches):
    """zb-h1's W actions: one per microbatch after its B, in their own colour. Returns the stages that have them."""
    split = 0
    for s, evs in by_stage.items():
        named = {e["name"]: e for e in evs}
        ws = [e for e in evs if e["cat"] == "weight"]
        if not ws:
            continue
        split += 1
        for i in range(microbatches):
            w, b = named.get(f"W{i}"), named.get(f"B{i}")
            if w is None or [e["name"] for e in ws].count(f"W{i}") != 1:
                fail(f"stage {s}: W{i} appears {[e['name'] for e in ws].count(f'W{i}')} times")
            if w["ts"] < b["ts"] + b["dur"] - TOLERANCE_US:
                fail(f"stage {s}: W{i} at {w['ts']} before its B{i} ends")
        colours = {cat: {e.get("cname") for e in evs if e["cat"] == cat} for cat in ("forward", "backward", "weight", "optimizer")}
        if any(len(c) != 1 or None in c for c in colours.values()) or len(set.union(*colours.values())) != 4:
            fail(f"stage {s}: colours {colours}, want one of its own for each")
    return split


def main():
    path, stages, microbatches, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    moe_layers = parse_moe_layers(sys.argv[5] if len(sys.argv) > 5 else "", stages)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path} is not valid JSON: {e}")
    events = data.get("traceEvents")
    if not isinstance(events, list):
        fail("no traceEvents list")
    print(f"ok: valid JSON, {len(events)} events")

    tracks = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    if tracks != {s: f"stage {s}" for s in range(stages)}:
        fail(f"tracks {tracks}, want one per stage 0..{stages - 1}")
    complete = [e for e in events if e.get("ph") == "X"]
    by_stage = {s: sorted((e for e in complete if e["pid"] == s and e["cat"] != "moe"), key=lambda e: e["ts"])
                for s in range(stages)}
    moe_by_stage = {s: sorted((e for e in complete if e["pid"] == s and e["cat"] == "moe"), key=lambda e: e["ts"])
                    for s in range(stages)}
    if sum(len(v) + len(moe_by_stage[s]) for s, v in by_stage.items()) != len(complete):
        fail("complete events outside the stages' tracks")
    print(f"ok: one track per stage ({stages})")

    for s, evs in by_stage.items():
        names = [e["name"] for e in evs]
        for i in range(microbatches):
            for kind in "FB":
                if names.count(f"{kind}{i}") != 1:
                    fail(f"stage {s}: {kind}{i} appears {names.count(f'{kind}{i}')} times")
        n_steps = sum(1 for e in evs if e["name"].startswith("step "))
        if n_steps != steps:
            fail(f"stage {s}: {n_steps} optimizer steps, want {steps}")
        cats = {e["cat"] for e in evs}
        want = {"forward", "backward", "optimizer"}
        if stages > 1:  # a stage with a neighbour sends to it, receives from it and waits for it
            want |= {"send", "recv", "wait"}
        if not want <= cats:
            fail(f"stage {s}: categories {sorted(cats)} lack {sorted(want - cats)}")
    print(f"ok: F and B of all {microbatches} microbatches and {steps} steps on every stage, with waits, sends, receives")
    split = check_weight_halves(by_stage, microbatches)
    if split:
        print(f"ok: W of every microbatch after its B, in its own colour, on {split} stage(s)")

    for s, evs in by_stage.items():
        for a, b in zip(evs, evs[1:]):
            if b["ts"] < a["ts"] + a["dur"] - TOLERANCE_US:
                fail(f"stage {s}: {a['name']} [{a['ts']}, +{a['dur']}] overlaps {b['name']} at {b['ts']}")
    print("ok: no two events of one stage overlap")

    spans = check_moe(by_stage, moe_by_stage, moe_layers, microbatches)
    if any(moe_layers):
        print(f"ok: {spans} MoE dispatch spans, one per MoE block inside every F and B, with layer and load")

    def find(s, name):
        return next(e for e in by_stage[s] if e["name"] == name)

    for s in range(stages - 1):
        for i in range(microbatches):
            f_here, f_next = find(s, f"F{i}"), find(s + 1, f"F{i}")
            if f_next["ts"] < f_here["ts"] + f_here["dur"] - CLOCK_US:
                fail(f"stage {s + 1} starts F{i} at {f_next['ts']} before stage {s} ends it")
            b_here, b_next = find(s, f"B{i}"), find(s + 1, f"B{i}")
            if b_here["ts"] < b_next["ts"] + b_next["dur"] - CLOCK_US:
                fail(f"stage {s} starts B{i} at {b_here['ts']} before stage {s + 1} ends it")
    print("ok: forwards flow down and backwards up the stages on one clock")


if __name__ == "__main__":
    main()
