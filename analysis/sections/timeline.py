"""The launching thread and its GPU over a few steady iterations, as a replay needs them (analysis/replay): every CUDA
call of the thread in order, the host time before each call (split into waits, memory mapping, sleep and CPU work),
the GPU operations each call issued, and what each operation and each blocking call waited for in the capture.

    host   [gap 0][call 0][gap 1][call 1 (sync)....][gap 2][call 2] ... [tail]
    GPU            (op 0: launched by call 0, starts L later)   op 1 ends -> call 1 returns `tail` later

What each waited for is read from the capture itself, so that no stream or event bookkeeping is guessed
(timeline_waits.py says how).

The span replayed is the steady window's start and as many whole iterations as hold MAX_CALLS calls (at least
MIN_ITERATIONS): the steady state repeats, so a few iterations say what all of them do, at a cost that does not grow
with the capture."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..common import cuda_api
from ..common.intervals import Coverage, union
from ..load.btree import In, Touches
from ..load.frames import pid_of
from ..load.ops_store import SpilledOps
from ..load.trace import Trace
from . import code_lines, launchers, program, steady, trace_info, window
from .base import SAY, TRACE, Say, declare
from .code_lines import CodeLines
from .trace_info import TraceInfo
from .machine import cpu_cores
from .idle import MAPPING_CALLS, SLEEP_CALLS, WAIT_CALLS
from .timeline_waits import infer_waits

MAX_CALLS = 4_000        # calls replayed at most (whole iterations up to this many, at least MIN_ITERATIONS)
MAX_WHOLE_CALLS = 50_000  # a window without iterations is replayed whole up to this many calls
MIN_ITERATIONS = 3       # iterations replayed at least, where the window holds them
BLOCKING = re.compile(r"^cu(da)?(Stream|Device|Event|Ctx|Thread)Synchronize|^cu(da)?Memcpy|^cu(da)?Memset(?!.*Async)|"
                      r"^cu(da)?(Free|MemFree|FreeHost|HostUnregister|HostRegister|Malloc|HostAlloc)")
CALL_KINDS = ("other", "launch", "copy", "memset", "sync", "graph")
QUEUE_NS = 1_000_000_000  # operations are read this far past the span too: the span's calls queue work that runs later


@dataclass(frozen=True)
class Timeline:
    """The replayed span [lo, hi) (trace ns) and what happened in it. Calls (n, in order) and the host time before
    each and after the last (n + 1: gaps); GPU operations (m) with the call that issued each (-1: another thread's);
    what the capture shows each waited for. Times in ns. samples: the launching thread's Python stack samples in the
    span (start_ns, end_ns, stack) with code: the stacks they index (None without); ranges: the thread's user NVTX
    ranges in the span (name, start_ns, end_ns)."""
    lo: int
    hi: int
    iterations: float
    window_iterations: float
    counted: bool  # the iterations were counted (steps, the kernel stream's period); else the span counts as one
    call_start: np.ndarray
    call_end: np.ndarray
    call_kind: np.ndarray
    gap_start: np.ndarray
    gap_end: np.ndarray
    wait_ns: np.ndarray
    mapping_ns: np.ndarray
    sleep_ns: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    op_stream: np.ndarray
    op_kind: np.ndarray
    op_bytes: np.ndarray
    op_copy: np.ndarray
    op_host_memory: np.ndarray
    op_call: np.ndarray
    op_latency: np.ndarray
    op_after: np.ndarray
    call_awaits: np.ndarray
    call_tail: np.ndarray
    queued_ns: float
    samples: pd.DataFrame | None
    code: CodeLines | None
    ranges: pd.DataFrame
    cores: int | None
    link_gbps: float | None
    sampled: bool = False  # nsys sampled the CPU (its backtraces cost the CPU work more than the calls' hooks do)

    @property
    def gap_ns(self) -> np.ndarray:
        """The host time before each call, and after the last."""
        return self.gap_end - self.gap_start

    @property
    def cpu_ns(self) -> np.ndarray:
        """The part of each gap the thread spent neither waiting, mapping memory nor asleep: its own work."""
        return np.maximum(self.gap_ns - self.wait_ns - self.mapping_ns - self.sleep_ns, 0)

    @property
    def duration_ns(self) -> int:
        """The span's length."""
        return self.hi - self.lo

    def cpu_within(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Of each gap's own work, the part inside these intervals (any order, may overlap)."""
        u = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        if u[0].size == 0:
            return np.zeros(self.gap_start.size, np.int64)
        return np.minimum(Coverage(*u).within(self.gap_start, self.gap_end), self.cpu_ns)

    def calls_within(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Whether each call starts inside these intervals."""
        u = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        if u[0].size == 0:
            return np.zeros(self.call_start.size, bool)
        return Coverage(*u).at(self.call_start) > Coverage(*u).at(self.call_start - 1)


def call_kinds(names: pd.Series) -> np.ndarray:
    """Each call's kind (CALL_KINDS): a kernel launch, a copy, a memset, a synchronize, a graph launch, other."""
    def kind(name: str) -> str:
        base = cuda_api.VERSION_SUFFIX.sub("", name)
        if cuda_api.SYNC.match(name):
            return "sync"
        for k, prefixes in (("launch", cuda_api.KERNEL_LAUNCH), ("graph", cuda_api.GRAPH_LAUNCH),
                            ("copy", cuda_api.COPY), ("memset", cuda_api.MEMSET)):
            if base.startswith(prefixes):
                return k
        return "other"
    return program.per_name(names, kind).to_numpy(object)


def blocking_calls(names: pd.Series) -> np.ndarray:
    """Whether each call can block the host until the GPU catches up (BLOCKING): which of them did is read from the
    capture (timeline_waits.infer_waits)."""
    return program.per_name(names, lambda n: bool(BLOCKING.match(n))).to_numpy(bool)


def _span(window: tuple[int, int], step_rows: pd.DataFrame, calls: pd.DataFrame,
          period: int | None) -> tuple[int, float | None, float | None]:
    """(hi, iterations in [lo, hi), iterations in the window where known): the replayed span's end at the start of an
    iteration, holding at least MIN_ITERATIONS of them and at most MAX_CALLS calls where they allow. Iterations are
    the steps; else the kernel stream's (every `period` kernel launches: the counts are then the caller's); else the
    window, its first MAX_WHOLE_CALLS calls at most, no counts."""
    lo, hi = window
    steps = step_rows[(step_rows["start_ns"] >= lo) & (step_rows["start_ns"] < hi)] if len(step_rows) else step_rows
    if len(steps) >= 2:
        st = np.sort(steps["start_ns"].to_numpy(np.int64))
        calls_before = np.searchsorted(calls["start_ns"].to_numpy(np.int64), st[1:], side="left")  # by step k's end
        k = max(MIN_ITERATIONS, int(np.searchsorted(calls_before, MAX_CALLS, side="right")))
        k = min(k, st.size - 1)
        return int(st[k]), float(k), float(st.size)
    if period:
        launches = np.cumsum(call_kinds(calls["name"]) == "launch")
        per = max(int(np.searchsorted(launches, period, side="left")) + 1, 1)  # calls an iteration, about
        k = max(MIN_ITERATIONS, MAX_CALLS // per)
        cut = int(np.searchsorted(launches, k * period, side="left")) + 1  # after the launch that ends iteration k
        if cut < len(calls):
            return int(calls["start_ns"].iloc[cut]), None, None
        return hi, None, None
    if len(calls) <= MAX_WHOLE_CALLS:  # no iterations to extrapolate from: the window whole, where it is not huge
        return hi, None, None
    return int(calls["start_ns"].iloc[MAX_WHOLE_CALLS]), None, None


def read(trace, window: tuple[int, int], tids: dict, step_rows: pd.DataFrame, nvtx_rows: pd.DataFrame,
         period: int | None, code: CodeLines | None, link_gbps: float | None) -> Timeline | None:
    """The Timeline of the steady window's first iterations on its busiest launching thread; None where the trace
    has no CUDA calls of a launching thread in the window."""
    thread, calls = _busiest_thread_calls(trace, window, tids.get("all") or set(), _enough(step_rows, window, period))
    if calls is None or calls.empty:
        return None
    hi, iterations, window_iterations = _span(window, step_rows, calls, period)
    lo = window[0]
    calls = calls[calls["start_ns"] < hi].reset_index(drop=True)
    ops = _ops(trace, lo, hi + max(hi - lo, QUEUE_NS), calls)
    ops = ops[(ops["call"] >= 0) | ((ops["end_ns"] > lo) & (ops["start_ns"] < hi))].reset_index(drop=True)
    counted = iterations is not None or bool(period)
    if iterations is None:  # iterations of the kernel stream, its kernels over its period; else one, the span
        kernels = int(((ops["kind"] == "kernel") & (ops["call"] >= 0)).sum())
        iterations = kernels / period if period else 1.0
        window_iterations = iterations * (window[1] - lo) / max(hi - lo, 1)
    t = {"call_start": calls["start_ns"].to_numpy(np.int64), "call_end": calls["end_ns"].to_numpy(np.int64),
         "blocking": blocking_calls(calls["name"]), "op_start": ops["start_ns"].to_numpy(np.int64),
         "op_end": ops["end_ns"].to_numpy(np.int64), "op_stream": ops["stream"].to_numpy(np.int64),
         "op_call": ops["call"].to_numpy(np.int64)}
    gap_start = np.r_[lo, t["call_end"]]
    gap_end = np.maximum(np.r_[t["call_start"], hi], gap_start)
    waits, maps, sleeps = _os_time(trace, thread, lo, hi, gap_start, gap_end)
    inferred = infer_waits(t)
    return Timeline(lo=lo, hi=hi, iterations=max(iterations, 1e-9), window_iterations=max(window_iterations, 1e-9),
                    counted=counted,
                    call_start=t["call_start"], call_end=t["call_end"], call_kind=call_kinds(calls["name"]),
                    gap_start=gap_start, gap_end=gap_end, wait_ns=waits, mapping_ns=maps, sleep_ns=sleeps,
                    op_start=t["op_start"], op_end=t["op_end"], op_stream=t["op_stream"],
                    op_kind=ops["kind"].to_numpy(object), op_bytes=ops["bytes"].to_numpy(np.int64),
                    op_copy=ops["copy_kind"].to_numpy(object), op_host_memory=ops["host_kind"].to_numpy(object),
                    op_call=t["op_call"], **inferred, samples=_samples(code, thread, lo, hi), code=code,
                    ranges=_user_ranges(nvtx_rows, thread, lo, hi, step_rows), cores=cpu_cores(trace),
                    link_gbps=link_gbps, sampled=_sampled(trace))


def _busiest_thread_calls(trace, window: tuple[int, int], tids, enough) -> tuple[int | None, pd.DataFrame | None]:
    """The launching thread with the most CUDA calls in the window's first part, and its calls from the window's
    start: read over a growing span until enough(its calls) or the whole window (a long capture's window is never read
    whole)."""
    lo, hi = window
    if not tids:
        return None, None
    span = max((hi - lo) // 64, 1_000_000)
    while True:
        end = min(hi, lo + span)
        calls = trace.calls.thread_calls(tids, lo, end)
        if end >= hi or (len(calls) and enough(_busiest(calls))):
            break
        span *= 4
    if calls.empty:
        return None, None
    mine = _busiest(calls)
    return int(mine["global_tid"].iloc[0]), mine


def _busiest(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls of the thread that made the most of them."""
    thread = int(calls["global_tid"].value_counts().index[0])
    return calls[calls["global_tid"] == thread].reset_index(drop=True)


def _enough(step_rows: pd.DataFrame, window: tuple[int, int], period: int | None):
    """Whether the calls read hold what _span needs: MIN_ITERATIONS + 1 steps and MAX_CALLS calls; the kernel
    stream's (MIN_ITERATIONS + 1) x period launches and MAX_CALLS calls; else MAX_WHOLE_CALLS calls."""
    st = np.sort(step_rows["start_ns"].to_numpy(np.int64)) if len(step_rows) else np.zeros(0, np.int64)
    st = st[(st >= window[0]) & (st < window[1])]
    if st.size >= 2:
        last = st[min(MIN_ITERATIONS + 1, st.size - 1)]
        return lambda c: len(c) >= 2 * MAX_CALLS and int(c["start_ns"].iloc[-1]) >= last
    if period:
        return lambda c: len(c) >= 2 * MAX_CALLS and \
            int((call_kinds(c["name"]) == "launch").sum()) >= (MIN_ITERATIONS + 1) * period
    return lambda c: len(c) >= MAX_WHOLE_CALLS


OP_COLUMNS = ["start_ns", "end_ns", "stream", "kind", "bytes", "copy_kind", "host_kind", "call"]


def _ops(trace, lo: int, hi: int, calls: pd.DataFrame) -> pd.DataFrame:
    """The GPU operations overlapping [lo, hi): kernels (graph launches too), copies, memsets; each with the index of
    the call that issued it (-1: not one of these calls), in start order. The caller keeps those of its calls and
    the others that ran in its span."""
    pid = pid_of(calls["global_tid"].to_numpy(np.int64))
    index = pd.Series(np.arange(len(calls)), index=pd.MultiIndex.from_arrays([pid, calls["correlation_id"].to_numpy()]))
    parts = []
    k = trace.device.kernels_touching(lo, hi)
    if len(k):
        parts.append(pd.DataFrame({"start_ns": k["start_ns"], "end_ns": k["end_ns"], "stream": k["stream"],
                                   "kind": "kernel", "bytes": 0, "copy_kind": "", "host_kind": "",
                                   "pid": k["pid"], "correlation_id": k["correlation_id"]}))
    c = _touching(trace.device.memcpys, lo, hi)
    if len(c):
        host = c["dst_kind"].where(c["copy_kind"] == "DtoH", c["src_kind"]).astype(str)
        parts.append(pd.DataFrame({"start_ns": c["start_ns"], "end_ns": c["end_ns"], "stream": c["stream"],
                                   "kind": "copy", "bytes": c["bytes"], "copy_kind": c["copy_kind"].astype(str),
                                   "host_kind": host, "pid": c["pid"], "correlation_id": c["correlation_id"]}))
    s = _touching(trace.device.memsets, lo, hi)
    if len(s):
        parts.append(pd.DataFrame({"start_ns": s["start_ns"], "end_ns": s["end_ns"],
                                   "stream": s["stream"] if "stream" in s else -1, "kind": "memset", "bytes": 0,
                                   "copy_kind": "", "host_kind": "", "pid": s["pid"],
                                   "correlation_id": s["correlation_id"]}))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c not in ("kind", "copy_kind", "host_kind") else object)
                             for c in OP_COLUMNS})
    ops = pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable")
    keys = pd.MultiIndex.from_arrays([ops["pid"].to_numpy(np.int64), ops["correlation_id"].to_numpy(np.int64)])
    ops["call"] = index.reindex(keys).fillna(-1).astype(np.int64).to_numpy()
    return ops[OP_COLUMNS].reset_index(drop=True)


def _touching(df: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    if isinstance(df, SpilledOps):  # a long capture's table in temporary files: never read whole
        return df.touching(lo, hi)
    if df is None or len(df) == 0:
        return df.iloc[0:0] if df is not None else pd.DataFrame()
    keep = (df["end_ns"].to_numpy() > lo) & (df["start_ns"].to_numpy() < hi)
    return df[keep]


def _os_time(trace, thread: int, lo: int, hi: int, gs: np.ndarray, ge: np.ndarray) -> tuple[np.ndarray, ...]:
    """The time of each gap the thread spent in waiting, mapping and sleeping OS calls."""
    zero = np.zeros(gs.size, np.int64)
    if not trace.has("OSRT_API"):
        return zero, zero.copy(), zero.copy()
    filters = (Touches(np.array([lo]), np.array([hi])), In("globalTid", (int(thread),)))
    rows = [c for c in trace.osrt.zone_chunks(lambda z: filters if z.start_ns is None or
                                              (z.start_ns < hi and (z.end_ns or hi) > lo - 10**9) else None)]
    if not rows:
        return zero, zero.copy(), zero.copy()
    calls = pd.concat(rows, ignore_index=True)
    names = calls["name"].astype(str)

    def time_in(pattern: re.Pattern) -> np.ndarray:
        m = names.str.match(pattern).to_numpy(bool)
        u = union(calls["start_ns"].to_numpy()[m], calls["end_ns"].to_numpy()[m])
        return Coverage(*u).within(gs, ge) if u[0].size else zero.copy()
    return time_in(WAIT_CALLS), time_in(MAPPING_CALLS), time_in(SLEEP_CALLS)


def _samples(code: CodeLines | None, thread: int, lo: int, hi: int) -> pd.DataFrame | None:
    """The thread's Python stack samples overlapping [lo, hi) (start_ns, end_ns, stack), None without stacks."""
    stacks = code.stacks if code is not None else None
    if stacks is None:
        return None
    s = stacks.samples
    mine = s[(s["pid"] == int(pid_of(np.array([thread]))[0])) & (s["tid"] == (int(thread) & 0xFFFFFF)) &
             (s["end_ns"] > lo) & (s["start_ns"] < hi)]
    return mine[["start_ns", "end_ns", "stack"]].reset_index(drop=True) if len(mine) else None


def _user_ranges(nvtx: pd.DataFrame, thread: int, lo: int, hi: int, step_rows: pd.DataFrame) -> pd.DataFrame:
    """The thread's NVTX ranges in [lo, hi) that mark phases: not steps, not PyTorch operators (name, start_ns,
    end_ns)."""
    cols = ["name", "start_ns", "end_ns"]
    if nvtx is None or nvtx.empty:
        return pd.DataFrame(columns=cols)
    d = nvtx[(nvtx["global_tid"] == thread) & (nvtx["end_ns"] > lo) & (nvtx["start_ns"] < hi)]
    if d.empty:
        return pd.DataFrame(columns=cols)
    keep = ~program.per_name(d["name"], program.is_operator_range).to_numpy(bool)
    if len(step_rows):
        keep &= ~d.index.isin(step_rows.index)
    d = d[keep]
    return pd.DataFrame({"name": program.per_name(d["name"], program.family).to_numpy(object),
                         "start_ns": d["start_ns"].to_numpy(np.int64), "end_ns": d["end_ns"].to_numpy(np.int64)})


def _sampled(trace) -> bool:
    """Whether nsys sampled the CPU in this capture (its sampling table holds rows)."""
    return trace.has("COMPOSITE_EVENTS") and trace.connection().execute(
        "SELECT 1 FROM COMPOSITE_EVENTS LIMIT 1").fetchone() is not None


def timeline(trace: Trace, window_ns: tuple[int, int] | None, tids: dict, step_rows: pd.DataFrame,
             nvtx_rows: pd.DataFrame, steady: steady.Steady | None, code_lines: CodeLines, trace_info: TraceInfo,
             say: Say) -> Timeline | None:
    """The steady iterations the predictions replay (read()); None without GPU work or launching threads."""
    if window_ns is None or not tids or not tids.get("all"):
        return None
    say("reading the steady iterations to replay")
    return read(trace, window_ns, tids, step_rows, nvtx_rows, getattr(steady, "period", None), code_lines,
                trace_info.link.gbps)


declare(timeline, needs=lambda: (TRACE, window.window_ns, launchers.tids, window.step_rows, window.nvtx_rows,
                                 window.steady_state, code_lines.program_lines, trace_info.part, SAY))
