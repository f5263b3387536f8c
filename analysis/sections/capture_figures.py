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

from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..common import cuda_api, intervals
from ..load import sql
from ..load.device import UNIFIED_KINDS
from ..load.ops_store import SpilledOps, distinct
from ..load.trace import Trace
from . import capture_activity as activity
from . import capture_messages as messages
from . import window
from .base import TRACE, declare
from .capture_pairing import api_calls, pairing
from ..common.spill import Column
from .capture_activity import CorrelationGaps, ProcessActivity
from .capture_messages import CaptureVersions, NsysDiagnostics
from .capture_pairing import ApiCallCounts, GpuRowCounts, PairingEdges, SharedCorrelationIds


@dataclass(frozen=True, kw_only=True)
class Integrity:
    """Whether the trace can be trusted: the verdict (rules/capture_checks.py), the share lost, the one sentence, the
    figures."""
    verdict: str
    lost_fraction: float | None
    evidence: str
    figures: IntegrityFigures


@dataclass(frozen=True, kw_only=True)
class IntegrityFigures:
    """The counts behind the integrity verdict (FIGURES above), with `cut`."""
    method: str
    api: ApiCallCounts
    gpu: GpuRowCounts
    shared_correlation_ids: SharedCorrelationIds
    edges: PairingEdges
    expected_ops: int
    missing_ops: int
    timeline: tuple[ProcessActivity, ...]
    correlation_gaps: CorrelationGaps
    graph_runs: int
    migrations: int
    diagnostics: NsysDiagnostics
    capture: CaptureVersions
    cut: bool


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
    """One of nsys's messages that question the capture's completeness (capture_messages.doubts): what it said (its
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
    """The exporting nsys against the driver the trace recorded (capture_messages.capture)."""
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
        api, shared = api_calls(trace, kinds)
        fig["api"], fig["gpu"], missing_api, missing_gpu, edges = pairing(trace, api, gpu, side.in_order)
        fig["shared_correlation_ids"], fig["edges"] = shared, edges  # the keys in one order, either way (Integrity)
    expected_api = sum(fig["api"][k]["calls"] for k in ("kernel", "graph", "copy"))
    expected_gpu = n_gpu["kernel"] + n_gpu["copy"]
    fig["expected_ops"] = int(max(expected_api, expected_gpu))
    fig["missing_ops"] = int(max(missing_api, missing_gpu))
    fig["timeline"] = side.timeline
    fig["correlation_gaps"] = activity.id_gaps(trace, gpu, side.osrt_starts)
    fig["graph_runs"] = int(len(trace.device.graph_runs))
    fig["migrations"] = int(trace.device.memcpys["copy_kind"].isin(UNIFIED_KINDS).sum())
    # nsys's count of CUDA events holds the migrations and not the graph-trace rows (equal on real 2024 exports)
    fig["diagnostics"] = messages.diagnostics(trace, counts["all"] + sum(n_gpu.values()) + fig["migrations"]
                                      - fig["graph_runs"], {int(p) for v in gpu.values() for p in distinct(v[0])})
    fig["capture"] = messages.capture(trace)
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


def counting(trace: Trace) -> Future[dict[str, int]]:
    """The runtime calls per kind (call_counts), counted on a background thread: a scan on the core the device pass
    leaves free."""
    return trace.background.submit(call_counts, trace)


declare(counting, needs=(TRACE,), after=lambda: (window.GpuRows.memcpys,), background=True)


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
