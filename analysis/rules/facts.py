"""The facts the diagnosis rules read, typed: built once per analysis (Facts.of) from the sections' values (their
summaries and tables), so that a rule reads `facts.kernels.median_ns`, never a JSON key. The JSON's shape is read
here and nowhere else under rules/; a rule that needs a value no fact carries adds it to its fact here.

The values are the sections' own, unconverted (an int stays an int, a float a float): the findings' text formats
them, and it must not move."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..sections import capture_figures, cpu_work, idle_summary
from ..sections import program_end as sections_end
from ..sections.copies import MemcpyPart
from ..sections.cpu import StepsPart
from ..sections.gpu_part import GpuPart
from ..sections.idle_summary import IdleAttribution
from ..sections.kernels import KernelsPart
from ..sections.program import ProgramInfo
from ..sections.setup import SetupPart
from ..sections.unified import UnifiedMemory
from ..sections.window import NvtxPart
from .sections_read import Sections


@dataclass(frozen=True)
class DataLoaderWorkers:
    """The DataLoader's worker threads (pt_data_worker) in the trace and the processes they ran in."""
    threads: int
    processes: int


@dataclass(frozen=True)
class Program:
    """What the traced program is (sections/program.describe): its framework (pytorch, openacc or cuda), whether it
    is this toolkit's workload, and its DataLoader workers (None where the trace says nothing of them)."""
    framework: str = "cuda"
    toolkit: bool = False
    loader_workers: DataLoaderWorkers | None = None


@dataclass(frozen=True)
class ProgramEnd:
    """How the program ended (sections/program_end.outcome): failed (None: unknown), its exit status and error, and
    where that was read ('run record' or 'trace')."""
    failed: bool | None
    exit_code: int | None
    error: str | None
    source: str | None

    @staticmethod
    def of(end: dict) -> ProgramEnd:
        """The outcome as the trace section's JSON gives it (`trace.program_end`)."""
        return ProgramEnd(end.get("failed"), end.get("exit_code"), end.get("error"), end.get("source"))


@dataclass(frozen=True)
class Integrity:
    """Whether the capture is whole (rules/capture_checks.verdict): its verdict, whether the trace is a slice cut
    from a longer capture, and the evidence in words."""
    verdict: str | None = None
    cut: bool = False
    evidence: str = "the capture lost CUDA events"
    doubted: tuple[str, ...] = ()  # the events nsys's unexplained doubts are about (CUDA, NVTX, CPU samples, ...)


@dataclass(frozen=True)
class CpuOnly:
    """A capture without GPU work (sections/cpu_only.py): whether the program is a Python one."""
    python: bool


@dataclass(frozen=True)
class Gpu:
    """The GPUs' time in the window (sections/gpu.py): busy (any GPU operation), computing (kernels) and the
    kernels' share of the window, on average over the GPUs; how many GPUs ran work."""
    devices: int
    busy_ns: int | None
    compute_ns: int | None
    compute_utilization: float | None


@dataclass(frozen=True)
class Setup:
    """The synchronising calls before the first step (set-up: model.to(device), warm-up) and inside the steps."""
    sync_calls: int
    sync_calls_in_steps: int


@dataclass(frozen=True)
class Warmup:
    """The warm-up iterations or steps before the steady window (sections/setup.py): how many, and their time."""
    count: int = 0
    ns: int = 0


@dataclass(frozen=True)
class Steps:
    """The steps (sections/steps): how many (0 without steps), and the set-up before the first where it is
    reported apart (None otherwise)."""
    count: int = 0
    setup: Setup | None = None


@dataclass(frozen=True)
class SampledFunction:
    """One of the functions the CPU samples name most (sections/cpu_work.summary): its name, library, kind of work
    and share of the samples."""
    function: str
    library: str | None
    kind: str
    share: float


