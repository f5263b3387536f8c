"""The `trace` section: what the trace is -- its counts, GPUs, host link and program, and for a capture without GPU
work (a CPU-only program, a machine without a GPU) what its OS calls took instead. Its integrity verdict and its
count of OS calls are set by summary.analyze_sections, last (the verdict is a rule's; the count follows the scoped reads)."""
from __future__ import annotations

import pandas as pd

from ..load import sql
from ..load.kernel_digest import KernelDigest
from ..load.trace import Trace
from ..common.schema import Part, rows_as
from . import copies, cpu_only, gpu, gpu_part, program, program_end, window
from .base import OPTS, TRACE, Options, declare
from .machine import host_link
from dataclasses import dataclass
from .capture_figures import Integrity
from .cpu_only import CpuOnly
from .machine import HostLink
from .program import ProgramInfo
from .program_end import ProgramEnd
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class TraceInfo:
    """The `trace` object: what the trace is (its counts, GPUs, integrity, host link, program and how it ended)."""
    path: str
    nsys_version: str
    gpus: tuple[TraceGpu, ...]
    counts: TraceCounts
    integrity: Integrity
    os_runtime: tuple[OsRuntimeCall, ...] | None
    cpu_only: CpuOnly | None
    link: HostLink
    program: ProgramInfo
    program_end: ProgramEnd
    profiler: str | Absent = ABSENT


@dataclass(frozen=True, kw_only=True)
class TraceGpu:
    """One GPU the trace recorded (TARGET_INFO_GPU)."""
    device: int
    name: str
    chip: str | None


@dataclass(frozen=True, kw_only=True)
class TraceCounts:
    """The rows loaded of each table."""
    kernels: int
    memcpys: int
    nvtx_ranges: int
    osrt_calls: int


@dataclass(frozen=True, kw_only=True)
class OsRuntimeCall:
    """An OS runtime call by total time (a trace without GPU work)."""
    name: str
    count: int
    total_ns: int


def part(trace: Trace, digest: KernelDigest, memcpys: pd.DataFrame, nvtx_rows: pd.DataFrame, memcpy: Part, gpu: Part,
         opts: Options) -> TraceInfo:
    """The `trace` section (its integrity and OS call count still None: summary.analyze_sections sets them, the
    verdict once the background assessment is done, the count after the scoped reads); named trace_info: `trace` is
    the Trace the sections are given."""
    trace.background.wait("host.threads")
    no_gpu = gpu.summary is None
    return TraceInfo(
        path=trace.source, nsys_version=trace.nsys_version,
        gpus=rows_as(TraceGpu, trace.device.gpus) if len(trace.device.gpus) else (),
        counts=TraceCounts(kernels=digest.count, memcpys=int(len(memcpys)), nvtx_ranges=int(len(nvtx_rows)),
                           osrt_calls=None),  # type: ignore[arg-type]  # counted last (summary.analyze_sections)
        integrity=None,  # type: ignore[arg-type]  # the verdict, set by summary.analyze_sections
        os_runtime=_os_runtime(trace, opts.top) if no_gpu else None,
        cpu_only=cpu_only.part(trace) if no_gpu else None,
        link=host_link(trace.device.gpus, memcpy.tables["memcpy"], opts.link_gbps),
        program=program.describe(trace.host.threads, nvtx_rows, digest.names(), opts.run_record),
        program_end=program_end.outcome(trace),  # a failed run is said first, never read as a result
        # an nsys export's section stays as it was (its stored answers byte for byte): no `profiler` key
        profiler=trace.profiler if trace.profiler != "nsys" else ABSENT)


declare(part, needs=lambda: (TRACE, gpu.PassedOver.digest, window.GpuRows.memcpys, window.nvtx_rows, copies.memcpy_part,
                             gpu_part.gpu_part, OPTS))


def _os_runtime(trace: Trace, top: int) -> tuple[OsRuntimeCall, ...]:
    """The OS runtime calls by total time (name, count, total_ns), the top few; empty without the table."""
    if not trace.has("OSRT_API"):
        return ()
    return rows_as(OsRuntimeCall, trace.query(sql.OSRT_BY_NAME.format(top=int(top))))
