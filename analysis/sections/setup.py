"""The `setup` section: what the capture did before its steady state (sections/steady.py), which the verdict leaves
out: how long, the warm-up steps against the median step, the GPU's work in it, and its causes by what the threads
were doing: CUDA calls (module loading, first allocations, copies, graph capture), ranges (compilation, autotuning)
and OS calls (reading files, starting processes)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..common import cuda_api
from ..common.schema import Part
from ..load.trace import Trace
from . import cpu_work, steady, window
from .base import TRACE, declare
from .program import base_name, per_name
from dataclasses import dataclass, replace
from .cpu_work import CpuSamples


@dataclass(frozen=True, kw_only=True)
class SetupPart:
    """The `setup` section: the set-up and warm-up before the steady state."""
    source: str
    start_ns: int
    end_ns: int
    duration_ns: int
    gpu_busy_ns: int
    kernels: int
    warmup: Warmup
    causes: tuple[SetupCause, ...]
    cpu_samples: CpuSamples


@dataclass(frozen=True, kw_only=True)
class Warmup:
    """The warm-up steps or iterations before the steady state."""
    count: int
    durations_ns: tuple[int, ...]
    median_step_ns: float | None
    kernels_per_iteration: int | None


@dataclass(frozen=True, kw_only=True)
class SetupCause:
    """One kind of set-up work: its time, count and top call or range."""
    cause: str
    kind: str
    ns: int
    count: int
    top: str

NO_SAMPLES = CpuSamples(samples=0, kinds={}, functions=())  # the draft's, until _setup() reads the set-up's samples
CUDA_CAUSES = (
    ("module loading", re.compile(r"^cu(da)?(Module|Library)(Load|GetFunction|GetGlobal)|^cudaGetDriverEntryPoint|"
                                  r"^cuKernelGetFunction|^cudaFuncGetAttributes|^cuModuleLoad")),
    ("CUDA graph capture", re.compile(r"^cu(da)?(StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphUpload)")),
    ("first allocations", re.compile(r"^cu(da)?(Malloc|MemAlloc|HostAlloc|MallocHost|HostRegister|MemCreate|MemMap|"
                                     r"MemAddressReserve|MemSetAccess|Free|MemFree)")),
    ("copies and waits (the model to the GPU)", re.compile(r"^cu(da)?Memcpy|Synchronize(_v\d+)?$")),
    ("autotuning", re.compile(r"^cudnnFind|^cublasLtMatmulAlgo")),
)
RANGE_CAUSES = (
    ("compilation", re.compile(r"compil|inductor|dynamo|triton|xla|\bjit\b|cudagraph", re.I)),
    ("autotuning", re.compile(r"autotun|benchmark", re.I)),
)
OS_CAUSES = (
    ("starting processes", re.compile(r"^(fork|vfork|clone3?|execve|posix_spawnp?|waitpid|wait4)$")),
    ("reading files (model, data)", re.compile(r"^(open|open64|openat|fopen|fopen64|read|pread|pread64|fread)$")),
    ("loading libraries", re.compile(r"^dlopen")),
)
RUNTIME_IN_SPAN = ('SELECT r.nameId AS name_id, COUNT(*) AS count, SUM(MIN(r."end", {hi}) - MAX(r.start, {lo})) AS ns '
                   'FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.start < {hi} AND r."end" > {lo} GROUP BY r.nameId')
OSRT_IN_SPAN = ('SELECT o.nameId AS name_id, COUNT(*) AS count, SUM(MIN(o."end", {hi}) - MAX(o.start, {lo})) AS ns '
                'FROM OSRT_API o WHERE o.start < {hi} AND o."end" > {lo} GROUP BY o.nameId')


def window_source(found) -> str:
    """The window's `source` where the steady state narrowed it."""
    what = (f"step {found.warmup} on" if found.source == "steps" else
            "the end of the program's own warm-up range on" if found.source == "warm-up range" else
            f"the repeating kernel stream ({found.period:,} kernels an iteration), iteration {found.warmup} on")
    flush = ", past the program's own flush of its output pipeline" if getattr(found, "flushed", False) else ""
    return f"steady state: {what}, after the set-up and warm-up{flush} (--whole for the whole capture)"


