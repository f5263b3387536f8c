"""Where one trace's analysis holds its memory: resident memory over time, by the analysis's own steps.

    python benchmarks/memory_timeline.py out/bench/large-8g.sqlite [--every-ms 20] [--held]

Runs the analysis in this process (with the CLI's allocator settings: analysis/common/memory.py) while a thread samples
the resident set size; prints, for each progress step the analysis reports, when it began, how long it took, and
the peak and last RSS inside it, then the whole run's peak. The figures say which step to look at, not why: for
that, --held prints the largest tables and arrays held at the end of each step (by the function and variable, or
the object, holding them), and the run ends with what each thread was doing at the peak.
"""
from __future__ import annotations

import argparse
import gc
import ctypes
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nsys_transfer.analysis.load.inputs import resolve_input
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.common.memory import return_freed_memory
from nsys_transfer.analysis.summary import analyze_sections

ROOT = Path(__file__).resolve().parent.parent
OURS = tuple(str(ROOT / d) for d in ("analysis", "nsys_transfer"))  # the analysis's own files


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

    def __init__(self, every: float, held: bool = False):
        super().__init__(daemon=True)
        self.held = held
        self.peak, self.stacks = 0, {}
        self.every, self.step, self.t0 = every, "opening", time.perf_counter()
        self.rows: dict[str, list] = {}  # step -> [began s, last s, peak bytes, last bytes, the rest at the peak]
        self.done = threading.Event()

    def enter(self, step: str) -> None:
        if self.held:
            _held(self.step)
        self.step = step
        self.sample()

    def sample(self) -> None:
        now, (rss, *rest) = time.perf_counter() - self.t0, rss_bytes()
        row = self.rows.setdefault(self.step, [now, now, 0, 0, rest])
        row[1], row[3] = now, rss
        if rss > row[2]:
            row[2], row[4] = rss, rest
        if rss > self.peak:  # what every thread was doing when the whole run's peak was reached
            self.peak, self.stacks = rss, _stacks()

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.sample()


def _stacks() -> dict[str, list[str]]:
    """Each thread's frames in the analysis's own files, innermost last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = {}
    for ident, frame in sys._current_frames().items():
        lines = []
        while frame is not None:
            if frame.f_code.co_filename.startswith(OURS):
                lines.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}")
            frame = frame.f_back
        if lines:
            out[names.get(ident, str(ident))] = lines[::-1]
    return out


def _held(step: str, top: int = 14) -> None:
    """The largest tables the analysis's frames hold at the end of a step (--held): by function and variable, each
    array counted once (where it is first met, innermost frame first), through dicts, lists, tuples and objects."""
    seen: set[int] = set()
    rows = []
    frame = sys._getframe(2)  # the analysis's frame that reported the step, and its callers
    while frame is not None:
        for name, value in frame.f_locals.items():
            rows.append((_bytes(value, seen, 6), f"{frame.f_code.co_name}:{name}"))
        frame = frame.f_back
    for obj in gc.get_objects():  # tables held elsewhere: caches, other threads, closures
        if isinstance(obj, (pd.DataFrame, pd.Series)):
            size = _bytes(obj, seen, 0)
            what = list(obj.columns)[:6] if isinstance(obj, pd.DataFrame) else obj.name
            rows.append((size, f"elsewhere: {type(obj).__name__} {len(obj):,} rows {what}"))
    rows += _arrays_anywhere(seen)
    print(f"\n-- held after '{step}': {sum(r[0] for r in rows) / 2**20:.0f} MiB in tables", file=sys.stderr)
    for size, where in sorted(rows, reverse=True)[:top]:
        print(f"{size / 2**20:8.1f} MiB  {where}", file=sys.stderr)


def _arrays_anywhere(seen: set[int]) -> list[tuple[int, str]]:
    """numpy arrays not yet counted that any container holds (numpy arrays are not tracked by gc, their holders are):
    by the holder's type, with a dict's first keys."""
    out: dict[str, int] = {}
    for holder in gc.get_objects():
        for a in gc.get_referents(holder):
            if isinstance(a, np.ndarray):
                size = _bytes(a, seen, 0)
                if size:
                    keys = list(holder)[:4] if isinstance(holder, dict) else ""
                    what = f"anywhere: {type(holder).__name__} {keys}"
                    out[what] = out.get(what, 0) + size
    return [(v, k) for k, v in out.items()]


def _bytes(obj, seen: set[int], depth: int) -> int:
    """Bytes of the numpy arrays inside obj not yet counted (DataFrames and Series by their arrays)."""
    if id(obj) in seen or depth < 0:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        root = obj
        while isinstance(root.base, np.ndarray):  # a view: its memory is its root's
            root = root.base
        if root is not obj and id(root) in seen:
            return 0
        seen.add(id(root))
        return root.nbytes
    if isinstance(obj, (pd.DataFrame, pd.Series, pd.Index)):
        arrays = [obj[c].array for c in obj.columns] if isinstance(obj, pd.DataFrame) else [obj.array]
        return sum(_bytes(np.asarray(getattr(a, "codes", a)), seen, depth) for a in arrays)
    if isinstance(obj, dict):
        return sum(_bytes(v, seen, depth - 1) for v in obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sum(_bytes(v, seen, depth - 1) for v in list(obj)[:10_000])
    attrs = getattr(obj, "__dict__", None)
    if attrs is None and hasattr(obj, "__slots__"):
        attrs = {k: getattr(obj, k, None) for k in obj.__slots__}
    return _bytes(attrs, seen, depth - 1) if isinstance(attrs, dict) else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--every-ms", type=float, default=20.0)
    ap.add_argument("--held", action="store_true",
                    help="also print the largest tables held at the end of each step, by function and variable")
    args = ap.parse_args()
    return_freed_memory()
    sampler = Sampler(args.every_ms / 1000, args.held)
    sampler.start()
    local, shown = resolve_input(args.trace)  # a .sqlite.xz is unpacked first
    with Trace(local, shown) as trace:
        analyze_sections(trace, progress=sampler.enter)
    sampler.enter("done")
    sampler.done.set()
    gib = 1 << 30
    print(f"{'step':<38} {'began s':>7} {'took s':>7} {'peak GiB':>8}   at the peak: {'files':>5} {'heap used':>9} "
          f"{'heap free':>9} {'mapped':>6}   {'last GiB':>8}")
    for step, (began, last, peak, end, rest) in sampler.rows.items():
        files, used, free, mapped = (x / gib for x in rest)
        print(f"{step[:38]:<38} {began:7.1f} {last - began:7.1f} {peak / gib:8.2f}   {'':>12} {files:5.2f} {used:9.2f} "
              f"{free:9.2f} {mapped:6.2f}   {end / gib:8.2f}")
    print(f"peak RSS {max(r[2] for r in sampler.rows.values()) / gib:.2f} GiB; what each thread was doing then:")
    for name, lines in sampler.stacks.items():
        print(f"  {name}: {' > '.join(lines)}")


if __name__ == "__main__":
    main()
