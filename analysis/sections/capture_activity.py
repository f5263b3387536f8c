"""The integrity figures over time: each process's GPU operations against its own activity (NVTX ranges or OS runtime
calls), and holes in its CUDA correlation ids. nsys's own diagnostics and the nsys that exported against the driver
are capture_messages.py's."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..common import intervals
from ..load import btree
from ..load.btree import Bits, In
from ..load.frames import pid_of
from ..load.kernel_digest import fits
from ..load.ops_store import distinct
from ..load.trace import Trace


@dataclass(frozen=True, kw_only=True)
class ProcessActivity:
    """One process's GPU operations and CPU events over the capture, in bins."""
    pid: int
    start_ns: int
    bin_ns: int
    activity: str
    gpu_ops: int
    cpu_events: int
    gpu_ops_per_s: tuple[float, ...]
    cpu_events_per_s: tuple[float, ...]
    gpu_end_ns: int
    cpu_events_after: int
    cpu_share_after: float


@dataclass(frozen=True, kw_only=True)
class CorrelationGaps:
    """Holes in the correlation ids: the largest, whether checked, per process."""
    largest_gpu_id_gap: int
    checked: bool
    processes: tuple[ProcessIdGaps, ...]


@dataclass(frozen=True, kw_only=True)
class ProcessIdGaps:
    """One process's correlation id holes and the calls they may have lost."""
    pid: int
    api_rows: int
    id_span: int
    largest_gap: int
    gaps: int
    gaps_while_running: int
    ids_lost: int
    est_missing_calls: int
    missing_share: float

# Time check: the program's own NVTX ranges and OS runtime calls go on while its GPU operations stop. Rates are
# reported over TIMELINE_BINS equal bins of each process's span (GPU operations vs NVTX/OSRT events per second).
TIMELINE_BINS = 20
# A process's own activity is its NVTX ranges when it has at least this many, else its OS runtime calls.
MIN_NVTX_RANGES = 20
# Correlation ids: CUPTI numbers every CUDA API call of a process in order, the ones nsys does not record too (it
# skips some frequent calls), so a complete trace's ids have small holes and a lossy one has large ones. Largest
# hole between two GPU operations' ids in complete traces: 1,975 (lightning's model set-up); the lossy nsys 2023.4 /
# CUDA 13 captures: 32,656 (torchvision DataLoader loop) and 117,085 (transformers generate()). Above
# GPU_ID_GAP_SUSPECT the process's API ids are read and every hole of at least API_ID_GAP_LOST ids (complete
# traces: at most 425) during which the process kept running (NVTX or OS runtime events inside it) counts as lost
# calls, at the id density of the rest of the trace.
GPU_ID_GAP_SUSPECT = 5000
API_ID_GAP_LOST = 1000


class OsrtStarts(dict):
    """pid -> sorted start times of its OS runtime calls (-1: every process), read on first use."""

    def __init__(self, trace: Trace):
        super().__init__()
        self.trace = trace

    def __missing__(self, pid: int) -> np.ndarray:
        self[pid] = self.trace.osrt.starts((In(Bits("globalTid"), (pid,)),) if pid >= 0 else ())
        return self[pid]


