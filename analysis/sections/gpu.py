"""What the GPU did: busy/compute utilisation per device, idle gaps, top kernels."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..common import intervals
from ..common.intervals import (Coverage, SpilledCoverage, covered_and_resumes, covered_chunks, gaps,
                                              in_chunks, union, union_chunks, union_sorted)
from ..load.device import KERNEL_TABLE
from ..load.kernel_digest import KernelDigest
from ..load.ops_store import OPS, SpilledOps, frame_of  # OPS: what the device pass reads
from ..load.trace import Trace
from . import capture_figures, setup, streamed_pass, window
from .base import OPTS, SAY, TRACE, Options, Say, declare
from .device_ops import next_ops, sorted_times


KINDS = ("kernel", "memcpy", "memset")  # the order that breaks ties between operations starting together


class GpuOps:
    """Every GPU operation, kept as the kernel, copy and memset tables it came from: the device pass works on each
    one in place, so a long capture's millions of rows are never copied into one table (nor sorted together)."""

    def __init__(self, parts: dict[str, pd.DataFrame]):
        self.parts = {k: parts[k] for k in KINDS if k in parts and len(parts[k])}

    def __len__(self) -> int:
        return sum(len(df) for df in self.parts.values())

    def span(self) -> tuple[int, int] | None:
        """The first operation's start and the last one's end; None without operations."""
        if not self.parts:
            return None
        return (min(int(df["start_ns"].min()) for df in self.parts.values()),
                max(int(df["end_ns"].max()) for df in self.parts.values()))

    def devices(self) -> list[int]:
        """The devices with operations, in order."""
        return sorted({int(d) for df in self.parts.values() for d in _distinct(df["device"].to_numpy())})

    def where(self, keep) -> "GpuOps":
        """The operations for which keep(table) is true, with OPS alone (the rest of a kernel table is not
        copied); a table nothing is taken from is kept as it is."""
        out = {}
        for kind, df in self.parts.items():
            mask = np.asarray(keep(df), dtype=bool)
            out[kind] = df if mask.all() else frame_of(df)[[c for c in OPS if c in df]][mask]
        return GpuOps(out)

    def inside(self, lo, hi) -> "GpuOps":
        """The operations that overlap [lo, hi) (a table in files they all do is kept as it is, unread)."""
        if all(df["end_ns"].min() > lo and df["start_ns"].max() < hi for df in self.parts.values()):
            return self
        return self.where(lambda df: (df["end_ns"].to_numpy() > lo) & (df["start_ns"].to_numpy() < hi))

    def on_device(self, device: int) -> "GpuOps":
        """The operations of one device."""
        return self.where(lambda df: df["device"].to_numpy() == device)

    def kernels(self) -> "GpuOps":
        """The kernels alone."""
        return GpuOps({k: df for k, df in self.parts.items() if k == "kernel"})

    def last_end_of_those_starting_before(self, t: int) -> int | None:
        """The latest end of the operations that start before t; None if none does."""
        ends = [c["end_ns"][c["start_ns"] < t] for df in self.parts.values() for c in _time_chunks(df)]
        ends = [e for e in ends if e.size]
        return max(int(e.max()) for e in ends) if ends else None


