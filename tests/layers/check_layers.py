#!/usr/bin/env python3
"""The floors' one rule (docs/DESIGN.md section 1): a file includes only its own floor and the floors below it.

Reads every quoted #include of the C++/CUDA sources and fails, naming file, line and both floors, on one that
runs up (or sideways between the two backends), on one that does not resolve from the repository root (the one
include directory), and on a source file that stands on no floor.
Usage: check_layers.py REPO_ROOT"""
import pathlib
import re
import sys

PIPELINE = ["pipeline/stage", "pipeline/schedule", "pipeline/transport"]
# Each floor: its folder, and the floors its files may include besides their own. Bottom to top.
FLOORS = {
    "core": ("src/core", []),
    "data": ("src/data", ["core"]),
    "ops": ("src/ops", ["core"]),
    "cpu": ("src/cpu", ["ops", "core"]),
    "cuda": ("cuda", ["ops", "core"]),
    "model": ("model", ["ops", "core"]),
    "optim": ("optim", ["model", "ops", "core"]),
    "plan": ("src/plan", ["optim", "model", "data", "ops", "core"]),
    # pipeline/ has three parts, one floor each: schedules as data; the transports, the only part that may use
    # the CUDA backend's headers (the NCCL transport moves CUDA tensors); the stage, which runs a schedule over a
    # transport.
    "pipeline/schedule": ("pipeline/schedule", ["plan", "optim", "model", "data", "ops", "core"]),
    "pipeline/transport": ("pipeline/transport", ["cuda", "ops", "core"]),
    "pipeline/stage": ("pipeline/stage", ["pipeline/schedule", "pipeline/transport", "plan", "optim", "model",
                                          "data", "ops", "core"]),
    "run": ("src/run", PIPELINE + ["plan", "optim", "model", "data", "cpu", "cuda", "ops", "core"]),
    "cli": ("src/cli", ["run"] + PIPELINE + ["plan", "optim", "model", "data", "cpu", "cuda", "ops", "core"]),
}
TESTS = "tests"  # above every floor: may include anything, but from the root like everyone else
EXTENSIONS = {".h", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def floor_of(path: str):
    for name, (folder, _) in FLOORS.items():
        if path.startswith(folder + "/"):
            return name
    return None


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    files = 0
    for folder in [f for f, _ in FLOORS.values()] + ["src", "pipeline", TESTS]:
        for source in sorted((root / folder).rglob("*")):
            if source.suffix not in EXTENSIONS or not source.is_file():
                continue
            rel = source.relative_to(root).as_posix()
            floor = floor_of(rel)
            if floor is None and not rel.startswith(TESTS + "/"):
                problems.append(f"{rel}: stands on no floor (its folder is not in check_layers.py's FLOORS)")
                continue
            if folder in ("src", "pipeline") and floor is not None:
                continue  # seen under its own floor's folder
            files += 1
            for number, line in enumerate(source.read_text().splitlines(), 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = match.group(1)
                if not (root / target).is_file():
                    problems.append(f"{rel}:{number}: #include \"{target}\" is not a path from the repository root")
                    continue
                if floor is None:
                    continue  # tests
                to = floor_of(target)
                if to is None:
                    problems.append(f"{rel}:{number}: #include \"{target}\": a floor may not include tests or files on no floor")
                elif to != floor and to not in FLOORS[floor][1]:
                    problems.append(f"{rel}:{number}: #include \"{target}\" runs from floor {floor} up to floor {to}")
    for problem in problems:
        print(problem)
    print(f"layers: {files} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
