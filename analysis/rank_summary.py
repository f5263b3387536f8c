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
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from nsys_transfer.nsys_core.contracts import DEFAULT_LINK_GBPS, DEFAULT_STEP_REGEX, DRAIN_OUTPUTS, gbps

from nsys_transfer.analysis.sections import copies as cp
from nsys_transfer.analysis.sections import cpu, gpu
from nsys_transfer.analysis.common import defaults
from nsys_transfer.analysis.common.errors import TraceError
from nsys_transfer.analysis.common.intervals import Coverage, union
from nsys_transfer.analysis.load.device import KERNEL_TABLE
from nsys_transfer.analysis.load.kernel_digest import KernelDigest
from nsys_transfer.analysis.load.ops_store import SpilledOps
from nsys_transfer.analysis.rules.terms import NSYS, TORCH, terms
from nsys_transfer.analysis.rules.facts import CpuLoad, HostDtoh
from nsys_transfer.analysis.rules.ranks import GpuCompute, HostDtohBandwidth, OutputBacklog, RankContext, limit
from nsys_transfer.analysis.common.schema import json_rows, several_traces
from nsys_transfer.analysis.sections.base import section_keys
from nsys_transfer.analysis.sections.hosts import HostLoad, host_loads
from nsys_transfer.analysis.sections.sharing import gbps_of
from nsys_transfer.analysis.load.frames import pid_of
from nsys_transfer.analysis.load.trace import Trace
from nsys_transfer.analysis.common.memory import LARGE_TRACE_BYTES, return_freed_memory


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
    """summary: the `ranks` object of the JSON (docs/json-schema.md). devices: one row per GPU. copies: the
    data-carrying DtoH copies with concurrent_fraction (within each GPU's host). host: DtoH into host memory per bin
    and GPU (common clock). With GPUs on several hosts, devices, copies, host and tables['contention'] and
    tables['host_total'] (every host's) carry a `host` column.
    warnings: every trace's (`path: ...` with several traces)."""
    summary: dict
    devices: pd.DataFrame
    copies: pd.DataFrame
    host: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def document(self) -> dict:
        """The JSON document of several traces (schema.several_traces): the comparison and its limit."""
        return several_traces(self.summary, self.warnings, section_keys())


# --- pure functions -------------------------------------------------------------------------------------------

def session_offsets(starts: list[int | None]) -> list[int]:
    """Shift of each trace onto a common clock (ns), from their UTC session starts; 0 where a trace has none."""
    known = [s for s in starts if s is not None]
    base = min(known) if known else 0
    return [s - base if s is not None else 0 for s in starts]


def gpu_key(label: str, device: int) -> str:
    """How a GPU is named in rows, copies and charts: 'GPU 1', or 'rank1:GPU 1' when several traces are compared."""
    return f"{label}:GPU {device}" if label else f"GPU {device}"


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


def run_summary(run: dict | None) -> dict | None:
    """The workload record's figures next to the trace's: unprofiled or profiled, as it was run."""
    if not run:
        return None
    t = run.get("throughput", {})
    return {"steps_per_s": t.get("steps_per_s"), "per_rank_steps_per_s": t.get("per_rank_steps_per_s"),
            "profiled": bool(run.get("config", {}).get("profile")), "host_cpu": run.get("host_cpu"),
            "integrity_ok": run.get("integrity", {}).get("ok")}


# --- one trace's per-GPU rows ------------------------------------------------------------------------------------

def step_window(steps: pd.DataFrame, ops: gpu.GpuOps, outputs: pd.DataFrame) -> tuple[int, int] | None:
    """A rank's measured span: from its first step's start until the last step's output has reached the host (its
    last data-carrying DtoH copy ends; without copies, the GPU work that started before the last step ended). The
    warm-up before it and the drain and barrier after it are left out."""
    if steps.empty:
        return None
    lo, last = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    if len(outputs):
        return lo, max(last, int(outputs["end_ns"].max()))
    queued = ops.last_end_of_those_starting_before(last)
    return lo, max(last, queued if queued is not None else last)