def _time_chunks(df) -> Iterator[dict[str, np.ndarray]]:
    """A table's start_ns and end_ns: whole for a frame, a chunk at a time for a table in files."""
    if isinstance(df, SpilledOps):
        yield from df.chunks(("start_ns", "end_ns"))
    else:
        yield {c: df[c].to_numpy() for c in ("start_ns", "end_ns")}


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values; one comparison pass where they are all one (one GPU: the usual case)."""
    return values[:1] if values.size and values.min() == values.max() else np.unique(values)


def gpu_ops(kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> GpuOps:
    """Every GPU operation (start_ns, end_ns, device, correlation_id, pid) of the three tables, without a copy."""
    return GpuOps(dict(zip(KINDS, (kernels, memcpys, memsets))))


def analysis_window(ops: GpuOps, user: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """From the first GPU operation's start to the last one's end, unless the user set one."""
    return user if user else ops.span()


def idle_gaps(ops: GpuOps, window: tuple[int, int], min_gap_ns: int) -> pd.DataFrame:
    """Per device, stretches of the window with no GPU operation, at least min_gap_ns long.

    Columns: device, start_ns, end_ns, duration_ns, next_correlation_id and next_pid (the op that ends the gap and
    its process; -1 at the end).
    """
    return device_pass(ops, window, min_gap_ns).gaps


class DevicePass(NamedTuple):
    """What device_pass() returns: utilisation per device, the idle gaps, the busy Coverages and each device's
    kernels at its copies."""
    util: pd.DataFrame                    # per device: busy_ns (kernels, copies, memsets), compute_ns, utilization
    gaps: pd.DataFrame                    # idle_gaps()
    busy: Coverage | SpilledCoverage      # busy time of any device (spilled(): in a temporary file)
    busy_by_device: dict[int, Coverage | SpilledCoverage]   # each device's busy time
    kernels_at_copies: dict[int, Coverage]  # union of each device's kernels that overlap its copies (copy_table)
    wrote_spare: bool = False             # the busy union was written over the kernel times (Spare)


class Spare(NamedTuple):
    """Arrays the device pass may write the busy union into: the arrays holding the kernel table's time columns
    (KernelDigest.spare_times), with room before them for the other operations, so that the union's writes never
    pass the kernels still to be read. The kernel times are lost: ready() is called first (the caller's last reads
    of them are done when it returns). A long capture's kernel times and busy union are each hundreds of MiB."""
    start: np.ndarray
    end: np.ndarray
    ready: Callable[[], None]


GAP_COLUMNS = ["device", "start_ns", "end_ns", "duration_ns", "next_correlation_id", "next_pid"]


def device_pass(ops: GpuOps, window: tuple[int, int], min_gap_ns: int, spare: Spare | None = None) -> DevicePass:
    """Per-device utilisation, idle_gaps() and the busy Coverages: each kind of operation sorted on its own (tables
    from a trace are in order already) and their unions merged, so no table of every operation is built. With one
    device, the union is written into `spare` where it holds the kernel times in place."""
    lo, hi = window
    rows, gap_parts = [], []
    by_device: dict[int, Coverage] = {}
    at_copies: dict[int, Coverage] = {}
    devices = ops.devices()
    wrote = False
    for device in devices:
        mine = ops if len(devices) == 1 else ops.on_device(device)
        row, g, by_device[device], at, wrote = _one_device(mine, window, min_gap_ns,
                                                           spare if len(devices) == 1 else None)
        rows.append({"device": device, **row})
        if at is not None:
            at_copies[device] = at
        if len(g):
            g.insert(0, "device", device)
            gap_parts.append(g)
    util = pd.DataFrame(rows, columns=["device", "busy_ns", "compute_ns", "window_ns", "utilization",
                                       "compute_utilization"])
    gap_table = (pd.concat(gap_parts, ignore_index=True).sort_values("start_ns", ignore_index=True) if gap_parts else
                 pd.DataFrame({c: pd.Series(dtype="int64") for c in GAP_COLUMNS}))
    covs = list(by_device.values())
    if len(covs) == 1:  # already disjoint and sorted
        busy = covs[0]
    elif covs:
        busy = Coverage(*union(np.concatenate([c.s for c in covs]), np.concatenate([c.e for c in covs])))
    else:
        busy = Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))
    return DevicePass(util, gap_table, busy, by_device, at_copies, wrote)


SPILL_INTERVALS = 4 * intervals.CHUNK  # a busy union from this many intervals (64 MiB) goes to a temporary file