@dataclass(frozen=True)
class CpuSamples:
    """The launching thread's CPU samples in the idle gaps (sections/cpu_work.summary): how many, each kind of work's
    share (largest first) and the top functions."""
    samples: int = 0
    kinds: dict[str, float] = field(default_factory=dict)
    functions: tuple[SampledFunction, ...] = ()


@dataclass(frozen=True)
class IdleDevice:
    """One device's details of the idle attribution (sections/idle.attribute): the OS calls the launching thread
    waited in for input and in memory mapping, the DataLoader's starved time, the CPU samples in the gaps inside
    ranges and outside them, the CPU work right after a sync, and how many short gaps."""
    input_calls: dict[str, int] = field(default_factory=dict)
    mapping_calls: dict[str, int] = field(default_factory=dict)
    loader_starved_ns: int = 0
    range_samples: CpuSamples | None = None
    cpu_samples: CpuSamples | None = None
    cpu_after_sync_ns: int = 0
    short_idle_intervals: int = 0
    setup_calls: dict[str, int] = field(default_factory=dict)  # idle time inside each one-time CUDA set-up call


@dataclass(frozen=True)
class Idle:
    """The idle attribution's figures beside its table (sections/idle_summary.py): per device, and the launching
    threads' synchronising calls and kernel launches."""
    devices: tuple[IdleDevice, ...] = ()
    sync_calls: int = 0
    sync_blocked_ns: int = 0
    launch_calls: int = 0
    launch_api_ns: int = 0
    setup_call_steps: int = 0  # steps holding a one-time set-up call of the launching threads

    def input_calls(self) -> dict[str, int]:
        """Idle time inside each OS call the thread waited in for input, over the devices, largest first."""
        return _summed(d.input_calls for d in self.devices)

    def mapping_calls(self) -> dict[str, int]:
        """Idle time inside each memory-mapping call, over the devices, largest first."""
        return _summed(d.mapping_calls for d in self.devices)

    def setup_calls(self) -> dict[str, int]:
        """Idle time inside each one-time CUDA set-up call, over the devices, largest first."""
        return _summed(d.setup_calls for d in self.devices)


