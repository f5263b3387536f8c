"""Can the trace be trusted? Consistency figures computed from the trace alone.

A capture can lose CUDA events without failing: nsys 2023.4 on a CUDA 13 driver recorded 35 kernels of a
Hugging Face `generate()` call that ran ~9,300 GPU operations, said "Importation succeeded with non-fatal errors",
and exported anyway. Every figure the analysis prints from such a trace is wrong. CUPTI pairs each GPU operation
with the API call that launched it by (process, correlation id), so a complete trace has, for every kernel launch,
copy and memset call, its GPU row, and the other way round; and a program whose CUDA events stop while its NVTX
ranges and OS runtime calls go on lost them.

`figures(trace)` reads the export and gives the counts below, typed (Figures): the only reads of the trace the checks
need. The verdict on them is rules/capture_checks.py's `verdict(figures(trace))`, which returns (the summary carries it as
`trace.integrity`; docs/json-schema.md):

    {"verdict": "complete" | "lossy" | "doubtful",
     "lost_fraction": float in [0, 1] or None,   # share of the GPU operations the trace should hold and does not
     "evidence": str,                            # one sentence: what is missing and how much
     "figures": {...}}                           # the counts behind it (see FIGURES below)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from nsys_transfer.analysis.common import cuda_api, intervals
from nsys_transfer.analysis.load import sql
from nsys_transfer.analysis.load.btree import In
from nsys_transfer.analysis.load.device import UNIFIED_KINDS
from nsys_transfer.analysis.load.frames import in_sorted, outermost_calls, pid_of
from nsys_transfer.analysis.load.ops_store import SpilledOps, distinct
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.sections import capture_activity as activity
from nsys_transfer.analysis.sections.base import declare
from nsys_transfer.analysis.common.spill import Column

# A capture cut out of a longer one (a time slice exported or trimmed by another tool) leaves calls whose GPU work fell
# past its end and GPU work whose calls came before its start: each kind's unpaired rows all at one edge. This share
# of them may stray from the edge and the cut is still named.
EDGE_SLACK = 0.05
KINDS = ["", "kernel", "graph", "copy", "memset", "capture_begin", "capture_end", "captured"]

FIGURES = """figures:
  api: {kind: {calls, without_gpu}} for kind in kernel, graph, copy, memset (calls that returned an error, and
       launches made while their thread captured a CUDA graph, are left out: they run nothing)
  gpu: {kind: {rows, without_api}} for kernel, copy, memset
  expected_ops, missing_ops: kernel+graph+copy calls (the larger of API-side and GPU-side counts), and those without
       their other half
  shared_correlation_ids: {count, examples[]}: (process, correlation id) pairs held by several API rows (the
       outermost call is used everywhere)
  timeline[]: per process with CUDA calls: pid, bin_ns, start_ns, cuda_per_s[], cpu_per_s[], silent_bins,
       cuda_end_ns, cpu_events_after (NVTX+OSRT after its last CUDA event), cpu_share_after
  diagnostics: {cuda_events_collected, cuda_rows_exported, messages[]} from DIAGNOSTIC_EVENT (nsys 2024+)
  correlation_gaps: {largest_gpu_id_gap, checked, processes[]}: holes in a process's correlation ids while it
       kept running (pid, api_rows, id_span, largest_gap, gaps, gaps_while_running, ids_lost, est_missing_calls,
       missing_share); read only when the GPU operations' ids jump by more than GPU_ID_GAP_SUSPECT
  capture: {nsys_version, driver_cuda, nsys_newest_cuda, nsys_older_than_driver}: the exporting nsys against the
       driver the trace recorded (a risk, reported, not a verdict)
  graph_runs: of the kernel rows, CUDA graph launches traced whole (one GPU row each, paired with cudaGraphLaunch)
  migrations: unified-memory migrations (copyKind 11-13): the driver's, on page faults; in no count above
  edges: {calls_without_gpu, gpu_without_calls}: where each kind's unpaired rows sit among the paired ones (start,
       end, middle; unknown where the rows are out of time order; null: none); cut: every kind of them at an edge,
       as a time slice cut from a longer capture leaves them (said instead of "lost", with no nsys-version note)