def spilled(passed: DevicePass, min_intervals: int | None = None) -> DevicePass:
    """The device pass with one device's busy union moved to a temporary file (intervals.SpilledCoverage) where it
    holds at least min_intervals (SPILL_INTERVALS): the steps and the idle attribution read it back a slice at a
    time, so that its 16 B an interval are not held for the rest of the analysis. Several devices: as it is (the
    multi-GPU analysis reads each device's union whole)."""
    least = SPILL_INTERVALS if min_intervals is None else min_intervals
    if len(passed.busy_by_device) != 1 or passed.busy.size < least or isinstance(passed.busy, SpilledCoverage):
        return passed
    busy = SpilledCoverage.of(passed.busy)
    return passed._replace(busy=busy, busy_by_device={d: busy for d in passed.busy_by_device})


def _one_device(mine: GpuOps, window: tuple[int, int], min_gap_ns: int, spare: Spare | None):
    """One device's utilisation row, gaps (with the operations that end them), busy Coverage, kernel time at its
    copies (None without copies or memsets) and whether the union went into `spare`."""
    if any(isinstance(df, SpilledOps) for df in mine.parts.values()):  # a long capture's: read from its files
        return streamed_pass.one_device(mine.parts, window, min_gap_ns)
    lo, hi = window
    timed = {kind: sorted_times(df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), lo, hi)
             for kind, df in mine.parts.items()}
    ks, ke, _ = timed.get("kernel", (np.zeros(0, np.int64), np.zeros(0, np.int64), None))
    at = None
    if set(timed) != {"kernel"}:  # the kernel time at the copies, for their overlap (copy_table)
        cs, ce, _ = timed.get("memcpy", (ks[:0], ke[:0], None))
        at = _kernels_at_copies(ks, ke, cs, ce)
    kinds, total = [(s, e) for s, e, _ in timed.values()], sum(s.size for s, _, _ in timed.values())
    into = _spare_for(spare, ks, ke, total)
    if into is None:
        compute = covered_chunks(in_chunks(ks, ke))
    else:  # the kernels that can end a gap, kept before their times are written over
        compute, resumes = covered_and_resumes(in_chunks(ks, ke), min_gap_ns)
        mine, timed = _kernels_starting_at(resumes, ks, mine, timed)
        spare.ready()
    bs, be = union_chunks(_time_slices(kinds), total, into)
    busy = intervals.length(bs, be)
    row = {"busy_ns": busy, "compute_ns": compute, "window_ns": hi - lo,
           "utilization": busy / (hi - lo) if hi > lo else 0.0,
           "compute_utilization": compute / (hi - lo) if hi > lo else 0.0}
    g = gaps(bs, be, lo, hi, min_gap_ns)
    if len(g):
        for col, values in next_ops(g["end_ns"].to_numpy(), mine.parts, timed).items():
            g[f"next_{col}"] = values
    return row, g, Coverage(bs, be), at, into is not None


def _spare_for(spare: Spare | None, ks: np.ndarray, ke: np.ndarray, total: int):
    """(start, end) of the spare arrays where ks and ke are the kernel times in place inside them, with room for the
    other `total - ks.size` operations before them; else None (no spare, or times clipped or sorted into copies)."""
    if spare is None or not ks.size:
        return None
    at = _index_in(ks, spare.start)
    if at is None or at != _index_in(ke, spare.end) or at < total - ks.size:
        return None
    return spare.start, spare.end


def _index_in(view: np.ndarray, base: np.ndarray) -> int | None:
    """Where a contiguous view lies in base (its first element's index); None where it is not one."""
    if view.dtype != base.dtype or not view.flags.c_contiguous or not base.flags.writeable:
        return None
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if offset < 0 or offset % view.itemsize or offset // view.itemsize + view.size > base.size:
        return None
    return offset // view.itemsize