def part(trace, found, first_event: int | None, nvtx: pd.DataFrame, step_regex: str | None) -> SetupPart | None:
    """The set-up section: from the capture's first event to the steady state's start (its CPU samples none yet:
    _setup() gives them)."""
    lo, hi = (first_event if first_event is not None else found.start_ns), found.start_ns
    if hi <= lo:
        return None
    kernels = trace.device.kernels_touching(lo, hi)
    busy = int((np.minimum(kernels["end_ns"], hi) - np.maximum(kernels["start_ns"], lo)).clip(lower=0).sum()) \
        if len(kernels) else 0
    causes = (_named(trace, RUNTIME_IN_SPAN, "CUPTI_ACTIVITY_KIND_RUNTIME", lo, hi, CUDA_CAUSES, "CUDA calls") +
              _ranges(nvtx, lo, hi, step_regex) +
              _named(trace, OSRT_IN_SPAN, "OSRT_API", lo, hi, OS_CAUSES, "OS calls"))
    return SetupPart(source=found.source, start_ns=int(lo), end_ns=int(hi), duration_ns=int(hi - lo),
                     gpu_busy_ns=busy, kernels=int(len(kernels)),
                     warmup=Warmup(count=found.warmup, durations_ns=tuple(found.warmup_ns),
                                   median_step_ns=found.median_ns, kernels_per_iteration=found.period),
                     causes=tuple(sorted(causes, key=lambda c: -c.ns)), cpu_samples=NO_SAMPLES)


def sampled(part: SetupPart, samples: pd.DataFrame) -> CpuSamples:
    """The launching threads' CPU samples in the set-up by owner (sections/cpu_work.summary): compilation shows as
    the compiler's libraries or Python, model building as PyTorch CPU ops."""
    t = samples["time_ns"].to_numpy() if len(samples) else np.zeros(0, np.int64)
    inside = samples[(t >= part.start_ns) & (t < part.end_ns)] if len(samples) else samples
    counts = inside.groupby(["kind", "label", "library"]).size() if len(inside) else pd.Series(dtype="int64")
    return cpu_work.summary(counts)


def _named(trace, statement: str, table: str, lo: int, hi: int, causes, kind: str) -> list[SetupCause]:
    """Time in the span of the calls of each cause (calls of several threads may overlap: time spent, not elapsed)."""
    if not trace.has(table):
        return []
    rows = trace.query(statement.format(lo=int(lo), hi=int(hi)))
    if rows.empty:
        return []
    texts = trace.strings(int(i) for i in rows["name_id"])
    rows = rows.assign(name=[cuda_api.base_name(texts.get(int(i), "?")) for i in rows["name_id"]])
    return _grouped(rows, causes, kind)


def _grouped(rows: pd.DataFrame, causes, kind: str) -> list[SetupCause]:
    out = []
    for cause, pattern in causes:
        mine = rows[rows["name"].map(lambda n, p=pattern: bool(p.search(str(n))))]
        if mine.empty or int(mine["ns"].sum()) <= 0:
            continue
        mine = mine.sort_values("ns", ascending=False)
        top = ", ".join(f"{n} x{int(c):,}" for n, c in zip(mine["name"].head(3), mine["count"].head(3)))
        out.append(SetupCause(cause=cause, kind=kind, ns=int(mine["ns"].sum()), count=int(mine["count"].sum()),
                              top=top))
        rows = rows.drop(mine.index)
    return out


def _ranges(nvtx: pd.DataFrame, lo: int, hi: int, step_regex: str | None) -> list[SetupCause]:
    """The NVTX ranges in the span that say compilation or autotuning, by cause."""
    if nvtx.empty:
        return []
    d = nvtx[(nvtx["start_ns"].to_numpy() < hi) & (nvtx["end_ns"].to_numpy() > lo)]
    if d.empty:
        return []
    ns = np.minimum(d["end_ns"].to_numpy(), hi) - np.maximum(d["start_ns"].to_numpy(), lo)
    rows = pd.DataFrame({"name": per_name(d["name"], base_name).to_numpy(), "ns": ns})
    rows = rows.groupby("name", as_index=False).agg(ns=("ns", "sum"), count=("ns", "size"))
    return _grouped(rows, RANGE_CAUSES, "ranges")


def setup_draft(trace: Trace, steady: steady.Steady | None, first_event: int | None, nvtx_rows: pd.DataFrame,
                step_regex: str | None, window_ns: tuple[int, int] | None) -> SetupPart | None:
    """The set-up before the steady state (part()), before its CPU samples are known; None without one."""
    return part(trace, steady, first_event, nvtx_rows, step_regex) if steady and window_ns else None


declare(setup_draft, needs=lambda: (TRACE, window.steady_state, window.first_event, window.nvtx_rows, window.step_regex,
                                    window.window_ns))


def _setup(setup_draft: SetupPart | None, samples: pd.DataFrame | None) -> Part:
    """The `setup` section: the set-up with its share of the launching threads' CPU samples."""
    if setup_draft is not None and samples is not None:
        setup_draft = replace(setup_draft, cpu_samples=sampled(setup_draft, samples))
    return Part(setup_draft, {})


declare(_setup, needs=lambda: (setup_draft, cpu_work.samples), part="setup", json_at=10, tables_at=10)
