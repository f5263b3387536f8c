"""The `ranks` object's types: several GPUs or several traces side by side (analysis/rank_summary.py makes it)."""
from __future__ import annotations

from dataclasses import dataclass

from ..common.typed_json import ABSENT, Absent
from ..rules.base import Finding
from ..sections.gpu_rows import RankGpu
from ..sections.hosts import HostDtohLoad, HostEntry
from ..sections.sharing import Contention


@dataclass(frozen=True, kw_only=True)
class RanksPart:
    """The `ranks` object: the GPUs side by side, their shared host-side DtoH load, the limit."""
    traces: tuple[RankTrace, ...]
    window: CommonWindow
    concurrent: bool
    gpus: tuple[RankGpu, ...]
    total_steps_per_s: float
    host_dtoh: HostDtohLoad
    contention: tuple[Contention, ...]
    hosts: tuple[HostEntry, ...] | Absent = ABSENT
    limit: Finding
    figures: tuple[str, ...]
    run: WorkloadRun | None


@dataclass(frozen=True, kw_only=True)
class RankTrace:
    """One trace of the comparison and its shift onto the common clock."""
    label: str
    path: str
    clock_offset_ns: int
    nsys_version: str


@dataclass(frozen=True, kw_only=True)
class CommonWindow:
    """All traces' GPU activity on the common clock."""
    start_ns: int
    end_ns: int
    duration_ns: int


@dataclass(frozen=True, kw_only=True)
class WorkloadRun:
    """The workload record's figures next to the trace's."""
    steps_per_s: float | None
    per_rank_steps_per_s: tuple[float, ...] | None
    profiled: bool
    host_cpu: HostCpuLoad | None
    integrity_ok: bool | None


@dataclass(frozen=True, kw_only=True)
class HostCpuLoad:
    """The CPUs the job may use and how busy they were."""
    cpus: int
    busy: float
    busy_cores: float