"""


@dataclass(frozen=True)
class KindCalls:
    """The calls of one GPU-work kind (FIGURES' api) and those without their GPU row."""
    calls: int
    without_gpu: int


@dataclass(frozen=True)
class ProcessTail:
    """One process's GPU operations against its own activity (a FIGURES timeline entry): its activity ("nvtx" or
    "osrt"), how many GPU operations it ran, and its events after its last one (how many, and their share)."""
    pid: int
    activity: str
    gpu_ops: int
    cpu_events_after: int
    cpu_share_after: float


@dataclass(frozen=True)
class IdHoles:
    """Holes in one process's CUDA API correlation ids while it kept running (a FIGURES correlation_gaps process)."""
    pid: int
    api_rows: int
    id_span: int
    largest_gap: int
    gaps_while_running: int
    ids_lost: int
    est_missing_calls: int | None
    missing_share: float


@dataclass(frozen=True)
class Doubt:
    """One of nsys's messages that question the capture's completeness (capture_activity.doubts): what it said (its
    kind, of which events and process, how many times), the process's CUDA calls where counted, and what explains it
    (None: nothing does)."""
    said: str
    kind: str
    events: str
    pid: int | None
    times: int
    cuda_calls: int | None
    explained: str | None


@dataclass(frozen=True)
class Capture:
    """The exporting nsys against the driver the trace recorded (capture_activity.capture)."""
    nsys_version: str
    driver_cuda: str | None
    nsys_newest_cuda: str | None
    nsys_older_than_driver: bool | None


@dataclass(frozen=True)
class Figures:
    """What the integrity checks (rules/capture_checks.py) read, typed, and the figures as the summary reports them.

    reported: the figures (FIGURES), passed on as they are; the checks read the fields below, never the trace.
    expected_api, expected_gpu: the kernel, graph and copy operations the trace should hold by its calls and by its
    GPU rows; missing_api, missing_gpu: those missing their other half (expected_ops, missing_ops: the larger of
    each pair). api: kind -> its calls. tails: per process, its GPU operations against its own activity. id_holes:
    the processes with holes in their correlation ids. cuda_events_collected, cuda_rows_exported: nsys's count of
    CUDA events (None before nsys 2024) and the export's. doubts: nsys's messages questioning the capture. edges: where
    the calls without GPU work and the GPU work without calls sit (start, end, middle, unknown; None: none)."""
    reported: dict
    expected_api: int
    expected_gpu: int
    missing_api: int
    missing_gpu: int
    expected_ops: int
    missing_ops: int
    api: dict[str, KindCalls]
    tails: tuple[ProcessTail, ...]
    id_holes: tuple[IdHoles, ...]
    cuda_events_collected: int | None
    cuda_rows_exported: int
    doubts: tuple[Doubt, ...]
    edges: tuple[str | None, str | None]
    capture: Capture

    @classmethod
    def of(cls, fig: dict, missing_api: int, missing_gpu: int, expected_api: int, expected_gpu: int) -> Figures:
        """The typed figures of the reported ones (FIGURES) and the counts behind them."""
        d = fig["diagnostics"]
        return cls(fig, expected_api, expected_gpu, missing_api, missing_gpu, fig["expected_ops"], fig["missing_ops"],
                   {k: KindCalls(v["calls"], v["without_gpu"]) for k, v in fig["api"].items()},
                   tuple(ProcessTail(tl["pid"], tl["activity"], tl["gpu_ops"], tl["cpu_events_after"],
                                     tl["cpu_share_after"]) for tl in fig["timeline"]),
                   tuple(IdHoles(g["pid"], g["api_rows"], g["id_span"], g["largest_gap"], g["gaps_while_running"],
                                 g["ids_lost"], g["est_missing_calls"], g["missing_share"])
                         for g in fig["correlation_gaps"]["processes"]),
                   d["cuda_events_collected"], d["cuda_rows_exported"],
                   tuple(Doubt(x["said"], x["kind"], x["events"], x["pid"], x["times"], x["cuda_calls"], x["explained"])
                         for x in d.get("doubts", [])),
                   (fig["edges"].get("calls_without_gpu"), fig["edges"].get("gpu_without_calls")),
                   Capture(**fig["capture"]))


def figures(trace: Trace, pairs: bool = False, side: GpuSide | None = None, counts: dict | None = None) -> Figures:
    """The figures the integrity verdict (rules/capture_checks.py) reads (FIGURES).

    pairs: match every call to its GPU rows one by one even where the counts already agree (slower on big traces;
    `analyze-trace --check` does). side, counts: gpu_side(trace) and call_counts(trace), when the caller has them."""
    side = gpu_side(trace) if side is None else side
    gpu = side.ids
    n_gpu = {k: len(v[0]) for k, v in gpu.items()}
    kinds = _name_kinds(trace)
    counts = _call_counts(trace, kinds) if counts is None else counts
    fig: dict = {}
    if (not pairs and "capture_begin" not in kinds.values() and counts["graph"] == 0
            and counts["kernel"] == n_gpu["kernel"] and counts["copy"] == n_gpu["copy"]):
        # as many launch and copy calls as kernels and copies: the usual, complete case, decided from one scan of
        # the runtime table (millions of rows) without loading it. A mismatch, a graph launch or a stream capture
        # sends the trace to the pairing below.
        fig["method"] = "counts"
        fig["api"] = {k: {"calls": counts[k], "without_gpu": max(0, counts[k] - n_gpu.get(k, counts[k]))}
                      for k in ("kernel", "graph", "copy", "memset")}
        fig["gpu"] = {k: {"rows": n, "without_api": max(0, n - counts[k])} for k, n in n_gpu.items()}
        missing_api = missing_gpu = 0
        fig["shared_correlation_ids"] = {"count": 0, "examples": []}
        fig["edges"] = {"calls_without_gpu": None, "gpu_without_calls": None}
    else:
        fig["method"] = "pairs"
        gpu = {k: tuple(np.asarray(a) for a in v) for k, v in gpu.items()}  # pairing reads them whole
        api, fig["shared_correlation_ids"] = _api_calls(trace, kinds)
        fig["api"], fig["gpu"], missing_api, missing_gpu, fig["edges"] = _pairing(trace, api, gpu, side.in_order)
    expected_api = sum(fig["api"][k]["calls"] for k in ("kernel", "graph", "copy"))
    expected_gpu = n_gpu["kernel"] + n_gpu["copy"]
    fig["expected_ops"] = int(max(expected_api, expected_gpu))
    fig["missing_ops"] = int(max(missing_api, missing_gpu))
    fig["timeline"] = side.timeline
    fig["correlation_gaps"] = activity.id_gaps(trace, gpu, side.osrt_starts)
    fig["graph_runs"] = int(len(trace.device.graph_runs))
    fig["migrations"] = int(trace.device.memcpys["copy_kind"].isin(UNIFIED_KINDS).sum())
    # nsys's count of CUDA events holds the migrations and not the graph-trace rows (equal on real 2024 exports)
    fig["diagnostics"] = activity.diagnostics(trace, counts["all"] + sum(n_gpu.values()) + fig["migrations"]
                                      - fig["graph_runs"], {int(p) for v in gpu.values() for p in distinct(v[0])})
    fig["capture"] = activity.capture(trace)
    return Figures.of(fig, missing_api, missing_gpu, expected_api, expected_gpu)


# --- loading --------------------------------------------------------------------------------------------------------
class GpuSide(NamedTuple):
    """What the checks keep of the GPU rows: kind -> (pid, correlation_id) arrays, and the timeline their times make
    (the times are let go after it: a long capture's kernel times are hundreds of MiB)."""
    ids: dict[str, tuple[np.ndarray, np.ndarray]]
    timeline: list[dict]
    osrt_starts: activity.OsrtStarts  # a process's OS call times, read once by the timeline (the id gaps reuse them)
    in_order: dict[str, bool]  # kind -> whether its rows are in start order (their positions then stand for times)


def gpu_side(trace: Trace, gpu: dict | None = None) -> GpuSide:
    """GpuSide of gpu_rows(trace), or of the rows given (the NVTX ranges are read for the timeline)."""
    gpu = gpu_rows(trace) if gpu is None else gpu
    osrt_starts = activity.OsrtStarts(trace)
    in_order = {k: _in_order(v[2]) for k, v in gpu.items()}
    return GpuSide({k: v[:2] for k, v in gpu.items()}, activity.timeline(trace, gpu, osrt_starts), osrt_starts, in_order)


def gpu_rows(trace: Trace) -> dict[str, tuple[np.ndarray, ...]]:
    """kind -> (pid, correlation_id, start_ns, end_ns) arrays of the kernels (with the graph launches traced whole),
    the copies an API call made and the memsets (integers; the kernels' ids and processes in narrow types,
    KernelDigest.ops). Unified-memory migrations are left out: the driver makes them on page faults, with no call
    behind them (correlation id 0)."""
    copies = trace.device.memcpys
    migrations = copies["copy_kind"].isin(UNIFIED_KINDS).to_numpy()
    copies = copies[~migrations] if migrations.any() else copies
    return {kind: tuple(df.column(c) if isinstance(df, SpilledOps) else df[c].to_numpy()
                        for c in ("pid", "correlation_id", "start_ns", "end_ns"))
            for kind, df in (("kernel", trace.device.kernel_digest.ops), ("copy", copies), ("memset", trace.device.memsets))}


def _in_order(starts) -> bool:
    """Whether the start times never go back (an array, or a spilled Column read a chunk at a time)."""
    if not isinstance(starts, Column):
        return bool((starts[1:] >= starts[:-1]).all())
    last = None
    for part in starts.chunks(intervals.CHUNK):
        if (part[1:] < part[:-1]).any() or (last is not None and part[0] < last):
            return False
        last = part[-1]
    return True


def _name_kinds(trace: Trace) -> dict[int, str]:
    """String ids of the API names that put work on the GPU (and of stream-capture calls) -> their kind."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return {}
    rows = trace.query(sql.CUDA_CALL_NAMES)
    return {int(i): k for i, name in zip(rows["id"], rows["value"].astype(str)) for k in [cuda_api.kind(name)] if k}




CALL_KINDS = ("kernel", "graph", "copy", "memset")  # the GPU-work kinds _call_counts counts


@declare("call_counts", needs=("trace",), after=("memcpys",), background=True)
def _counting(trace: Trace):
    """The runtime calls per kind (call_counts), counted on a background thread: a scan on the core the device pass
    leaves free."""
    return trace.background.submit(call_counts, trace)


def call_counts(trace: Trace) -> dict[str, int]:
    """Runtime calls of each GPU-work kind, and all runtime rows (one scan; see _call_counts)."""
    return _call_counts(trace, _name_kinds(trace))


def _call_counts_from_pass(trace: Trace, kinds: dict[int, str]) -> dict[str, int] | None:
    """_call_counts() from the runtime table's one pass (Trace.runtime_pass); None where the fast reader cannot."""
    both = trace.calls.runtime_pass()
    if both is None:
        return None
    out = {"all": sum(both.name_counts.values()), **dict.fromkeys(CALL_KINDS, 0)}
    for name_id, calls in both.name_counts.items():
        if kinds.get(name_id) in CALL_KINDS:
            out[kinds[name_id]] += calls
    return out


def _call_counts(trace: Trace, kinds: dict[int, str]) -> dict[str, int]:
    """Calls of each GPU-work kind, and all runtime rows, in one scan: a single CASE per row packs two counts into
    each 64-bit sum (low and high 32 bits), as fast as a bare scan of the column."""
    out = {"kernel": 0, "graph": 0, "copy": 0, "memset": 0, "all": 0}
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return out

    fast = _call_counts_from_pass(trace, kinds)
    if fast is not None:
        return out | fast

    def packed(low: str, high: str) -> str:
        whens = [f"WHEN {i} THEN {1 if k == low else 1 << 32}" for i, k in kinds.items() if k in (low, high)]
        return sql.PACKED_SUM.format(whens=" ".join(whens)) if whens else "0"
    row = trace.query(sql.PACKED_CALL_COUNTS.format(first=packed("kernel", "copy"),
                                                    second=packed("memset", "graph"))).iloc[0]
    a, b, n = (int(v) if v is not None and v == v else 0 for v in row)
    out.update(kernel=a & 0xFFFFFFFF, copy=a >> 32, memset=b & 0xFFFFFFFF, graph=b >> 32, all=n)
    return out


def _api_calls(trace: Trace, kinds: dict[int, str]) -> tuple[pd.DataFrame, dict]:
    """The GPU-work and stream-capture calls (pid, correlation_id, start_ns, end_ns, global_tid, kind, ok), one per
    (process, correlation id), and the shared-id figure: how many pairs several rows held before that."""
    cols = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "correlation_id": "correlationId",
            "name_id": "nameId"}
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in [*cols, "pid"]}).assign(
            kind=pd.Series(dtype=object), ok=pd.Series(dtype=bool)).drop(columns="name_id"), _shared(None)
    if "returnValue" in trace.columns("CUPTI_ACTIVITY_KIND_RUNTIME"):
        cols["ret"] = "returnValue"
    df = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", cols, (In("nameId", tuple(kinds)),))
    df["pid"] = pid_of(df["global_tid"].to_numpy())
    df["kind"] = pd.Categorical(df.pop("name_id").map(kinds).fillna(""), categories=KINDS)
    df["ok"] = (df.pop("ret").to_numpy() == 0) if "ret" in df else True  # a failed call runs nothing
    key = _key(df["pid"].to_numpy(), df["correlation_id"].to_numpy(), True)
    ordered = np.sort(key)
    dup_keys = ordered[1:][ordered[1:] == ordered[:-1]]
    shared = {"count": 0, "examples": []}
    if dup_keys.size:
        # a nested twin of a call (same process and correlation id) stands for nothing of its own: keep the outermost
        dup = in_sorted(key, dup_keys[np.r_[True, dup_keys[1:] != dup_keys[:-1]]])
        shared = _shared(df[dup])
        df = pd.concat([df[~dup], outermost_calls(df[dup], "start_ns", "end_ns")]).sort_index().reset_index(drop=True)
    capture = _in_capture(df)
    df.loc[capture & df["kind"].isin(["kernel", "copy", "memset"]).to_numpy(), "kind"] = "captured"
    return df, shared


