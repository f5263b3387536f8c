"""What a capture costs the traced program, by the program's own clock (issue 57, item 9): the program run untraced,
traced as `make trace` traces it (`nsys-transfer run`'s defaults: nsys with CPU sampling and the Python stack
sampler), and traced without the stack sampler (`--python-stacks-ms 0`); optionally with verify's OPTS too (`--sample
none --python-backtrace none`, the stack sampler on). Each mode RUNS times, the modes taking turns round by round (a
shared machine's noise spread over all of them); the median of each, and its cost against untraced. The program must
print its own clock: the first group of --clock's regex on its output (seconds, or with --rate a rate, higher better);
more clocks may be named (cpu_roll.py prints its loop's, loop_s, its whole process's, process_s: its imports too, and
the process's CPU seconds, cpu_s, which other jobs on a shared machine move less than its clock). Each line also gives
the whole command's wall time (nsys's start, the capture and the export included): what the user waits for.

usage:
  python benchmarks/capture_cost.py [--runs 3] [--modes plain,default,no-stacks] [--clock NAME=REGEX ...] [--rate]
                                    [--json out.json] -- PYTHON PROGRAM [ARGS]
on the CPU (this machine):
  .venv/bin/python benchmarks/capture_cost.py -- .venv/bin/python tests/programs/cpu_roll.py
on a GPU machine (the README's GPU figure; image_loop prints its steady-state batches/s):
  .venv/bin/python benchmarks/capture_cost.py --rate --clock 'steady="batches_per_s": ([0-9.]+)' \
      --json out/capture_cost_gpu.json -- .venv/bin/python tests/programs/image_loop.py --device cuda --batches 40
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {  # mode -> `nsys-transfer run` options (None: the program alone, untraced)
    "plain": None,
    "default": [],
    "no-stacks": ["--python-stacks-ms", "0"],
    "verify-opts": ["--sample", "none", "--python-backtrace", "none"],
}


def run_once(mode: str, command: list[str], clocks: dict[str, re.Pattern], folder: Path) -> dict[str, float]:
    """The program's own clocks (the first required, the others where printed) and the command's wall seconds
    (`wall`) of one run in this mode; SystemExit on a failed run."""
    opts = MODES[mode]
    cmd = command if opts is None else [sys.executable, "-m", "nsys_transfer", "run", "-o", str(folder / mode / mode),
                                        "--force", *opts, "--", *command]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    found = {name: c.search(done.stdout + done.stderr) for name, c in clocks.items()}
    first = next(iter(clocks))
    if done.returncode != 0 or not found[first]:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"capture_cost: {mode}: the run failed or printed no clock ({clocks[first].pattern}): "
                         f"exit {done.returncode}: {' | '.join(tail)}")
    return {**{name: float(m.group(1)) for name, m in found.items() if m}, "wall": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default="plain,default,no-stacks", help=f"of {', '.join(MODES)}")
    p.add_argument("--clock", action="append", default=None, metavar="NAME=REGEX",
                   help="a clock the program prints, the regex's first group its value (repeat for several; the first "
                        "must be printed); default: loop=loop_s=..., process=process_s=..., cpu=cpu_s=...")
    p.add_argument("--rate", action="store_true", help="the clocks are rates (higher is faster), not seconds")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    given = args.clock or ["loop=loop_s=([0-9.]+)", "process=process_s=([0-9.]+)", "cpu=cpu_s=([0-9.]+)"]
    if not command or bad or args.runs < 1 or not all("=" in c for c in given):
        p.error(f"give the program after `--`, --runs >= 1, modes of {', '.join(MODES)}, clocks as NAME=REGEX"
                + (f" (not {', '.join(bad)})" if bad else ""))
    clocks = {c.split("=", 1)[0]: re.compile(c.split("=", 1)[1]) for c in given}
    folder = Path(tempfile.mkdtemp(prefix="capture-cost-"))
    got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    try:
        for r in range(args.runs):
            for m in modes:
                got[m].append(run_once(m, command, clocks, folder))
                print(f"round {r + 1}/{args.runs} {m}: " + ", ".join(f"{k} {v:.3f}" for k, v in got[m][-1].items()),
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for m in modes:
        row = {"mode": m, "options": MODES[m], "runs": got[m], "median": {}, "cost": {}}
        for name in [*clocks, "wall"]:
            values = [run[name] for run in got[m] if name in run]
            base = [run[name] for run in got.get("plain", []) if name in run]
            if not values:
                continue
            row["median"][name] = statistics.median(values)
            if base and m != "plain":  # how much longer the program's work took (a rate: how much slower it ran)
                b = statistics.median(base)
                row["cost"][name] = (b / row["median"][name] - 1) if args.rate and name != "wall" else \
                    (row["median"][name] / b - 1)
        rows.append(row)
        print(f"{m:<12} " + "; ".join(
            f"{name} median {v:.3f} ({', '.join(f'{run[name]:.3f}' for run in got[m] if name in run)})"
            + (f" {100 * row['cost'][name]:+.0f}%" if name in row["cost"] else "") for name, v in row["median"].items()))
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps({"command": command, "clocks": given, "rate": args.rate,
                                                    "runs": args.runs, "modes": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