def output_drain(nvtx: pd.DataFrame, ops: gpu.GpuOps, outputs_done_ns: int) -> tuple[int, str]:
    """How long the rank still waited for its output workers after its last step's output reached the host: the
    `drain outputs` NVTX range when the trace has it, else the rank's last GPU operation (the barrier before the
    capture stops, issued once its queue is drained). (drain_ns, source)."""
    d = nvtx[nvtx["name"] == DRAIN_OUTPUTS] if len(nvtx) else nvtx
    if len(d):
        return max(0, int(d["end_ns"].max()) - outputs_done_ns), f"NVTX '{DRAIN_OUTPUTS}'"
    last = ops.span()[1] if len(ops) else outputs_done_ns
    return max(0, last - outputs_done_ns), "last GPU operation"


def _device_rows(label: str, kernels: KernelDigest, memcpys, memsets, nvtx, gpu_names: dict, opts: RankOptions,
                 kernels_recorded: bool = True):
    """Per GPU of one trace: its row, its busy time per bin of its window (bin_busy); and the trace's window.
    kernels_recorded: whether the export has a kernel table (without one, compute is unknown, not 0)."""
    ops = gpu.gpu_ops(kernels.ops, memcpys, memsets)
    trace_window = gpu.analysis_window(ops)
    if trace_window is None:
        return [], [], None
    owner = _owners(kernels, memcpys, memsets)
    nvtx_pid = pid_of(nvtx["global_tid"].to_numpy()) if len(nvtx) else np.zeros(0, np.int64)
    rows, busy = [], []
    for dev in ops.devices():
        pid = owner.get(dev)
        mine = nvtx[nvtx_pid == pid] if pid is not None else nvtx.iloc[0:0]
        row, passed = _device_row(label, dev, pid, mine, ops.on_device(dev), memcpys, trace_window, gpu_names, opts)
        if not kernels_recorded:
            row["compute_utilization"] = None
        rows.append(row)
        window = (row["window_start_ns"], row["window_start_ns"] + row["window_ns"])
        busy.append(bin_busy(passed.busy, window, opts.bin_ns).assign(gpu=row["gpu"]))
    return rows, busy, trace_window


