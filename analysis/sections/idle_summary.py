"""The `idle` section: every idle nanosecond of each device given to one cause (sections/idle.py), over the window
and, where the set-up before the first step is a large share of it, over the steps alone; the host's waits it counts;
and what the set-up before the first step cost (the `steps.setup` figures)."""
from __future__ import annotations

from concurrent.futures import Future
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..common.schema import Part, rows_as
from ..load.trace import Trace
from .base import OPTS, TRACE, Options, declare
from . import copies as cp
from . import cpu, cpu_work, gpu, idle, launchers, program, window
from ..load.frames import pid_of
from ..common.spill import Frames
from dataclasses import dataclass
from .cpu_work import CpuSamples


@dataclass(frozen=True, kw_only=True)
class IdleAttribution:
    """The `idle` section: every idle nanosecond of each GPU given to one cause."""
    causes: tuple[IdleCauseTime, ...]
    devices: dict[str, IdleDevice]
    launch_threads: tuple[int, ...]
    launch_calls: int
    launch_api_ns: int
    sync_calls: int
    sync_blocked_ns: int
    setup_call_steps: int


@dataclass(frozen=True, kw_only=True)
class IdleCauseTime:
    """One cause's (and subject's) idle time on a device."""
    cause: str
    subject: str | None
    idle_ns: int
    device: int


@dataclass(frozen=True, kw_only=True)
class IdleDevice:
    """One device's idle time and what its launching thread did in it."""
    idle_ns: int
    idle_intervals: int
    short_idle_intervals: int
    input_calls: dict[str, int]
    mapping_calls: dict[str, int]
    setup_calls: dict[str, int]
    loader_starved_ns: int
    after_sync_intervals: int
    cpu_after_sync_ns: int
    cpu_samples: CpuSamples
    range_samples: CpuSamples

SETUP_SHARE = 0.10  # set-up (before the first step, after the last) above this share of the window is reported apart


class IdlePart(NamedTuple):
    """summary: the `idle` section; tables: idle (and idle_steps), sync_names; setup: `steps.setup`; gap_causes:
    (device, spans) -> the cause of each span (for charts)."""
    summary: IdleAttribution
    tables: dict
    setup: cpu.SetupBeforeSteps | None
    gap_causes: object


class Inputs(NamedTuple):
    """What the attribution reads besides the device pass: the launching threads (sections/launchers.py), the OS
    calls the threads waited in (sections/os_calls.py), NVTX ranges, copies, CUDA synchronize calls, thread names."""
    tids: dict
    osrt: pd.DataFrame | Frames  # os_calls.spilled_wait_calls: read a slice of time at a time
    nvtx: pd.DataFrame
    copies: pd.DataFrame
    sync_calls: pd.DataFrame
    threads: pd.DataFrame
    samples: pd.DataFrame | None = None  # the launching threads' CPU samples by owner (sections/cpu_work.owners)
    setup_calls: pd.DataFrame | None = None  # one-time CUDA set-up calls (load/calls.setup_calls)