def _in_capture(df: pd.DataFrame) -> np.ndarray:
    """Rows made by a thread between its cudaStreamBeginCapture and cudaStreamEndCapture: recorded into a graph,
    not run (their kernels run later under the cudaGraphLaunch's correlation id)."""
    out = np.zeros(len(df), dtype=bool)
    begins = df[df["kind"] == "capture_begin"]
    if begins.empty:
        return out
    ends = df[df["kind"] == "capture_end"]
    tids, starts = df["global_tid"].to_numpy(), df["start_ns"].to_numpy()
    for tid, b in begins.groupby("global_tid"):
        e = np.sort(ends.loc[ends["global_tid"] == tid, "start_ns"].to_numpy())
        rows = np.flatnonzero(tids == tid)
        t = starts[rows]
        for start in b["start_ns"].to_numpy():
            j = np.searchsorted(e, start)
            stop = e[j] if j < len(e) else np.iinfo(np.int64).max
            out[rows[(t > start) & (t < stop)]] = True
    return out


def _key(pid: np.ndarray, corr: np.ndarray, by_pid: bool) -> np.ndarray:
    return (pid.astype(np.int64) << 40) + corr.astype(np.int64) if by_pid else corr.astype(np.int64)


# --- figures --------------------------------------------------------------------------------------------------------
def _pairing(trace: Trace, rows: pd.DataFrame, gpu: dict, in_order: dict[str, bool]):
    """Each GPU-work call against the GPU rows by (process, correlation id), and each GPU row against the calls.
    Exports without globalPid (pid -1 on GPU rows) pair by correlation id alone."""
    by_pid = all((v[0] >= 0).all() for v in gpu.values())
    gpu_key = {k: _key(v[0], v[1], by_pid) for k, v in gpu.items()}
    gpu_keys = np.sort(np.concatenate(list(gpu_key.values())))
    api_keys = np.sort(_key(rows["pid"].to_numpy(), rows["correlation_id"].to_numpy(), by_pid))
    api_fig, gpu_fig = {}, {}
    missing_api = 0
    for kind in ("kernel", "graph", "copy", "memset"):
        calls = rows[(rows["kind"] == kind).to_numpy() & rows["ok"].to_numpy()]
        without = int((~in_sorted(_key(calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(), by_pid),
                               gpu_keys)).sum())
        api_fig[kind] = {"calls": int(len(calls)), "without_gpu": without}
        if kind != "memset":  # zero-byte memsets run nothing (80 of 94 in the public cuDF export): not evidence
            missing_api += without
    has_runtime = trace.has("CUPTI_ACTIVITY_KIND_RUNTIME")
    orphan = {k: ~in_sorted(v, api_keys) for k, v in gpu_key.items()}
    if has_runtime and any(o.any() for o in orphan.values()):
        # launched through an API not listed here? look at every runtime row before calling a GPU row orphaned
        every = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", {"tid": "globalTid", "corr": "correlationId"})
        all_keys = np.sort(_key(pid_of(every["tid"].to_numpy()), every["corr"].to_numpy(), by_pid))
        orphan = {k: o & ~in_sorted(gpu_key[k], all_keys) for k, o in orphan.items()}
    missing_gpu = 0
    for kind, o in orphan.items():
        gpu_fig[kind] = {"rows": int(len(o)), "without_api": int(o.sum()) if has_runtime else None}
        if kind != "memset" and has_runtime:
            missing_gpu += int(o.sum())
    calls = rows[rows["kind"].isin(["kernel", "graph", "copy"]).to_numpy() & rows["ok"].to_numpy()]
    lonely_calls = ~in_sorted(_key(calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(), by_pid), gpu_keys)
    # the GPU rows' times are gone by now (the device pass may write over them): in start order, positions serve
    sides = {_edge(np.arange(o.size), o) if in_order.get(k) else "unknown" for k, o in orphan.items()
             if k != "memset" and o.any()} if has_runtime else set()
    edges = {"calls_without_gpu": _edge(calls["start_ns"].to_numpy(), lonely_calls),
             "gpu_without_calls": sides.pop() if len(sides) == 1 else ("middle" if sides else None)}
    return api_fig, gpu_fig, missing_api, missing_gpu, edges


def _edge(starts: np.ndarray, lonely: np.ndarray) -> str | None:
    """Where the rows without their other half sit among the rest: 'start' or 'end' when (but for EDGE_SLACK of
    them) they all come before or after every paired row, as a time slice cut from a longer capture leaves them;
    'middle' when they are mixed in, as lost events are; None when there are none."""
    if not lonely.any():
        return None
    if lonely.all():
        return "middle"
    alone, paired = np.sort(starts[lonely]), starts[~lonely]
    k = min(alone.size - 1, int(alone.size * EDGE_SLACK))
    if alone[alone.size - 1 - k] <= paired.min():
        return "start"
    if alone[k] >= paired.max():
        return "end"
    return "middle"


def _shared(dup: pd.DataFrame | None) -> dict:
    """(process, correlation id) pairs held by several GPU-work calls (dup: those calls), with the first few."""
    if dup is None or dup.empty:
        return {"count": 0, "examples": []}
    groups = dup.sort_values("start_ns", kind="stable").groupby(["pid", "correlation_id"], sort=False)
    return {"count": int(groups.ngroups),
            "examples": [{"pid": int(p), "correlation_id": int(c), "rows": int(len(g))}
                         for (p, c), g in list(groups)[:3]]}