def timeline(trace: Trace, gpu: dict, osrt_starts: OsrtStarts) -> list[dict]:
    """Per process that ran GPU work: its GPU operations and its own activity per second over its span, and how much
    of that activity follows its last GPU operation. Its activity: its NVTX ranges (the program's own marks of work)
    where it has at least MIN_NVTX_RANGES, else its OS runtime calls (read only then, one column)."""
    kinds = [(v[0], v[2], v[3]) for v in gpu.values() if v[0].size]  # (pid, start, end) per kind: no concatenation
    if not kinds:
        return []
    nvtx = trace.host.nvtx
    nvtx_pid, nvtx_t = pid_of(nvtx["global_tid"].to_numpy(np.int64)), nvtx["start_ns"].to_numpy(np.int64)
    out = []
    for p in sorted(set().union(*(distinct(pid).tolist() for pid, _, _ in kinds))):
        # each kind's rows of this process; all of them, without a copy, in the usual one-process trace
        mine = [(s, e) if p < 0 or bool((pid == p).all()) else (np.asarray(s)[pid == p], np.asarray(e)[pid == p])
                for pid, s, e in kinds]
        mine = [(s, e) for s, e in mine if s.size]
        cpu, source = (nvtx_t[nvtx_pid == p] if p >= 0 else nvtx_t), "nvtx"
        if cpu.size < MIN_NVTX_RANGES:
            cpu, source = osrt_starts[int(p)], "osrt"
        first, gpu_end = min(int(s.min()) for s, _ in mine), max(int(e.max()) for _, e in mine)
        lo = int(min(first, cpu.min() if cpu.size else first))
        hi = int(max(gpu_end, cpu.max() if cpu.size else 0)) + 1
        bin_ns = max(1, -(-(hi - lo) // TIMELINE_BINS))
        gpu_n = sum(np.bincount((s[k:k + intervals.CHUNK] - lo) // bin_ns, minlength=TIMELINE_BINS)[:TIMELINE_BINS]
                    for s, _ in mine for k in range(0, s.size, intervals.CHUNK))  # bounded temporaries
        cpu_n = np.bincount((cpu - lo) // bin_ns, minlength=TIMELINE_BINS)[:TIMELINE_BINS]
        after = int((cpu > gpu_end).sum())
        out.append({"pid": int(p), "start_ns": lo, "bin_ns": int(bin_ns), "activity": source,
                    "gpu_ops": int(sum(s.size for s, _ in mine)), "cpu_events": int(cpu.size),
                    "gpu_ops_per_s": [round(float(x) * 1e9 / bin_ns, 1) for x in gpu_n],
                    "cpu_events_per_s": [round(float(x) * 1e9 / bin_ns, 1) for x in cpu_n],
                    "gpu_end_ns": gpu_end, "cpu_events_after": after,
                    "cpu_share_after": round(after / cpu.size, 4) if cpu.size else 0.0})
    return out


def _pids_in_order(gpu: dict) -> list[int]:
    """The processes of the GPU rows in order of first appearance (kernels, then copies, then memsets)."""
    seen: dict[int, None] = {}
    for pid, *_ in gpu.values():
        seen.update(dict.fromkeys(distinct(pid).tolist()))
    return list(seen)


ID_WINDOW = 1 << 26  # correlation ids per pass of _largest_id_gap's bitmap: 64 MB of flags, whatever the capture
SPARSE_IDS = 16  # ids spread over more than this many times their count: sorted instead (the bitmap would be larger)


def _largest_id_gap(gpu: dict, p: int) -> int | None:
    """The largest hole between a process's sorted positive correlation ids (p < 0: every row's), less one; None
    with fewer than two ids. From a bitmap of the ids' range, ID_WINDOW ids at a time (tens of millions of GPU rows
    in a long capture: no sorted copy of them), or, where the ids are sparse, from one sorted copy."""
    parts = [corr if p < 0 or bool((pid == p).all()) else np.asarray(corr)[pid == p] for pid, corr, *_ in gpu.values()]
    lo, hi, n = _positive_span(parts)
    if n < 2:
        return None
    if hi - lo + 1 > SPARSE_IDS * n:
        return _sorted_id_gap(parts)
    largest, last = 0, None
    for w in range(lo, hi + 1, ID_WINDOW):
        seen = np.zeros(min(ID_WINDOW, hi + 1 - w), dtype=bool)
        for x in parts:
            for k in range(0, x.size, intervals.CHUNK):
                v = x[k:k + intervals.CHUNK]
                seen[v[(v >= w) & (v < w + seen.size)] - w] = True
        for k in range(0, seen.size, intervals.CHUNK):  # the ids present, CHUNK flags at a time
            at = np.flatnonzero(seen[k:k + intervals.CHUNK]) + (w + k)
            if at.size:
                steps = np.diff(at) if last is None else np.diff(at, prepend=last)
                largest = max(largest, int(steps.max())) if steps.size else largest
                last = int(at[-1])
    return largest - 1  # one id repeated alone: -1, as the sorted form's difference of 0 gives


def _positive_span(parts: list[np.ndarray]) -> tuple[int, int, int]:
    """The smallest and largest positive id and how many there are (CHUNK at a time: no mask as long as the ids)."""
    lo, hi, n = None, None, 0
    for x in parts:
        for k in range(0, x.size, intervals.CHUNK):
            v = x[k:k + intervals.CHUNK]
            v = v[v > 0]
            if v.size:
                lo = int(v.min()) if lo is None else min(lo, int(v.min()))
                hi = int(v.max()) if hi is None else max(hi, int(v.max()))
                n += int(v.size)
    return (lo or 0), (hi or 0), n


def _sorted_id_gap(parts: list[np.ndarray]) -> int:
    """_largest_id_gap() from one sorted copy of the ids (of at least two positive ones)."""
    narrow = all(fits(x, np.int32) for x in parts)  # 32 bits where they fit: half the copy (tens of millions of ids)
    ids = np.concatenate([np.asarray(x).astype(np.int32 if narrow else np.int64, copy=False) for x in parts])
    ids.sort()
    ids = ids[np.searchsorted(ids, 0, side="right"):]  # the positive ids: a view
    steps = [(k, min(k + intervals.CHUNK, ids.size - 1)) for k in range(0, ids.size - 1, intervals.CHUNK)]
    return max(int((ids[k + 1:j + 1] - ids[k:j]).max()) for k, j in steps) - 1  # differences CHUNK at a time


def id_gaps(trace: Trace, gpu: dict, osrt_starts: OsrtStarts) -> dict:
    """Holes in each process's correlation ids while it kept running: API calls (with their GPU work) never
    recorded. Read only where the GPU operations' own ids jump by more than GPU_ID_GAP_SUSPECT."""
    out = {"largest_gpu_id_gap": 0, "checked": False, "processes": []}
    suspects = []
    for p in _pids_in_order(gpu):
        largest = _largest_id_gap(gpu, p)
        if largest is None:
            continue
        out["largest_gpu_id_gap"] = max(out["largest_gpu_id_gap"], largest)
        if largest > GPU_ID_GAP_SUSPECT and p >= 0:
            suspects.append(p)
    if not suspects or not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return out
    out["checked"] = True
    for p in suspects:
        h = _api_holes(trace, p)
        if h is None:
            continue
        inside = _activity_inside(trace, p, osrt_starts, h.lo, h.hi)
        running = inside > 0
        lost_ids = int(h.big[running].sum())
        share = lost_ids / h.span  # the share of the process's calls that fell into the holes
        # recorded calls per id elsewhere, applied to the holes (on the real captures within 25% of the count a
        # newer nsys recorded for the same program)
        missing = int(round(h.rows * share / (1 - share))) if share < 1 else None
        out["processes"].append({
            "pid": int(p), "api_rows": h.rows, "id_span": h.span, "largest_gap": h.largest,
            "gaps": int(h.big.size), "gaps_while_running": int(running.sum()), "ids_lost": lost_ids,
            "est_missing_calls": missing, "missing_share": round(share, 4)})
    return out


@dataclass
class ApiHoles:
    """A process's positive API correlation ids in sorted order: how many (rows), their span and largest hole
    (difference less one), and each hole of at least API_ID_GAP_LOST ids (big) with the earlier (lo) and later (hi)
    of the start times of the calls on either side of it."""
    rows: int
    span: int
    largest: int
    big: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


API_ID_COLUMNS = {"corr": "correlationId", "start_ns": "start"}


def _api_holes(trace: Trace, p: int) -> ApiHoles | None:
    """ApiHoles of process p's CUDA API calls (None with fewer than two positive ids), read a chunk at a time: the
    runtime table holds tens of millions of rows in a long capture. Its ids come in rowid order already sorted in
    every capture we have seen (the stable sort then changes nothing), so the holes are found as the chunks come;
    where they do not, _unsorted_api_holes() reads them again."""
    mine = (In(Bits("globalTid"), (int(p),)),)
    rows, first, last, last_start, largest = 0, None, None, None, None
    big: list[np.ndarray] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    for chunk in trace.reader.int_column_chunks("CUPTI_ACTIVITY_KIND_RUNTIME", API_ID_COLUMNS, mine):
        ids, starts = chunk["corr"].to_numpy(), chunk["start_ns"].to_numpy()
        keep = ids > 0
        ids, starts = ids[keep], starts[keep]
        if not ids.size:
            continue
        if last is not None:
            ids, starts = np.concatenate(([last], ids)), np.concatenate(([last_start], starts))
        holes = np.diff(ids) - 1
        if (holes < -1).any():
            return _unsorted_api_holes(trace, mine)
        if holes.size:
            largest = int(holes.max()) if largest is None else max(largest, int(holes.max()))
            at = np.flatnonzero(holes >= API_ID_GAP_LOST)
            big.append(holes[at])
            lo.append(np.minimum(starts[at], starts[at + 1]))
            hi.append(np.maximum(starts[at], starts[at + 1]))
        rows += int(keep.sum())
        first = int(ids[0]) if first is None else first
        last, last_start = int(ids[-1]), int(starts[-1])
    if rows < 2:
        return None
    joined = [np.concatenate(x) if x else np.zeros(0, np.int64) for x in (big, lo, hi)]
    return ApiHoles(rows, last - first + 1, int(largest), *joined)


def _unsorted_api_holes(trace: Trace, mine: tuple) -> ApiHoles | None:
    """_api_holes() of ids not in rowid order, without a sorted copy of them: the holes from a bitmap of the ids'
    range (ID_WINDOW ids at a time, as _largest_id_gap), then the start of the last call (in rowid order: the stable
    sort's) with the id before each big hole and of the first with the id after it, the table read again a chunk at
    a time for each; where the ids are sparse, from one sorted copy (_sorted_api_holes)."""
    def chunks(columns=("corr",)):
        for chunk in trace.reader.int_column_chunks("CUPTI_ACTIVITY_KIND_RUNTIME",
                                                    {c: API_ID_COLUMNS[c] for c in columns}, mine):
            ids = chunk["corr"].to_numpy()
            keep = ids > 0
            yield ids[keep], chunk["start_ns"].to_numpy()[keep] if "start_ns" in chunk else None
    rows, lo, hi = 0, None, None
    for ids, _ in chunks():
        if ids.size:
            rows += int(ids.size)
            lo = int(ids.min()) if lo is None else min(lo, int(ids.min()))
            hi = int(ids.max()) if hi is None else max(hi, int(ids.max()))
    if rows < 2 or lo is None or hi is None:
        return None
    if hi - lo + 1 > SPARSE_IDS * rows:
        return _sorted_api_holes(trace, mine)
    largest, last = -1, None  # -1: one id repeated alone, as the sorted form's difference of 0 gives
    before: list[np.ndarray] = []
    after: list[np.ndarray] = []
    for w in range(lo, hi + 1, ID_WINDOW):
        seen = np.zeros(min(ID_WINDOW, hi + 1 - w), dtype=bool)
        for ids, _ in chunks():
            seen[ids[(ids >= w) & (ids < w + seen.size)] - w] = True
        for k in range(0, seen.size, intervals.CHUNK):  # the ids present, CHUNK flags at a time
            at = np.flatnonzero(seen[k:k + intervals.CHUNK]) + (w + k)
            if not at.size:
                continue
            at = at if last is None else np.concatenate(([last], at))
            holes = np.diff(at) - 1
            if holes.size:
                largest = max(largest, int(holes.max()))
                big = np.flatnonzero(holes >= API_ID_GAP_LOST)
                before.append(at[big])
                after.append(at[big + 1])
            last = int(at[-1])
    a, b = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (before, after))
    a_start, b_start = np.zeros(a.size, np.int64), np.zeros(b.size, np.int64)
    b_found = np.zeros(b.size, bool)
    for ids, starts in (chunks(("corr", "start_ns")) if a.size else ()):
        i = np.searchsorted(a, ids)
        hit = (i < a.size) & (a[np.minimum(i, a.size - 1)] == ids)
        if hit.any():  # the last call with each id before a hole: later chunks overwrite
            pos, at_start = i[hit][::-1], starts[hit][::-1]
            u, last_of = np.unique(pos, return_index=True)
            a_start[u] = at_start[last_of]
        j = np.searchsorted(b, ids)
        hit = (j < b.size) & (b[np.minimum(j, b.size - 1)] == ids)
        if hit.any():  # the first call with each id after a hole: the first chunk holding it
            u, first_of = np.unique(j[hit], return_index=True)
            new = ~b_found[u]
            b_start[u[new]] = starts[hit][first_of[new]]
            b_found[u[new]] = True
    return ApiHoles(rows, hi - lo + 1, largest, b - a - 1, np.minimum(a_start, b_start),
                    np.maximum(a_start, b_start))


def _sorted_api_holes(trace: Trace, mine: tuple) -> ApiHoles | None:
    """_api_holes() from the process's ids and starts read whole and sorted by id (stable: rowid order among equal
    ids)."""
    rt = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", API_ID_COLUMNS, mine)
    ids = rt["corr"].to_numpy()
    keep = ids > 0
    order = np.argsort(ids[keep], kind="stable")
    ids, starts = ids[keep][order], rt["start_ns"].to_numpy()[keep][order]
    del rt
    if ids.size < 2:
        return None
    holes = np.diff(ids) - 1
    at = np.flatnonzero(holes >= API_ID_GAP_LOST)
    return ApiHoles(int(ids.size), int(ids[-1] - ids[0] + 1), int(holes.max()), holes[at],
                    np.minimum(starts[at], starts[at + 1]), np.maximum(starts[at], starts[at + 1]))


def _activity_inside(trace: Trace, pid: int, osrt_starts: OsrtStarts, lo: np.ndarray, hi: np.ndarray
                     ) -> np.ndarray:
    """How many of a process's NVTX ranges and OS runtime calls start strictly inside each (lo, hi): its OS calls'
    starts as the timeline read them (osrt_starts) where it did, else a chunk at a time (tens of millions in a long
    capture), none read where there is no interval to look in."""
    if not lo.size:
        return np.zeros(0, np.int64)
    nvtx = trace.host.nvtx
    mine = nvtx["start_ns"].to_numpy(np.int64)[pid_of(nvtx["global_tid"].to_numpy(np.int64)) == pid]
    if int(pid) in osrt_starts:
        parts = iter([osrt_starts[int(pid)]])
    else:
        parts = (c["start_ns"].to_numpy() for c in trace.reader.int_column_chunks(
            "OSRT_API", {"start_ns": "start"}, (In(Bits("globalTid"), (int(pid),)), btree.USABLE))
            ) if trace.has("OSRT_API") else iter(())
    inside = np.zeros(lo.size, np.int64)
    for x in itertools.chain([mine], parts):
        x = np.sort(x)
        inside += np.searchsorted(x, hi) - np.searchsorted(x, lo, side="right")
    return inside