def part(passed, window, inputs: Inputs, steps: pd.DataFrame, step_regex: str | None, min_gap_ns: int,
         launch_stats) -> IdlePart:
    """The idle section of a trace with GPU activity (passed: the device pass, sections/gpu.py); launch_stats() ->
    (calls, ns) of the launching threads' kernel launches (read last: it runs in the background meanwhile)."""
    tids = inputs.tids
    syncs, cuda_calls = host_waits(inputs.sync_calls, inputs.copies)
    loaders = {dev: program.loader_threads(inputs.threads, {pid_of(x) for x in tids["devices"].get(dev, set())})
               for dev in passed.busy_by_device}

    def attributed(span: tuple[int, int]) -> tuple[pd.DataFrame, dict]:
        """Every device's idle time in the span by cause (idle.attribute), and each device's details."""
        parts, details = [], {}
        for dev, busy in passed.busy_by_device.items():
            t, details[str(dev)] = idle.attribute(busy, span, tids["devices"].get(dev, set()), inputs.osrt,
                                                  inputs.nvtx, syncs, cuda_calls, step_regex, min_gap_ns, dev,
                                                  loaders[dev], inputs.samples, inputs.setup_calls)
            parts.append(t)
        return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=idle.COLUMNS)), details
    table, details = attributed(window)
    tables = {"idle": table}

    def gap_causes(dev, spans):
        return idle.gap_causes(spans, tids["devices"].get(dev, set()), inputs.osrt, inputs.nvtx, syncs, cuda_calls,
                               step_regex, min_gap_ns, loaders.get(dev), inputs.setup_calls)
    mine_syncs = syncs[syncs["global_tid"].isin(list(tids["all"]))] if len(syncs) else syncs
    launch_calls, launch_ns = launch_stats()
    sync_calls, sync_ns = int(len(mine_syncs)), int(mine_syncs["duration_ns"].sum()) if len(mine_syncs) else 0
    span = steady_span(steps, window)
    setup = None
    if span is not None:  # the set-up before the first step (model load, warm-up) is not what each step costs
        tables["idle_steps"] = attributed(span)[0]
        inside = (mine_syncs["start_ns"] >= span[0]).to_numpy() & (mine_syncs["start_ns"] < span[1]).to_numpy() \
            if len(mine_syncs) else np.zeros(0, bool)
        setup = _setup(window, span, table, tables["idle_steps"], len(mine_syncs), int(inside.sum()))
        mine_syncs = mine_syncs[inside]
    tables["sync_names"] = mine_syncs["name"].astype(str).value_counts() if len(mine_syncs) else \
        pd.Series(dtype="int64")
    out = IdleAttribution(causes=rows_as(IdleCauseTime, table), devices=details,
                          launch_threads=tuple(sorted(int(t) & 0xFFFFFF for t in tids["all"])),
                          launch_calls=launch_calls, launch_api_ns=launch_ns, sync_calls=sync_calls,
                          sync_blocked_ns=sync_ns, setup_call_steps=_steps_with(inputs.setup_calls, tids["all"], steps))
    return IdlePart(out, tables, setup, gap_causes)


def _steps_with(calls: pd.DataFrame | None, threads, steps: pd.DataFrame | None) -> int:
    """How many steps hold a set-up call of the launching threads: a call in most steps is the loop's own (the
    caching allocator freeing and growing every step), not set-up."""
    if calls is None or calls.empty or steps is None or steps.empty:
        return 0
    mine = np.sort(calls.loc[calls["global_tid"].isin(list(threads)), "start_ns"].to_numpy(np.int64))
    s, e = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    return int((np.searchsorted(mine, e) > np.searchsorted(mine, s)).sum())


def steady_span(steps: pd.DataFrame | None, window) -> tuple[int, int] | None:
    """From the first step's start to the window's end, where the set-up before the first step is at least
    SETUP_SHARE of the window; None otherwise (no steps, or too little set-up to matter). The time after the last
    step stays: in a pipelined program the GPU is still running the steps' work there."""
    if steps is None or len(steps) < 2 or window is None:
        return None
    lo = int(steps["start_ns"].min())
    return (lo, window[1]) if lo - window[0] >= SETUP_SHARE * (window[1] - window[0]) else None


def _setup(window, span, whole: pd.DataFrame, steady: pd.DataFrame, syncs: int, syncs_inside: int
           ) -> cpu.SetupBeforeSteps:
    """What happened before the first step: its time, the GPU idle time in it by cause, the synchronising calls made."""
    by_cause = (whole.groupby("cause")["idle_ns"].sum() - steady.groupby("cause")["idle_ns"].sum()).fillna(
        whole.groupby("cause")["idle_ns"].sum()).clip(lower=0)
    return cpu.SetupBeforeSteps(steps_start_ns=span[0], before_first_step_ns=span[0] - window[0],
                                idle_ns={str(k): int(v) for k, v in by_cause.items() if v > 0},
                                sync_calls=syncs - syncs_inside, sync_calls_in_steps=syncs_inside)


DATA_COPY_BYTES = 64 * 1024  # a copy smaller than this reads values (.item(), .tolist() of a few), not a batch's data
COPY_SYNC_NS = 100_000  # a sync this soon after a copy's call on the same thread waits for that copy (`.cpu()`)


