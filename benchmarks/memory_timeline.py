"""Where one trace's analysis holds its memory: resident memory over time, by the analysis's own steps.

    python benchmarks/memory_timeline.py out/bench/large-8g.sqlite [--every-ms 20]

Runs the analysis in this process (with the CLI's allocator settings: analysis/memory.py) while a thread samples
the resident set size; prints, for each progress step the analysis reports, when it began, how long it took, and
the peak and last RSS inside it, then the whole run's peak. The figures say which step to look at, not why: for
that, compare runs of the code before and after a change.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nsys_transfer.analysis.load.inputs import resolve_input
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.memory import return_freed_memory
from nsys_transfer.analysis.summary import analyze

class MallInfo(ctypes.Structure):
    """glibc's mallinfo2(): what malloc holds."""
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


def _mallinfo():
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = MallInfo
    return f


MALLINFO = _mallinfo()


def rss_bytes() -> tuple[int, ...]:
    """This process's resident set size now; the part of it that is mapped files (the export, read through mmap,
    counts there: pages the system may drop at any time); and malloc's own blocks: in use and free in its heap, and
    mapped apart (numpy's large arrays). The rest of RSS is Python's small-object arenas, stacks and code."""
    with open("/proc/self/status") as f:
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "RssFile")}
    m = MALLINFO() if MALLINFO else None
    heap = (m.uordblks, m.fordblks, m.hblkhd) if m else (0, 0, 0)
    return (kb["VmRSS"] << 10, kb.get("RssFile", 0) << 10, *heap)


class Sampler(threading.Thread):
    """Samples RSS every `every` seconds into the step the analysis last reported."""

    def __init__(self, every: float):
        super().__init__(daemon=True)
        self.every, self.step, self.t0 = every, "opening", time.perf_counter()
        self.rows: dict[str, list] = {}  # step -> [began s, last s, peak bytes, last bytes, the rest at the peak]
        self.done = threading.Event()

    def enter(self, step: str) -> None:
        self.step = step
        self.sample()

    def sample(self) -> None:
        now, (rss, *rest) = time.perf_counter() - self.t0, rss_bytes()
        row = self.rows.setdefault(self.step, [now, now, 0, 0, rest])
        row[1], row[3] = now, rss
        if rss > row[2]:
            row[2], row[4] = rss, rest

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.sample()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--every-ms", type=float, default=20.0)
    args = ap.parse_args()
    return_freed_memory()
    sampler = Sampler(args.every_ms / 1000)
    sampler.start()
    local, shown = resolve_input(args.trace)  # a .sqlite.xz is unpacked first
    with Trace(local, shown) as trace:
        analyze(trace, progress=sampler.enter)
    sampler.enter("done")
    sampler.done.set()
    gib = 1 << 30
    print(f"{'step':<38} {'began s':>7} {'took s':>7} {'peak GiB':>8}   at the peak: {'files':>5} {'heap used':>9} "
          f"{'heap free':>9} {'mapped':>6}   {'last GiB':>8}")
    for step, (began, last, peak, end, rest) in sampler.rows.items():
        files, used, free, mapped = (x / gib for x in rest)
        print(f"{step[:38]:<38} {began:7.1f} {last - began:7.1f} {peak / gib:8.2f}   {'':>12} {files:5.2f} {used:9.2f} "
              f"{free:9.2f} {mapped:6.2f}   {end / gib:8.2f}")
    print(f"peak RSS {max(r[2] for r in sampler.rows.values()) / gib:.2f} GiB")


if __name__ == "__main__":
    main()
