"""Each GPU-work call paired with its GPU rows by (process, correlation id), as CUPTI pairs them (capture_figures.py,
when the counts alone do not settle it): the calls without GPU work and the GPU rows without a call, where those sit
(at one edge, as a capture cut from a longer one leaves them, or in the middle, as lost events do), and the ids several
calls share."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..load.btree import In
from ..load.frames import in_sorted, outermost_calls, pid_of
from ..load.trace import Trace
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ApiCallCounts:
    """The CUDA API calls that put work on the GPU, by kind."""
    kernel: ApiCalls
    graph: ApiCalls
    copy: ApiCalls
    memset: ApiCalls


@dataclass(frozen=True, kw_only=True)
class ApiCalls:
    """One kind's API calls and those without a GPU row."""
    calls: int
    without_gpu: int


@dataclass(frozen=True, kw_only=True)
class GpuRowCounts:
    """The GPU rows, by kind."""
    kernel: GpuRows
    copy: GpuRows
    memset: GpuRows


@dataclass(frozen=True, kw_only=True)
class GpuRows:
    """One kind's GPU rows and those without an API call (None: the trace has no runtime API rows to pair them with)."""
    rows: int
    without_api: int | None


@dataclass(frozen=True, kw_only=True)
class SharedCorrelationIds:
    """(process, correlation id) pairs held by several API calls: how many, a few examples."""
    count: int
    examples: tuple[SharedCorrelationId, ...]


@dataclass(frozen=True, kw_only=True)
class SharedCorrelationId:
    """One correlation id held by several API rows of a process."""
    pid: int
    correlation_id: int
    rows: int


@dataclass(frozen=True, kw_only=True)
class PairingEdges:
    """Where the unpaired calls or GPU rows lie (null where none)."""
    calls_without_gpu: str | None
    gpu_without_calls: str | None

# A capture cut out of a longer one (a time slice exported or trimmed by another tool) leaves calls whose GPU work fell
# past its end and GPU work whose calls came before its start: each kind's unpaired rows all at one edge. This share
# of them may stray from the edge and the cut is still named.
EDGE_SLACK = 0.05
KINDS = ["", "kernel", "graph", "copy", "memset", "capture_begin", "capture_end", "captured"]


def api_calls(trace: Trace, kinds: dict[int, str]) -> tuple[pd.DataFrame, dict]:
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


def pairing(trace: Trace, rows: pd.DataFrame, gpu: dict, in_order: dict[str, bool]):
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
