"""Wall time of `analyze-trace` over N derived per-rank traces, one after the other, in worker processes and on a
local Dask cluster (for benchmarks only).

usage: rank_timings.py [--ranks 2 16 64] [--mode='--jobs 1' --mode='--jobs 2' --mode='--dask local:2'] [--repeat 3]
                       [--out DIR]
Builds each set with build_rank_traces.py into DIR (default: a temporary folder), runs each mode --repeat times
(the median is shown, the fastest and slowest beside it) and checks that every mode wrote the same JSON as the first.
A Markdown table on stdout; the machine's cores beside it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_rank_traces

MODES = ["--jobs 1", "--jobs 2", "--dask local:2"]


def timed(paths: list[Path], mode: str, out: Path) -> float:
    """One analyze-trace run's wall time (s), its JSON written to `out`."""
    cmd = [sys.executable, "-m", "nsys_transfer.analysis", *map(str, paths), "--json", str(out), "-q", *mode.split()]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 16, 64])
    ap.add_argument("--mode", action="append", help="analyze-trace options of one way to run (repeatable)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    modes = a.mode or MODES
    root = a.out or Path(tempfile.mkdtemp(prefix="rank-timings-"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores; median of {a.repeat} runs (fastest-slowest), seconds\n")
    print("| traces | " + " | ".join(f"`{m}`" for m in modes) + " | same JSON |")
    print("|---:|" + "---:|" * len(modes) + ":---:|")
    for n in a.ranks:
        paths = build_rank_traces.build(root / f"r{n}", n, straggler=n // 2 if n > 2 else None)
        cells, docs = [], []
        for k, mode in enumerate(modes):
            out = root / f"r{n}-{k}.json"
            runs = [timed(paths, mode, out) for _ in range(a.repeat)]
            cells.append(f"{statistics.median(runs):.2f} ({min(runs):.2f}-{max(runs):.2f})")
            docs.append(out.read_bytes())
        print(f"| {n} | " + " | ".join(cells) + f" | {'yes' if len(set(docs)) == 1 else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
