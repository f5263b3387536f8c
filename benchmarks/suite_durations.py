"""Where the test suite's time goes: runs it as `make test` does, with --durations=0, and prints the wall time, the
tests' own durations summed, and the files and tests that take the most (docs/benchmarks.md, "The tests in two
processes"). Or reads a saved run's output: python benchmarks/suite_durations.py --from out.txt

    .venv/bin/python benchmarks/suite_durations.py [--top 25] [--from FILE] [-- PYTEST ARGS]
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^([0-9.]+)s (setup|call|teardown)\s+(\S+)")


def durations(text: str) -> tuple[collections.Counter, collections.Counter]:
    """(seconds by test file, seconds by test) from pytest's --durations=0 lines."""
    by_file: collections.Counter = collections.Counter()
    by_test: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            seconds, node = float(m.group(1)), m.group(3)
            by_file[node.split("::")[0]] += seconds
            by_test[node] += seconds
    return by_file, by_test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--from", dest="saved", type=Path, help="a saved pytest output (with --durations=0) to read")
    ap.add_argument("pytest_args", nargs="*", default=["-n", "2", "--dist", "loadgroup"])
    a = ap.parse_args()
    if a.saved:
        text, wall = a.saved.read_text(), None
    else:
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
                            *a.pytest_args], cwd=ROOT, capture_output=True, text=True)
        wall, text = time.perf_counter() - start, r.stdout + r.stderr
        print(text.strip().splitlines()[-1])
    by_file, by_test = durations(text)
    print(f"tests' own durations summed: {sum(by_file.values()) / 60:.1f} min over the {len(by_test)} tests pytest shows (it hides those under 5 ms)"
          + (f"; wall {wall / 60:.1f} min ({sum(by_file.values()) / wall:.2f}x the wall)" if wall else ""))
    for name, seconds in by_file.most_common(a.top):
        print(f"{seconds:8.1f} s  {name}")
    print()
    for name, seconds in by_test.most_common(a.top):
        print(f"{seconds:8.1f} s  {name}")


if __name__ == "__main__":
    main()
