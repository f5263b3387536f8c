"""The OS runtime calls the analysis needs, read in two scoped passes: the table can hold tens of millions of rows,
of which the analysis uses few.

    launching processes   ---|=====|---|===|------   rows read zone by zone (Trace.osrt.zones: memory bounded)
    GPU idle gaps              [gap]      [gap]
                               ^in_gaps, near_top (the largest gaps)     waits: wait/mapping calls for idle.attribute

Two scoped reads: the waiting and mapping calls by name (from the start, beside the GPU work), and the launching
processes' calls near the gaps (once the gaps are known): zones whose time span holds no gap are skipped, and
each other zone is filtered by the gaps inside its span (btree.Touches: in C, or in SQL by sql.touches_any).
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..common import idle_causes
from . import cpu, gpu, idle, launchers
from .base import OPTS, TRACE, Options, declare
from ..load.frames import pid_of
from ..load.btree import Bits, Filter, In, Touches
from ..common.intervals import Coverage, union
from ..load.osrt import Zone
from ..load.trace import Trace
from ..common.spill import Frames

COLUMNS = ["start_ns", "end_ns", "duration_ns", "global_tid", "name"]
WAIT_COLUMNS = ["start_ns", "end_ns", "global_tid", "name"]  # what idle.attribute reads of the waits


@dataclass
class GapCalls:
    """in_gaps: the launching processes' calls during the gaps by name: count and time inside gaps
    (cpu.sum_osrt_in_gaps). near_top: their calls touching the largest gaps."""
    in_gaps: pd.DataFrame
    near_top: pd.DataFrame


def read(trace: Trace, gaps: pd.DataFrame, top_gaps: pd.DataFrame, launch_pids: set) -> GapCalls:
    """The launching processes' calls near the gaps (GapCalls)."""
    gs, ge = union(gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy())
    gcov, tcov = Coverage(gs, ge), Coverage(*union(top_gaps["start_ns"].to_numpy(), top_gaps["end_ns"].to_numpy()))
    counts, near_top = [], []
    if launch_pids and len(gs):
        mine = In(Bits("globalTid"), tuple(launch_pids))
        for chunk in trace.osrt.zone_chunks(lambda zone: _near_gaps(zone, gs, ge, mine)):
            chunk = chunk[gcov.touches(chunk["start_ns"].to_numpy(), chunk["end_ns"].to_numpy())]  # the exact test
            counts.append(cpu.osrt_gap_counts(gcov, chunk))
            near_top.append(chunk[tcov.touches(chunk["start_ns"].to_numpy(), chunk["end_ns"].to_numpy())])
    return GapCalls(cpu.sum_osrt_in_gaps(counts), _concat(near_top))


def wait_calls(trace: Trace) -> pd.DataFrame:
    """Every waiting and mapping OS call (poll, futex, sem_wait, mmap, ...) and the MPI calls nsys traced: a small part of the table, read by
    name: start_ns, end_ns, global_tid, name. idle.attribute picks the launching threads', their processes' and the
    DataLoader's. Reads the zones (Trace.osrt.zones) too: one pass for both where the fast reader can."""
    return spilled_wait_calls(trace).frame()


def spilled_wait_calls(trace: Trace) -> Frames:
    """wait_calls() held in temporary files as they are read (spill.Frames: tens of millions of rows in a long
    capture, 25 B each, read beside the kernel table), to be read back by the idle attribution (Frames.frame())."""
    names = waited_names(trace)
    out = Frames(WAIT_COLUMNS)
    trace.osrt.named_calls(names, out)
    # blocked in communication (idle.COMM_CALLS); off the CPU by the scheduler's account (idle.OFF_CPU) only where
    # no OS runtime trace says why a thread waits: beside one, a switch-out outside every traced call is as likely
    # preemption or an untraced call as a sleep (MiniWeather's and CloverLeaf's exports: after their syncs)
    off = trace.host.off_cpu if not trace.has("OSRT_API") else trace.host.off_cpu.iloc[0:0]
    for df in (trace.host.mpi_calls, off):
        out.append(df[WAIT_COLUMNS])
    return out


def waited_names(trace: Trace) -> dict[int, str]:
    """{string id: name} of the OS calls idle.attribute judges by: waits, mappings, sleeps, and the calls of the idle
    causes declared by them (common/idle_causes.py)."""
    out: dict[int, str] = {}
    for pattern in (idle.WAIT_CALLS, idle.MAPPING_CALLS, idle.SLEEP_CALLS, *(calls for _, calls in idle_causes.added_calls())):
        out |= trace.osrt.names(pattern)
    return out


def _near_gaps(zone: Zone, gs: np.ndarray, ge: np.ndarray, mine: In) -> tuple[Filter, ...] | None:
    """The filters keeping a zone's rows that may touch a gap: its own rows (`mine`) touching the gaps inside its
    time span (in SQL a coarser superset when there are very many; the exact test follows in numpy); None when no
    gap falls inside the span, so the zone is not read at all."""
    if zone.start_ns is not None:  # a row of the zone can touch only a gap ending after its first start and
        first = np.searchsorted(ge, zone.start_ns, side="right")  # starting before its last end
        gs, ge = gs[first:np.searchsorted(gs, zone.end_ns, side="left")], ge[first:]
        ge = ge[:len(gs)]
    if not len(gs):
        return None
    return mine, Touches(gs, ge)


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def gap_calls(trace: Trace, gaps_table: pd.DataFrame, tids: dict, opts: Options) -> Future[GapCalls]:
    """read() in the background, as soon as the gaps and launchers are known: the launching processes' OS calls near
    the gaps (the longest read, beside everything that follows)."""
    return trace.background.submit(read, trace, gaps_table, gaps_table.nlargest(opts.top, "duration_ns"),
                                   {pid_of(t) for t in tids["by_gap"].values()})


declare(gap_calls, needs=lambda: (TRACE, gpu.gaps_table, launchers.tids, OPTS), background=True)