def _owners(kernels: KernelDigest, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> dict[int, int]:
    """device -> the process driving it: the one that launched most kernel time on it, or, on a GPU without kernels
    (an export without a kernel table), the one whose copies and memsets took most time on it."""
    owner = {int(d): int(p) for d, p in kernels.driving_process().itertuples(index=False, name=None)}
    ops = pd.concat([part for df in (memcpys, memsets) if len(df) for part in _op_time(df)]) \
        if len(memcpys) or len(memsets) else None
    if ops is not None:
        by = ops.groupby(["device", "pid"], as_index=False)["ns"].sum().sort_values("ns", ascending=False)
        for d, p in by.drop_duplicates("device")[["device", "pid"]].itertuples(index=False, name=None):
            owner.setdefault(int(d), int(p))
    return owner


def _op_time(ops) -> Iterator[pd.DataFrame]:
    """device, pid and ns (duration) of each operation of a table: a frame, or SpilledOps (a long capture's memsets in
    temporary files) summed per device and process a chunk at a time, which the caller's sum then adds up."""
    if not isinstance(ops, SpilledOps):
        yield ops[["device", "pid"]].assign(ns=(ops["end_ns"] - ops["start_ns"]).to_numpy())
        return
    for c in ops.chunks(("device", "pid", "start_ns", "end_ns")):
        part = pd.DataFrame({"device": c["device"], "pid": c["pid"], "ns": c["end_ns"] - c["start_ns"]}, copy=False)
        yield part.groupby(["device", "pid"], as_index=False)["ns"].sum()


def _device_row(label: str, dev: int, pid, mine: pd.DataFrame, dev_ops: gpu.GpuOps, memcpys: pd.DataFrame,
                trace_window: tuple[int, int], gpu_names: dict, opts: RankOptions) -> tuple[dict, gpu.DevicePass]:
    """One GPU's row over its steps (`mine`: the NVTX ranges of the process driving it), and its device pass."""
    steps = cpu.steps(mine, opts.step_regex, None, None)
    outputs = cp.big_copies(memcpys[(memcpys["device"] == dev) & (memcpys["start_ns"] >= steps["start_ns"].min())]
                            if len(steps) else memcpys.iloc[0:0], "DtoH")
    window = step_window(steps, dev_ops, outputs) or trace_window
    passed = gpu.device_pass(dev_ops, window, opts.min_gap_ns)
    util, idle_gaps = passed.util, passed.gaps
    # what the compute engine waited for: gaps between kernels, covered by the rank's own NVTX ranges
    kern = dev_ops.kernels()
    compute_gaps = gpu.device_pass(kern, window, opts.min_gap_ns).gaps
    cover = (cpu.gap_cover_by_range(compute_gaps, mine, set(mine["global_tid"]), opts.step_regex)
             if len(mine) and len(compute_gaps) else pd.DataFrame(columns=["name", "share"]))
    d = memcpys[(memcpys["device"] == dev) & (memcpys["copy_kind"] == "DtoH")]
    d = d[(d["end_ns"] > window[0]) & (d["start_ns"] < window[1])]
    copy_cov = Coverage(*union(d["start_ns"].to_numpy(), d["end_ns"].to_numpy()))
    u = util.iloc[0]
    span = window[1] - window[0]
    drain_ns, drain_source = output_drain(mine, dev_ops, window[1])
    period = span / len(steps) if len(steps) else None
    return {
        "trace": label, "device": dev, "gpu": gpu_key(label, dev),
        "name": gpu_names.get(dev), "pid": pid, "window_start_ns": window[0], "window_ns": span,
        "window_source": "steps" if len(steps) else "first to last GPU operation",
        "utilization": float(u["utilization"]), "compute_utilization": float(u["compute_utilization"]),
        "compute_idle_ns": int(span - u["compute_ns"]),
        "idle_gaps": int(len(idle_gaps)), "idle_gap_ns": int(idle_gaps["duration_ns"].sum()),
        "idle_mostly_in": str(cover["name"].iloc[0]) if len(cover) else None,
        "idle_share": float(cover["share"].iloc[0]) if len(cover) else None,
        "steps": int(len(steps)), "steps_per_s": float(len(steps) / (span / 1e9)) if len(steps) and span else None,
        "dtoh_copies": int(len(d)), "dtoh_bytes": int(d["bytes"].sum()),
        "dtoh_gbps": gbps_of(d),
        "dtoh_pinned_share": float(d.loc[d["dst_kind"] == "Pinned", "bytes"].sum() / d["bytes"].sum())
        if d["bytes"].sum() else None,
        "dtoh_busy_share": copy_cov.total / span if span else 0.0,
        "drain_ns": drain_ns, "drain_source": drain_source,
        "backlog_steps": drain_ns / period if period else None,
    }, passed


MAX_BINS = 200_000  # per GPU in bin_busy, as copies.host_bandwidth: bins grow beyond it


def bin_busy(busy: Coverage, window: tuple[int, int], bin_ns: int) -> pd.DataFrame:
    """A GPU's busy time (any operation) per bin of its window, the last bin cut at the window's end. Columns:
    bin_start_ns, bin_ns, busy_ns."""
    lo, hi = window
    bin_ns = max(bin_ns, -(-(hi - lo) // MAX_BINS))
    edges = np.append(np.arange(lo, hi, bin_ns, dtype=np.int64), np.int64(hi))
    return pd.DataFrame({"bin_start_ns": edges[:-1], "bin_ns": np.diff(edges), "busy_ns": np.diff(busy.at(edges))})


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
    (bin_busy, with `gpu`). warnings: the trace's, each once, sorted."""
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
    rows, busy, window = _device_rows(label, kernels, memcpys, memsets, nvtx, names, opts,
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
    summary = {
        "traces": [{"label": p.label, "path": p.source, "clock_offset_ns": off, "nsys_version": p.nsys_version}
                   for p, off in zip(parts, offsets)],
        "window": {"start_ns": lo, "end_ns": hi, "duration_ns": hi - lo},
        "concurrent": concurrent,
        "gpus": json_rows(devices),
        "total_steps_per_s": float(devices["steps_per_s"].fillna(0).sum()),
        "host_dtoh": {"host": top.name, **top.summary} if several else top.summary,
        "contention": json_rows(top.contention),
        **({"hosts": [h.entry() for h in loads]} if several else {}),
        "limit": limit(ctx).as_dict(),
        "figures": ctx.figures(),
        "run": run_summary(opts.run),
    }
    warnings = [f"{p.source}: {w}" if len(parts) > 1 else w for p in parts for w in p.warnings] + _unnamed(loads)
    host, tables = _host_tables(loads)
    return Ranks(summary, devices, copies, host, {**tables, "busy": busy}, warnings)


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


# --- many GPUs at a glance (computed when shown: the JSON keeps every GPU's row) ---------------------------------

SUMMARISE_OVER = 8      # GPUs: from more than this many, the text report gives the spread instead of every row
STRAGGLER_BELOW = 0.10  # a GPU this far below the median steps/s is a straggler
SLOWEST = 3             # the slowest GPUs always named


def spread(gpus: list[dict]) -> dict:
    """The per-GPU figures of the `gpus[]` rows as median, min, p10, p90 and max (None where no GPU has the figure):
    steps/s, busy (utilization), DtoH GB/s, idle (idle_gap_ns over the GPU's window); and the slowest GPUs by
    steps/s: the SLOWEST lowest and every one more than STRAGGLER_BELOW below the median, slowest first, each with
    `below` (its shortfall from the median) and `straggler`."""
    figures = {"steps_per_s": [g.get("steps_per_s") for g in gpus],
               "utilization": [g.get("utilization") for g in gpus],
               "dtoh_gbps": [g.get("dtoh_gbps") for g in gpus],
               "idle": [g["idle_gap_ns"] / g["window_ns"] if g.get("window_ns") else None for g in gpus]}
    out = {name: _quantiles([v for v in values if v is not None and v == v]) for name, values in figures.items()}
    rated = sorted((g for g in gpus if g.get("steps_per_s")), key=lambda g: g["steps_per_s"])
    median = out["steps_per_s"]["median"] if out["steps_per_s"] else None
    slow = []
    for i, g in enumerate(rated):
        below = 1 - g["steps_per_s"] / median if median else 0.0
        if i < SLOWEST or below > STRAGGLER_BELOW:
            slow.append({"gpu": g["gpu"], "steps_per_s": g["steps_per_s"], "below": below,
                         "straggler": below > STRAGGLER_BELOW})
    out["slowest"] = slow
    return out


def _quantiles(values: list[float]) -> dict | None:
    if not values:
        return None
    v = np.asarray(values, dtype=float)
    q = np.percentile(v, [0, 10, 50, 90, 100])
    return {"median": float(q[2]), "min": float(q[0]), "p10": float(q[1]), "p90": float(q[3]), "max": float(q[4])}


@dataclass
class RankGrid:
    """Each GPU's busy share and DtoH rate per column of time on the common clock: the numbers of the rank x time
    heat map. gpus: the rows, in natural order of their names (rank2 before rank10). edges_ns: the columns' edges
    (common clock). busy: the share of each column's time within the GPU's own window (its steps) that the GPU was
    busy, NaN outside that window. dtoh_gbps: DtoH into host memory (its data-carrying copies), GB/s. hosts: with
    GPUs on several hosts, the rows ordered by host (host_order) and then by name, and each host's rows as
    (host, first row, end row) (host_rows); empty with one host."""
    gpus: list[str]
    edges_ns: np.ndarray
    busy: np.ndarray
    dtoh_gbps: np.ndarray
    hosts: list[tuple[str | None, int, int]] = field(default_factory=list)


def time_grid(ranks: Ranks, columns: int = 600) -> RankGrid:
    """Ranks' per-bin busy time (tables['busy']) and host-side DtoH (host) on at most about `columns` columns of a
    whole number of host bins; a column between two bins takes a share of each as their time in it."""
    lo, hi = ranks.summary["window"]["start_ns"], ranks.summary["window"]["end_ns"]
    base = int(ranks.summary["host_dtoh"]["bin_ns"])
    width = base * max(1, -(-(hi - lo) // (base * columns)))
    edges = np.arange(lo, hi + width, width, dtype=np.int64)
    gpus = sorted(ranks.devices["gpu"], key=natural_key)
    several = "host" in ranks.devices.columns  # merge_parts adds it only with several hosts
    if several:
        host_of = dict(zip(ranks.devices["gpu"], ranks.devices["host"]))
        gpus = sorted(gpus, key=lambda g: host_order(host_of[g]))  # stable: by name within each host
    busy = np.full((len(gpus), len(edges) - 1), np.nan)
    dtoh = np.zeros((len(gpus), len(edges) - 1))
    by_busy = dict(tuple(ranks.tables.get("busy", pd.DataFrame(columns=BUSY_COLUMNS)).groupby("gpu")))
    by_host = dict(tuple(ranks.host.groupby("gpu"))) if len(ranks.host) else {}
    for i, g in enumerate(gpus):
        if g in by_busy and len(by_busy[g]):
            b = by_busy[g]
            t, done = _cumulative(b["bin_start_ns"], b["bin_ns"], b["busy_ns"])
            inside = np.diff(np.interp(edges, t, t - t[0]))
            moved = np.diff(np.interp(edges, t, done))
            busy[i] = np.where(inside > 0, moved / np.where(inside > 0, inside, 1), np.nan)
        if g in by_host and len(by_host[g]):
            h = by_host[g]
            t, done = _cumulative(h["bin_start_ns"], h["bin_ns"], h["bytes"])
            dtoh[i] = np.diff(np.interp(edges, t, done)) / width  # bytes per ns: GB/s
    return RankGrid(gpus, edges, busy, dtoh, host_rows([host_of[g] for g in gpus]) if several else [])


def host_order(host: str | None) -> tuple:
    """Sort key of host names: in natural order (node2 before node10), the unnamed host (None) last."""
    return (host is None, natural_key(host or ""))


def host_rows(hosts: list) -> list[tuple[str | None, int, int]]:
    """Each run of equal hosts in a list of the rows' hosts (row order) as (host, first row, end row): the rows
    first..end-1 are that host's, and a row boundary between hosts lies at each block's first row but the first."""
    out = []
    for i, h in enumerate(hosts):
        if out and out[-1][0] == h:
            out[-1] = (h, out[-1][1], i + 1)
        else:
            out.append((h, i, i + 1))
    return out


def _cumulative(starts, lengths, amounts) -> tuple[np.ndarray, np.ndarray]:
    """The bins' edges and the amount up to each (linear within a bin between them)."""
    s = starts.to_numpy(dtype=np.float64)
    t = np.append(s, s[-1] + float(lengths.iloc[-1]))
    return t, np.concatenate(([0.0], np.cumsum(amounts.to_numpy(dtype=np.float64))))


def natural_key(name: str) -> list:
    """Sort key that orders the numbers in names by value: rank2:GPU 0 before rank10:GPU 0."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name))]
