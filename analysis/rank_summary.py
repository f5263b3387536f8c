"""Several GPUs: one row per GPU across one or more traces, the host-side DtoH load they share, and the resource
that limits scaling.

A multi-process trace (torchrun under one nsys) holds every rank. Separate per-rank traces are put on one clock by
their session start (TARGET_INFO_SESSION_START_TIME, UTC ns) and grouped by the machine they name
(TARGET_INFO_SYSTEM_ENV Hostname): each host's GPUs share its DtoH load, judged per host (sections/hosts.py). Each
GPU is driven by the process that launched most of its kernel time; that process's NVTX step ranges are its steps
and its ranges explain its idle gaps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..nsys_core.contracts import DEFAULT_LINK_GBPS, DEFAULT_STEP_REGEX, gbps

from .sections import copies as cp
from .common import defaults
from .common.errors import TraceError
from .common.typed_json import ABSENT, from_json, to_json
from .common.intervals import Coverage, union
from .load.device import KERNEL_TABLE
from .rules.terms import NSYS, TORCH, terms
from .rules.facts import CpuLoad, HostDtoh
from .rules.ranks import GpuCompute, HostDtohBandwidth, OutputBacklog, RankContext, limit
from .common.schema import json_rows, several_traces
from .sections.base import section_keys
from .sections.hosts import HostDtohLoad, HostEntry, HostLoad, host_loads
from .sections.gpu_rows import RankGpu, device_rows, gpu_key
from .sections.sharing import Contention
from .document.ranks import CommonWindow, HostCpuLoad, RanksPart, RankTrace, WorkloadRun
from .load.trace import Trace
from .common.memory import LARGE_TRACE_BYTES, return_freed_memory


@dataclass
class RankOptions:
    """min_gap_ns: smallest idle gap counted. step_regex: NVTX step ranges. bin_ns: host timeline bin.
    link_gbps: one GPU's DtoH link speed into pinned memory, used when no probe is given.
    probe: a `python -m nsys_transfer.workloads.linkprobe --json` record of the same machine: measured solo and all-GPU DtoH
    rates per host memory kind (the shared capacity). busy_threshold, slowdown_threshold, backlog_steps: overrides of
    the multi-GPU rules' thresholds (analysis/rules/ranks.py: GpuCompute.busy, HostDtohBandwidth.slowdown,
    OutputBacklog.backlog_steps). run: the workload's record (`python -m nsys_transfer.workloads --json`; `profile stage`
    writes <base>.workload.json), whose host_cpu says how busy the CPUs the ranks share were."""
    min_gap_ns: int = defaults.MIN_GAP_NS
    step_regex: str = DEFAULT_STEP_REGEX
    bin_ns: int = defaults.BIN_NS
    link_gbps: float = DEFAULT_LINK_GBPS
    probe: dict | None = None
    busy_threshold: float = GpuCompute.busy
    slowdown_threshold: float = HostDtohBandwidth.slowdown
    backlog_steps: float = OutputBacklog.backlog_steps
    run: dict | None = None


@dataclass
class Ranks:
    """part: the `ranks` object (docs/json-schema.md), typed; summary: its JSON. devices: one row per GPU. copies: the
    data-carrying DtoH copies with concurrent_fraction (within each GPU's host). host: DtoH into host memory per bin
    and GPU (common clock). With GPUs on several hosts, devices, copies, host and tables['contention'] and
    tables['host_total'] (every host's) carry a `host` column.
    warnings: every trace's (`path: ...` with several traces)."""
    part: RanksPart
    devices: pd.DataFrame
    copies: pd.DataFrame
    host: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def summary(self) -> dict:
        """The `ranks` object as JSON (to_json of part, once)."""
        return to_json(self.part)

    def document(self) -> dict:
        """The JSON document of several traces (schema.several_traces): the comparison and its limit."""
        return several_traces(self.summary, self.warnings, section_keys())


# --- pure functions -------------------------------------------------------------------------------------------

def session_offsets(starts: list[int | None]) -> list[int]:
    """Shift of each trace onto a common clock (ns), from their UTC session starts; 0 where a trace has none."""
    known = [s for s in starts if s is not None]
    base = min(known) if known else 0
    return [s - base if s is not None else 0 for s in starts]


def trace_labels(names: list[str]) -> list[str]:
    """Short unique labels for traces given by file name: 'x.rank1.sqlite.xz' -> 'rank1', 'pinned.sqlite' -> 'pinned'."""
    bare = []
    for n in names:
        m = re.search(r"\.(rank\d+)(?:\.|$)", n)
        bare.append(m.group(1) if m else n.split(".")[0])
    return bare if len(set(bare)) == len(bare) else [f"{i}:{b}" for i, b in enumerate(bare)]


def concurrent_fraction(copies: pd.DataFrame, key: str = "gpu") -> np.ndarray:
    """Per copy: the share of its duration during which a copy of another GPU (other `key`) was running."""
    out = np.zeros(len(copies))
    if len(copies) == 0:
        return out
    keys = copies[key].to_numpy()
    s, e = copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy()
    dur = np.maximum(e - s, 1)
    for k in pd.unique(keys):
        mine = keys == k
        if mine.all():
            continue
        others = Coverage(*union(s[~mine], e[~mine]))
        out[mine] = others.within(s[mine], e[mine]) / dur[mine]
    return out


def run_summary(run: dict | None) -> WorkloadRun | None:
    """The workload record's figures next to the trace's: unprofiled or profiled, as it was run. (run is the
    workload's own record, `python -m nsys_transfer.workloads --json`, not the analysis document: read by its keys.)"""
    if not run:
        return None
    t = run.get("throughput", {})
    per_rank = t.get("per_rank_steps_per_s")
    return WorkloadRun(steps_per_s=t.get("steps_per_s"),
                       per_rank_steps_per_s=tuple(per_rank) if per_rank is not None else None,
                       profiled=bool(run.get("config", {}).get("profile")),
                       host_cpu=from_json(HostCpuLoad | None, run.get("host_cpu")),
                       integrity_ok=run.get("integrity", {}).get("ok"))


# --- driver ------------------------------------------------------------------------------------------------------

def _rank_context(devices: pd.DataFrame, top: HostLoad, hosts: int, opts: RankOptions, concurrent: bool,
                  profiler: str = NSYS):
    """What the multi-GPU rules read, with this run's thresholds: the limiting host's DtoH figures (top)."""
    cpu = CpuLoad.of((opts.run or {}).get("host_cpu"))
    return RankContext(devices, top.contention, HostDtoh.of(top.summary), cpu, concurrent, opts.busy_threshold,
                       opts.slowdown_threshold, opts.backlog_steps, hosts=hosts, host_name=top.name,
                       host_devices=devices[devices["trace"].isin(top.traces)] if hosts > 1 else None,
                       profiler=profiler)


@dataclass
class TracePart:
    """What analyze_ranks takes from one trace, made where the trace is (trace_part, part_of_path) and merged with
    the others' in merge_parts: plain data and DataFrames, so it can come back from a worker process or a Dask
    worker. host: the machine it ran on (Trace.hostname; None when the export names none). rows: one per GPU (the
    `gpus[]` object). window: the trace's first to last GPU operation (None without GPU activity), on its own clock.
    dtoh: (device, its data-carrying DtoH copies) per device. busy: each GPU's busy time per bin of its window
    (sections/gpu_rows.bin_busy, with `gpu`). warnings: the trace's, each once, sorted."""
    label: str
    source: str
    nsys_version: str
    session_start_utc_ns: int | None
    host: str | None
    rows: list[dict]
    window: tuple[int, int] | None
    dtoh: list[tuple[int, pd.DataFrame]]
    busy: pd.DataFrame
    warnings: list[str]


BUSY_COLUMNS = ["bin_start_ns", "bin_ns", "busy_ns", "gpu"]
PROFILER_STEPS = r"^ProfilerStep#\d+$"  # prof.step()'s marks: a torch.profiler trace's steps


def trace_part(t, label: str, opts: RankOptions) -> TracePart:
    """One open Trace's share of the multi-GPU analysis: everything analyze_ranks reads of it."""
    kernels, memcpys, memsets, nvtx = t.device.kernel_digest, t.device.memcpys, t.device.memsets, t.host.nvtx
    if t.profiler == TORCH and opts.step_regex == DEFAULT_STEP_REGEX:  # torch.profiler's steps, unless told others
        opts = replace(opts, step_regex=PROFILER_STEPS)
    names = dict(zip(t.device.gpus["device"], t.device.gpus["name"])) if len(t.device.gpus) else {}
    rows, busy, window = device_rows(label, kernels, memcpys, memsets, nvtx, names, opts,
                                     t.has(KERNEL_TABLE) or bool(len(t.device.graph_runs)))
    dtoh = [] if window is None else [(dev, cp.big_copies(d, "DtoH"))
                                      for dev, d in memcpys[memcpys["copy_kind"] == "DtoH"].groupby("device")]
    busy = pd.concat(busy, ignore_index=True) if busy else pd.DataFrame(columns=BUSY_COLUMNS)
    return TracePart(label, t.source, t.nsys_version, t.session_start_utc_ns, t.hostname, rows, window, dtoh, busy,
                     sorted(set(t.warnings)))


def part_of_path(path, label: str, opts: RankOptions) -> TracePart:
    """trace_part of the trace at `path` (.sqlite, .sqlite.xz, .nsys-rep), opened and closed here: what a worker
    process or a Dask worker runs, holding one trace at a time."""
    with Trace.open(path) as t:
        if t.path.stat().st_size >= LARGE_TRACE_BYTES:
            return_freed_memory()  # as analyze-trace does for one large trace
        return trace_part(t, label, opts)


def analyze_ranks(traces: list, opts: RankOptions | None = None, labels: list[str] | None = None,
                  progress=None) -> Ranks:
    """Every GPU of the given traces (Trace objects) side by side, on one clock."""
    opts = opts or RankOptions()
    say = progress or (lambda msg: None)
    labels = default_labels(len(traces)) if labels is None else labels
    parts = []
    for label, t in zip(labels, traces):
        say(f"loading {t.source}")
        parts.append(trace_part(t, label, opts))
    return merge_parts(parts, opts, progress)


def default_labels(n: int) -> list[str]:
    """The trace labels analyze_ranks uses when none are given: none for one trace, t0, t1, ... for several."""
    return [""] if n == 1 else [f"t{i}" for i in range(n)]


def merge_parts(parts: list[TracePart], opts: RankOptions | None = None, progress=None) -> Ranks:
    """The traces' parts (in the traces' order) put on one clock and compared: their GPUs side by side, the host-side
    DtoH each host's GPUs share (sections/hosts.py: one host unless the traces name several), the limit."""
    opts = opts or RankOptions()
    say = progress or (lambda msg: None)
    offsets = session_offsets([p.session_start_utc_ns for p in parts])
    devices, copies, windows, busy = _on_one_clock(parts, offsets)
    host_of = {p.label: p.host for p in parts}
    copies["concurrent_fraction"] = concurrent_within(copies, host_of)
    copies["gbps"] = gbps(copies["bytes"], copies["duration_ns"].where(copies["duration_ns"] > 0))
    say("host-side DtoH timeline")
    lo, hi = min(w[0] for w in windows.values()), max(w[1] for w in windows.values())
    loads = host_loads(copies, devices, host_of, windows, (lo, hi), opts.probe, opts.link_gbps, opts.bin_ns,
                       opts.slowdown_threshold, opts.busy_threshold)
    top, several = loads[0], len(loads) > 1
    concurrent = len(windows) < 2 or max(w[0] for w in windows.values()) < min(w[1] for w in windows.values())
    if several:  # the host of each GPU and copy; one host keeps today's columns
        devices["host"], copies["host"] = devices["trace"].map(host_of), copies["trace"].map(host_of)
    ctx = _rank_context(devices, top, len(loads), opts, concurrent,
                        TORCH if all(str(p.nsys_version).startswith(TORCH) for p in parts) else NSYS)
    part = RanksPart(
        traces=tuple(RankTrace(label=p.label, path=p.source, clock_offset_ns=off, nsys_version=p.nsys_version)
                     for p, off in zip(parts, offsets)),
        window=CommonWindow(start_ns=lo, end_ns=hi, duration_ns=hi - lo),
        concurrent=concurrent,
        gpus=tuple(from_json(RankGpu, r) for r in json_rows(devices)),
        total_steps_per_s=float(devices["steps_per_s"].fillna(0).sum()),
        host_dtoh=from_json(HostDtohLoad, {"host": top.name, **top.summary} if several else top.summary),
        contention=tuple(from_json(Contention, r) for r in json_rows(top.contention)),
        hosts=tuple(from_json(HostEntry, h.entry()) for h in loads) if several else ABSENT,
        limit=limit(ctx),
        figures=tuple(ctx.figures()),
        run=run_summary(opts.run),
    )
    warnings = [f"{p.source}: {w}" if len(parts) > 1 else w for p in parts for w in p.warnings] + _unnamed(loads)
    host, tables = _host_tables(loads)
    return Ranks(part, devices, copies, host, {**tables, "busy": busy}, warnings)


def _on_one_clock(parts: list[TracePart], offsets: list[int]):
    """The parts' GPU rows, data-carrying DtoH copies (with `trace`, `gpu`, `host_kind`), GPU activity windows (by
    trace label, traces with some) and busy bins, shifted onto the common clock."""
    rows, big, windows, busy = [], [], {}, []
    for p, off in zip(parts, offsets):
        rows += p.rows
        if p.window is None:
            continue
        windows[p.label] = (p.window[0] + off, p.window[1] + off)
        for dev, b in p.dtoh:
            big.append(b.assign(start_ns=b["start_ns"] + off, end_ns=b["end_ns"] + off, trace=p.label,
                                gpu=gpu_key(p.label, dev), host_kind=b["dst_kind"]))
        busy.append(p.busy.assign(bin_start_ns=p.busy["bin_start_ns"] + off))
    devices = pd.DataFrame(rows)
    if devices.empty:
        kineto = all(str(p.nsys_version).startswith(TORCH) for p in parts)
        if len(parts) > 1:  # several traces are read as one GPU run's ranks: without GPUs, each is its own analysis
            names = ", ".join(Path(str(p.source)).name for p in parts)
            raise TraceError(f"{len(parts)} traces without GPU activity ({names}): several traces are analysed "
                             "together only as the ranks of one GPU run: give one of them (a run folder holds one), or "
                             f"{terms(TORCH if kineto else NSYS).cuda}")
        raise TraceError(f"no GPU activity in the trace(s): {terms(TORCH if kineto else NSYS).cuda}")
    copies = pd.concat(big, ignore_index=True) if big else pd.DataFrame(
        columns=["start_ns", "end_ns", "duration_ns", "bytes", "gpu", "host_kind", "device", "trace"])
    busy = pd.concat(busy, ignore_index=True) if busy else pd.DataFrame(columns=BUSY_COLUMNS)
    return devices, copies, windows, busy


def concurrent_within(copies: pd.DataFrame, host_of: dict[str, str | None]) -> np.ndarray:
    """concurrent_fraction within each host (host_of: each trace label's host): a copy of a GPU on another machine,
    which shares neither its host memory nor its PCIe, does not count."""
    names = list(dict.fromkeys(host_of.values()))
    code = copies["trace"].map({label: names.index(h) for label, h in host_of.items()}).to_numpy()
    out = np.zeros(len(copies))
    for c in pd.unique(code):
        mine = code == c
        out[mine] = concurrent_fraction(copies[mine])
    return out


def _host_tables(loads: list[HostLoad]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The DtoH per bin and GPU (Ranks.host) and the `contention` and `host_total` tables: the one host's, or every
    host's with a `host` column."""
    if len(loads) == 1:
        return loads[0].timeline, {"contention": loads[0].contention, "host_total": loads[0].total}
    every = {table: pd.concat([getattr(h, table).assign(host=h.name) for h in loads], ignore_index=True)
             for table in ("timeline", "contention", "total")}
    return every["timeline"], {"contention": every["contention"], "host_total": every["total"]}


def _unnamed(loads: list[HostLoad]) -> list[str]:
    """A warning when some traces name their host and others do not: those are counted as one host."""
    if len(loads) < 2 or all(h.name is not None for h in loads):
        return []
    n, total = len(next(h for h in loads if h.name is None).traces), sum(len(h.traces) for h in loads)
    return [f"{n} of the {total} traces name no host (no Hostname row in TARGET_INFO_SYSTEM_ENV) while the others do: "
            "their GPUs count as one host, the unnamed host"]