def _summed(per_device) -> dict[str, int]:
    calls: dict[str, int] = {}
    for d in per_device:
        for k, v in d.items():
            calls[k] = calls.get(k, 0) + v
    return dict(sorted(calls.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True)
class KernelRow:
    """One of the top kernels by time (sections/kernels.py): its name, the name shown, its share of kernel time (%),
    precision and library (empty where the name says none)."""
    name: str
    shown_name: str | None
    pct: float
    precision: str | None
    library: str | None


@dataclass(frozen=True)
class Kernels:
    """The kernels (sections/kernels.py): how many, the median's duration (None without kernels), the CUDA graphs'
    share of kernel time (0 without graphs) and the top kernels by time."""
    count: int = 0
    median_ns: float | None = None
    graph_share: float = 0
    top: tuple[KernelRow, ...] = ()


@dataclass(frozen=True)
class OnDemand:
    """The unified-memory migrations made on demand (page faults): count, bytes, the median's size, the GPU time
    they span and the kernels' time in it."""
    count: int
    bytes: int
    median_bytes: int
    gpu_ns: int
    kernel_overlap_ns: int


@dataclass(frozen=True)
class Unified:
    """Unified-memory migrations (sections/unified.py): those on demand, the on-demand count per direction (htod,
    dtoh, dtod), and whether the export records their causes."""
    on_demand: OnDemand | None
    on_demand_by_direction: dict[str, int]
    cause_recorded: bool


@dataclass(frozen=True)
class Copies:
    """The copies' figures beside the memcpy table (sections/copies.py): the DtoH count, the compute stream (that of
    every kernel; None where there is no one) and the unified-memory migrations (None without)."""
    dtoh_count: int = 0
    compute_stream: int | None = None
    unified: Unified | None = None


@dataclass(frozen=True)
class NvtxRange:
    """An NVTX range name and how many times it ran."""
    name: str
    count: int


@dataclass(frozen=True)
class Facts:
    """Everything the diagnosis rules read of one analysis: the sections' figures, typed, and the tables they judge
    row by row (the copies, the idle attribution, the steps, the synchronising calls' names, the NVTX summary)."""
    program: Program
    program_end: ProgramEnd | None
    profiler: str  # what recorded the trace: "nsys", or "torch.profiler" (a Kineto trace: no OS calls, no samples)
    integrity: Integrity
    cpu_only: CpuOnly | None
    link_gbps: float | None
    window_ns: int
    gpu: Gpu | None
    steps: Steps
    warmup: Warmup
    idle: Idle | None
    kernels: Kernels
    copies: Copies
    nvtx_count: int
    nvtx_ranges: tuple[NvtxRange, ...]
    copy_rows: pd.DataFrame
    idle_rows: pd.DataFrame
    idle_step_rows: pd.DataFrame | None  # the idle attribution inside the steps, where the set-up is reported apart
    step_rows: pd.DataFrame
    sync_names: pd.Series  # calls per synchronising call's name, most first
    nvtx_names: pd.Series  # every NVTX range name of the NVTX summary

    @staticmethod
    def of(doc: Sections, tables: dict[str, pd.DataFrame]) -> Facts:
        """The facts of an analysis's document (its sections' typed values: analysis/document.Document, made by
        summary.analyze_sections) and tables."""
        trace, nvtx = doc.trace, doc.nvtx
        return Facts(
            program=_program(trace.program), program_end=_program_end(trace.program_end),
            profiler=str(trace.profiler or "nsys"),
            integrity=_integrity(trace.integrity), cpu_only=CpuOnly(bool(trace.cpu_only.python)) if trace.cpu_only
            else None, link_gbps=trace.link.gbps,
            window_ns=int((doc.window.duration_ns if doc.window else 0) or 0),
            gpu=_gpu(doc.gpu), steps=_steps(doc.steps),
            warmup=_warmup(doc.setup), idle=_idle(doc.idle),
            kernels=_kernels(doc.kernels), copies=_copies(doc.memcpy),
            nvtx_count=(nvtx.count if nvtx else 0) or 0,
            nvtx_ranges=_nvtx_ranges(nvtx, tables.get("nvtx_summary")),
            copy_rows=tables.get("memcpy", pd.DataFrame()),
            idle_rows=tables.get("idle", pd.DataFrame(columns=["cause", "subject", "idle_ns", "device"])),
            idle_step_rows=tables.get("idle_steps"),
            step_rows=tables.get("steps", pd.DataFrame()),
            sync_names=tables.get("sync_names", pd.Series(dtype="int64")),
            nvtx_names=tables.get("nvtx_summary", pd.DataFrame(columns=["name"]))["name"])


def _nvtx_ranges(nvtx: NvtxPart | None, summary: pd.DataFrame | None) -> tuple[NvtxRange, ...]:
    """Every NVTX range name and its count: from the NVTX summary's table, where the JSON shows only the costliest
    20 (a loop that names each step, `step 0` .. `step 99`, would push a small range such as the OutputPipeline's
    drain out of them, and a rule reading the JSON would not see it)."""
    if summary is not None and len(summary) and {"name", "count"} <= set(summary.columns):
        return tuple(NvtxRange(str(n), int(c)) for n, c in zip(summary["name"], summary["count"]))
    return tuple(NvtxRange(r.name, r.count) for r in (nvtx.ranges if nvtx else ()))


def _program(p: ProgramInfo | None) -> Program:
    if not p:
        return Program()
    w = p.dataloader_workers
    return Program(str(p.framework), bool(p.toolkit), DataLoaderWorkers(w.threads, w.processes) if w else None)


def _program_end(e: sections_end.ProgramEnd | None) -> ProgramEnd | None:
    return ProgramEnd(e.failed, e.exit_code, e.error, e.source) if e else None


def _gpu(g: GpuPart | None) -> Gpu | None:
    return Gpu(len(g.devices), g.busy_ns, g.compute_ns, g.compute_utilization) if g else None


def _integrity(i: capture_figures.Integrity | None) -> Integrity:
    if not i:
        return Integrity()
    doubts = i.figures.diagnostics.doubts if i.figures else ()
    return Integrity(i.verdict, bool(i.figures.cut if i.figures else False), i.evidence,
                     tuple(sorted({str(d.events) for d in doubts if not d.explained})))


def _warmup(s: SetupPart | None) -> Warmup:
    w = s.warmup if s else None
    return Warmup(int(w.count or 0), int(sum(w.durations_ns or ()))) if w else Warmup()


def _steps(s: StepsPart | None) -> Steps:
    setup = s.setup if s else None
    return Steps(int((s.count if s else 0) or 0),
                 Setup(setup.sync_calls, setup.sync_calls_in_steps) if setup else None)


def _samples(s: cpu_work.CpuSamples | None) -> CpuSamples | None:
    if not s:
        return None
    return CpuSamples(s.samples, dict(s.kinds), tuple(SampledFunction(f.function, f.library, f.kind, f.share)
                                                      for f in s.functions))


def _idle_device(d: idle_summary.IdleDevice) -> IdleDevice:
    return IdleDevice(d.input_calls, d.mapping_calls, d.loader_starved_ns, _samples(d.range_samples),
                      _samples(d.cpu_samples), d.cpu_after_sync_ns, d.short_idle_intervals, d.setup_calls)


def _idle(i: IdleAttribution | None) -> Idle | None:
    if not i:
        return None
    return Idle(tuple(_idle_device(d) for d in (i.devices or {}).values()), i.sync_calls or 0,
                i.sync_blocked_ns or 0, i.launch_calls or 0, i.launch_api_ns or 0, i.setup_call_steps or 0)


def _kernels(k: KernelsPart | None) -> Kernels:
    if not k:
        return Kernels()
    top = tuple(KernelRow(r.name, r.shown_name, r.pct, r.precision, r.library) for r in k.top)
    return Kernels(k.count, k.median_ns, (k.graphs.share_of_kernel_time if k.graphs else 0) or 0, top)


def _unified(u: UnifiedMemory) -> Unified:
    od = u.on_demand
    by_direction = {k: m.on_demand for k in ("htod", "dtoh", "dtod") if (m := getattr(u, k)) and m.on_demand}
    return Unified(OnDemand(od.count, od.bytes, od.median_bytes, od.gpu_ns, od.kernel_overlap_ns)
                   if od and od.count else None, by_direction, bool(u.cause_recorded))


def _copies(m: MemcpyPart | None) -> Copies:
    if not m:
        return Copies()
    return Copies(m.dtoh.count, m.compute_stream, _unified(m.unified) if m.unified else None)


# --- what the multi-GPU and scaling rules read (rules/ranks.py) besides the per-GPU rows ---------------------------

@dataclass(frozen=True)
class HostDtoh:
    """One host's DtoH copies as the host sees them (sections/hosts.py): the peak and mean GB/s over its GPUs'
    span, and the capacity they share with where that figure comes from."""
    peak_gbps: float
    mean_gbps: float
    capacity_gbps: float
    capacity_source: str

    @staticmethod
    def of(summary: dict) -> HostDtoh:
        """The figures of a host's DtoH summary (sections/hosts.HostLoad.summary)."""
        return HostDtoh(summary["peak_gbps"], summary["mean_gbps"], summary["capacity_gbps"],
                        summary["capacity_source"])


@dataclass(frozen=True)
class CpuLoad:
    """How busy the CPUs the ranks share were over a run (a run record's host_cpu): how many, the busy share and
    the busy cores."""
    cpus: int
    busy: float
    busy_cores: float

    @staticmethod
    def of(host_cpu: dict | None) -> CpuLoad | None:
        """The figures of a run record's host_cpu; None without one."""
        return CpuLoad(host_cpu["cpus"], host_cpu["busy"], host_cpu["busy_cores"]) if host_cpu else None