def _copy_syncs(sync_api: pd.DataFrame, big: pd.DataFrame) -> np.ndarray:
    """Which synchronising calls wait for a big copy just issued on the same thread (`.cpu()` of a large tensor is a
    cudaMemcpyAsync and a cudaStreamSynchronize): those are the copy's, which the copy rules cost."""
    if sync_api.empty or big.empty:
        return np.zeros(len(sync_api), bool)
    ends = big[["global_tid", "end_ns"]].sort_values("end_ns")
    s = sync_api.reset_index(drop=True).assign(row=np.arange(len(sync_api))).sort_values("start_ns")
    m = pd.merge_asof(s[["start_ns", "global_tid", "row"]], ends.rename(columns={"end_ns": "copy_end"}),
                      left_on="start_ns", right_on="copy_end", by="global_tid", direction="backward")
    own = np.zeros(len(sync_api), bool)
    near = (m["start_ns"] - m["copy_end"]).to_numpy(dtype=float) <= COPY_SYNC_NS
    own[m["row"].to_numpy()[near]] = True
    return own


def host_waits(sync_api: pd.DataFrame, copies: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Synchronising calls (explicit syncs and small blocking copies: `.item()`, `.cpu()` of a scalar) and every
    CUDA call that can hold the thread (those plus all copy calls). Big copies and the syncs that wait for them have
    their own rules."""
    cols = ["start_ns", "end_ns", "duration_ns", "global_tid", "name"]
    c = copies.dropna(subset=["api_start_ns"]) if len(copies) else copies
    if len(c):
        c = c.assign(start_ns=c["api_start_ns"].astype("int64"), end_ns=c["api_end_ns"].astype("int64"),
                     global_tid=c["api_global_tid"].astype("int64"), name=c["api_name"].astype(str))
        c = c.assign(duration_ns=c["end_ns"] - c["start_ns"])
        # a loop whose only copies are scalar reads (`.item()` of 8 bytes) has no data copy: its reads are syncs
        big = pd.concat([cp.big_copies(copies, k, min_bytes=DATA_COPY_BYTES) for k in ("DtoH", "HtoD")]).index
        small_blocking = c[(c["blocking"] == True) & ~c.index.isin(big)]  # noqa: E712 - NA is neither
    else:
        small_blocking = pd.DataFrame(columns=cols)
    # only the columns the attribution reads: the copies' two dozen others, NaN on the syncs' rows, were 0.15 GiB at
    # 32 GB, held to the end by gap_causes
    own = _copy_syncs(sync_api, c.loc[c.index.isin(big)] if len(c) else c)
    syncs = pd.concat([sync_api.loc[~own, cols], small_blocking[cols]] if len(small_blocking) else
                      [sync_api.loc[~own, cols]], ignore_index=True) if len(sync_api) or len(small_blocking) else \
        pd.DataFrame(columns=cols)
    all_calls = pd.concat([syncs, c[cols]], ignore_index=True) if len(c) else syncs
    return syncs, all_calls


def idle_part(trace: Trace, passed: gpu.DevicePass | None, window_ns: tuple[int, int] | None, tids: dict,
              os_waits: Future[Frames], nvtx_rows: pd.DataFrame, memcpy: Part, samples: pd.DataFrame | None,
              steps_draft: Part, step_regex: str | None, opts: Options, launch_stats: Future[tuple[int, int]]
              ) -> IdlePart | None:
    """The idle attribution (part()); None without GPU activity."""
    waits = os_waits.result()
    if passed is None:
        return None
    trace.background.wait("calls.sync_calls", "host.threads")
    inputs = Inputs(tids, waits, nvtx_rows, memcpy.tables["memcpy"], trace.calls.sync_calls, trace.host.threads,
                    samples, trace.calls.setup_calls)
    return part(passed, window_ns, inputs, steps_draft.tables["steps"], step_regex, opts.min_gap_ns,
                launch_stats.result)


declare(idle_part, needs=lambda: (TRACE, gpu.PassedOver.passed, window.window_ns, launchers.tids, window.os_waits,
                                  window.nvtx_rows, cp.memcpy_part, cpu_work.samples, cpu.steps_draft,
                                  window.step_regex, OPTS, launchers.launch_stats))


def _idle(idle_part: IdlePart | None) -> Part:
    """The `idle` section."""
    return Part(idle_part.summary, idle_part.tables) if idle_part else Part(None, {})


declare(_idle, needs=(idle_part,), part="idle", json_at=60, tables_at=60)
