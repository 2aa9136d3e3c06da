"""Checks a `nobubble train --trace` file (used by test_pipeline_trace.sh).

usage: check_trace.py TRACE.json STAGES MICROBATCHES OPTIMIZER_STEPS

Exit 0 and one line per check passed; exit 1 with the first failure. Checks:
  - the file is valid JSON with a traceEvents list (json.load);
  - one track per stage: process_name metadata "stage 0".."stage P-1", and every complete event on one of them;
  - every microbatch's F and B exactly once on every stage, and OPTIMIZER_STEPS optimizer steps per stage;
  - with more than one stage, waits, sends and receives on every stage;
  - the events of one stage never overlap in time (they follow one another on its one thread);
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


def main():
    path, stages, microbatches, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
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
    by_stage = {s: sorted((e for e in complete if e["pid"] == s), key=lambda e: e["ts"]) for s in range(stages)}
    if sum(len(v) for v in by_stage.values()) != len(complete):
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

    for s, evs in by_stage.items():
        for a, b in zip(evs, evs[1:]):
            if b["ts"] < a["ts"] + a["dur"] - TOLERANCE_US:
                fail(f"stage {s}: {a['name']} [{a['ts']}, +{a['dur']}] overlaps {b['name']} at {b['ts']}")
    print("ok: no two events of one stage overlap")

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
