"""Unified (managed) memory: the pages the driver migrated between host and GPU, and what the on-demand ones cost.

A managed allocation moves to whichever side touches it: a GPU page fault stalls the kernel while the driver moves
the page (4 KB to 2 MB at a time) to the GPU, a CPU fault stalls the host thread while it moves back. CUPTI records
each migration as a memcpy row (copyKind 11 HtoD, 12 DtoH, 13 DtoD) with no API call and a cause: a user prefetch
(cudaMemPrefetchAsync: bulk, fast, ahead of use) or an on-demand one (a page fault, the driver's speculative prefetch
around a fault, an eviction). The on-demand ones are the cost this module measures.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...nsys_core.contracts import gbps

from ..common import intervals
from ..load.device import UNIFIED_KINDS
from dataclasses import dataclass
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class UnifiedMemory:
    """Unified-memory migrations by direction and the on-demand ones (faults)."""
    htod: Migrations | Absent = ABSENT
    dtoh: Migrations | Absent = ABSENT
    dtod: Migrations | Absent = ABSENT
    on_demand: OnDemandMigrations
    cause_recorded: bool


@dataclass(frozen=True, kw_only=True)
class Migrations:
    """One direction's migrations."""
    count: int
    bytes: int
    total_ns: int
    gbps: float | None
    on_demand: int


@dataclass(frozen=True, kw_only=True)
class OnDemandMigrations:
    """The migrations every cause but a user prefetch made: their GPU time and the kernel time inside it."""
    count: int
    bytes: int
    gpu_ns: int
    kernel_overlap_ns: int
    median_bytes: int | None

USER_PREFETCH = 1  # CUpti_ActivityUnifiedMemoryMigrationCause: cudaMemPrefetchAsync
DIRECTIONS = {"Unified HtoD": "htod", "Unified DtoH": "dtoh", "Unified DtoD": "dtod"}


def migrations(copies: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    """The copy table's unified-memory migrations that overlap the window, with on_demand (bool): every cause but a
    user prefetch (an export that records no cause counts them all as on demand)."""
    m = copies[copies["copy_kind"].isin(UNIFIED_KINDS).to_numpy()]
    if window is not None:
        m = m[(m["end_ns"] > window[0]).to_numpy() & (m["start_ns"] < window[1]).to_numpy()]
    cause = m["migration_cause"] if "migration_cause" in m else pd.Series(-1, index=m.index)
    return m.assign(on_demand=(cause != USER_PREFETCH).to_numpy())


def summary(copies: pd.DataFrame, window: tuple[int, int] | None) -> UnifiedMemory | None:
    """Per direction: count, bytes, total_ns, gbps, on_demand (count); and of the on-demand ones: count, bytes, the
    GPU time they span (union, in the window), the kernel time inside them (kernels stalled on faults) and the median
    size. None without migrations."""
    m = migrations(copies, window)
    if m.empty:
        return None
    by_direction = {}
    for kind, key in DIRECTIONS.items():
        d = m[(m["copy_kind"] == kind).to_numpy()]
        if len(d):
            by_direction[key] = Migrations(
                count=int(len(d)), bytes=int(d["bytes"].sum()), total_ns=int(d["duration_ns"].sum()),
                gbps=float(gbps(d["bytes"].sum(), d["duration_ns"].sum())) if d["duration_ns"].sum() else None,
                on_demand=int(d["on_demand"].sum()))
    od = m[m["on_demand"].to_numpy()]
    on_demand = OnDemandMigrations(count=int(len(od)), bytes=int(od["bytes"].sum()), gpu_ns=_span_ns(od, window),
                                   kernel_overlap_ns=int(od["overlap_ns"].sum()) if "overlap_ns" in od and len(od) else 0,
                                   median_bytes=int(od["bytes"].median()) if len(od) else None)
    return UnifiedMemory(**by_direction, on_demand=on_demand,
                         cause_recorded=bool("migration_cause" in m and (m["migration_cause"] >= 0).any()))


def _span_ns(m: pd.DataFrame, window: tuple[int, int] | None) -> int:
    """The time the migrations cover (their union), clipped to the window."""
    if m.empty:
        return 0
    s, e = m["start_ns"].to_numpy(np.int64), m["end_ns"].to_numpy(np.int64)
    if window is not None:
        s, e = np.clip(s, *window), np.clip(e, *window)
    return intervals.length(*intervals.union(s, e))