def _kernels_starting_at(resumes: np.ndarray, ks: np.ndarray, mine: GpuOps, timed: dict) -> tuple[GpuOps, dict]:
    """mine and timed with only the first kernel starting at each of these times as kernels: the only ones that can
    end a gap (a busy hole of min_gap is a kernel-free one too, so the next kernel resumes after a long hole)."""
    rows = np.searchsorted(ks, resumes, side="left")
    kernels = mine.parts["kernel"]
    first = pd.DataFrame({c: kernels[c].to_numpy()[rows] for c in OPS if c in kernels})
    start = first["start_ns"].to_numpy()
    return GpuOps({**mine.parts, "kernel": first}), {**timed, "kernel": (start, start, None)}


def _time_slices(kinds: list[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The intervals of every kind (each sorted by start) as one list in start order, a slice of time at a time: each
    slice holds CHUNK intervals of the largest kind and the others' that start in the same time."""
    kinds = [k for k in kinds if k[0].size]
    if len(kinds) == 1:
        yield from in_chunks(*kinds[0])
        return
    cuts = max((s for s, _ in kinds), key=len)[intervals.CHUNK::intervals.CHUNK]
    bounds = [np.concatenate(([0], np.searchsorted(s, cuts, side="left"), [s.size])) for s, _ in kinds]
    for i in range(cuts.size + 1):
        s = np.concatenate([k[0][b[i]:b[i + 1]] for k, b in zip(kinds, bounds)])
        e = np.concatenate([k[1][b[i]:b[i + 1]] for k, b in zip(kinds, bounds)])
        order = np.argsort(s, kind="stable")  # a few sorted runs: near-linear
        yield s[order], e[order]


def _kernels_at_copies(ks: np.ndarray, ke: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> Coverage:
    """The union of the kernels (sorted by start) that overlap a copy: their overlap
    with each copy is the kernel time inside it. Binary searches find each copy's candidate kernels, and the
    candidate ranges never overlap, so at most every kernel is looked at once (one long kernel under many copies)."""
    if not cs.size or not ks.size:  # new empty arrays: views would keep the kernel table's columns alive
        return Coverage(np.zeros(0, ks.dtype), np.zeros(0, ke.dtype))
    us, ue = union_sorted(cs, ce)
    first = _first_reaching_past(ke, us)  # every kernel before it ended by the copy's start
    last = np.searchsorted(ks, ue, side="left")       # every kernel from it on starts after the copy's end
    first[1:] = np.maximum(first[1:], last[:-1])      # both ascend: below the previous end was looked at already
    n = np.maximum(last - first, 0)
    near = np.repeat(first - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))  # ascending, no repeats
    near = near[Coverage(us, ue).touches(ks[near], ke[near])]
    return Coverage(*union_sorted(ks[near], ke[near]))


def _first_reaching_past(ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each of the sorted times, the first interval by which the latest end so far passes it: the searchsorted
    (side right) of the running maximum of the ends, worked out CHUNK ends at a time (the running maximum of a long
    capture's kernels is hundreds of MiB)."""
    out = np.full(times.size, ends.size, np.int64)
    found, latest = 0, None
    for k in range(0, ends.size, intervals.CHUNK):
        reach = np.maximum.accumulate(ends[k:k + intervals.CHUNK])
        if latest is not None:
            np.maximum(reach, latest, out=reach)
        latest = reach[-1]
        passed = int(np.searchsorted(times, latest, side="left"))  # the times the running maximum passes here
        out[found:passed] = k + np.searchsorted(reach, times[found:passed], side="right")
        found = max(found, passed)
    return out


# --- the declared sections (sections/base.py) -----------------------------------------------------------------------
class PassedOver(NamedTuple):
    """What passed_over() makes, each value kept until its own last reader (sections/base.py)."""
    passed: DevicePass | None                 # the device pass over the window; None without GPU activity
    kernel_time: dict[int, Coverage] | None  # the kernels at the copies; None where the window cuts an operation
    integrity_figures: Future[capture_figures.Figures]  # capture_figures.figures(), in the making
    digest: KernelDigest                      # the kernel digest without its kernel rows
    copy_kernels: pd.DataFrame | None         # the kernel rows the copies need, where the pass gave no kernel time
    kernels_recorded: bool                    # whether the capture recorded kernels


def passed_over(trace: Trace, kernel_digest: KernelDigest, ops: GpuOps, window_ns: tuple[int, int] | None,
                opts: Options, call_counts: Future[dict[str, int]], say: Say) -> PassedOver:
    """The device pass over the window (spilled where it is long), the kernel time at the copies (None where the window
    cuts an operation), the integrity figures in the making (a Future), the digest without its kernel rows, the kernel
    rows the copies need (where the pass gave no kernel time) and whether the capture recorded kernels."""
    kernels_recorded = trace.has(KERNEL_TABLE) or bool(len(trace.device.graph_runs))
    say("computing utilisation and gaps")
    passed, kernel_time, figures = _device_pass(trace, kernel_digest, ops, window_ns, opts.min_gap_ns, call_counts)
    del ops
    passed = spilled(passed) if passed is not None else None  # a long capture's busy union: read back in slices
    if passed is None or len(passed.busy_by_device) <= 1:  # several GPUs: analysis.rank_summary reads the kernels next
        trace.forget("device.kernel_digest", "device.kernels", "device.memsets")  # millions of rows: memory for the rest
    # the copies' kernel time: from the kernels where the device pass did not give it (it never wrote over them then)
    copy_kernels = kernel_digest.ops if kernel_time is None else None
    return PassedOver(passed, kernel_time, figures, kernel_digest.without_ops(), copy_kernels, kernels_recorded)


declare(passed_over, needs=lambda: (TRACE, window.GpuRows.kernel_digest, window.ops, window.window_ns, OPTS,
                                    capture_figures.counting, SAY),
        after=lambda: (window.first_event, setup.setup_draft), provides=PassedOver)


def _device_pass(trace: Trace, digest: KernelDigest, ops: GpuOps, window, min_gap_ns: int, call_counts: Future):
    """The device pass over the window, and the kernel time at the copies (None where the window cuts an operation),
    and the integrity figures in the making (a Future); (None, None, figures) without GPU activity. The integrity
    checks start beside it: their timeline is made first, from the GPU rows' times, which the device pass may then
    write the busy union over (Spare)."""
    _ = trace.nsys_version  # read here once: integrity's thread reads it too
    timeline_made = threading.Event()
    checked = trace.background.submit(_integrity, trace, [capture_figures.gpu_rows(trace)], timeline_made, call_counts)
    if window is None:
        return None, None, checked
    span = ops.span()
    # the window cuts no operation (it spans them all unless the user gave a narrower one): the device pass's kernel
    # time at the copies serves their overlap, and only then may it write over the kernel times
    whole = span is None or (window[0] <= span[0] and span[1] <= window[1])
    spare = Spare(*digest.spare_times, timeline_made.wait) if digest.spare_times and whole else None
    passed = device_pass(ops.inside(*window), window, min_gap_ns, spare)
    return passed, passed.kernels_at_copies if whole else None, checked


def _integrity(trace: Trace, rows: list[dict], timeline_made: threading.Event, call_counts: Future):
    """capture_figures.figures() on a background thread, once the NVTX ranges and call counts it reads are loaded. rows: a
    list holding capture_figures.gpu_rows(), taken out of it so that nothing reads the GPU rows' times once the timeline
    is made (timeline_made is set then, or on an error)."""
    try:
        trace.background.wait("host.nvtx")
        side = capture_figures.gpu_side(trace, rows.pop())
    finally:
        timeline_made.set()
    return capture_figures.figures(trace, side=side, counts=call_counts.result())


def gaps_table(passed: DevicePass | None) -> pd.DataFrame:
    """The idle gaps of the device pass (none without GPU activity)."""
    return passed.gaps if passed is not None else idle_gaps(GpuOps({}), (0, 1), 1)


declare(gaps_table, needs=(PassedOver.passed,))

