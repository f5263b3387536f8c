"""One trace's rows for the GPUs side by side (rank_summary.py): each GPU, driven by the process that launched most
of its kernel time, measured over that process's own steps (its busy and compute shares, idle gaps, DtoH copies and
the drain after its last output), and its busy time per bin of that window."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np
import pandas as pd

from ...nsys_core.contracts import DRAIN_OUTPUTS

from ..common.intervals import Coverage, union
from ..load.frames import pid_of
from ..load.kernel_digest import KernelDigest
from ..load.ops_store import SpilledOps
from . import copies as cp
from . import cpu, gpu
from .sharing import gbps_of
from dataclasses import dataclass
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class RankGpu:
    """One GPU's row in the comparison (`ranks.gpus[]`)."""
    trace: str
    device: int
    gpu: str
    name: str
    pid: int
    window_start_ns: int
    window_ns: int
    window_source: str
    utilization: float
    compute_utilization: float | None
    compute_idle_ns: int
    idle_gaps: int
    idle_gap_ns: int
    idle_mostly_in: str | None
    idle_share: float | None
    steps: int
    steps_per_s: float | None
    dtoh_copies: int
    dtoh_bytes: int
    dtoh_gbps: float | None
    dtoh_pinned_share: float | None
    dtoh_busy_share: float
    drain_ns: int
    drain_source: str
    backlog_steps: float | None
    host: str | None | Absent = ABSENT


class RowOptions(Protocol):
    """What the rows read of the GPUs' comparison's options (rank_summary.RankOptions): the steps, the smallest idle
    gap counted and the busy-time bin."""
    step_regex: str
    min_gap_ns: int
    bin_ns: int


def gpu_key(label: str, device: int) -> str:
    """How a GPU is named in rows, copies and charts: 'GPU 1', or 'rank1:GPU 1' when several traces are compared."""
    return f"{label}:GPU {device}" if label else f"GPU {device}"


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


def device_rows(label: str, kernels: KernelDigest, memcpys, memsets, nvtx, gpu_names: dict, how: RowOptions,
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
        row, passed = _device_row(label, dev, pid, mine, ops.on_device(dev), memcpys, trace_window, gpu_names, how)
        if not kernels_recorded:
            row["compute_utilization"] = None
        rows.append(row)
        window = (row["window_start_ns"], row["window_start_ns"] + row["window_ns"])
        busy.append(bin_busy(passed.busy, window, how.bin_ns).assign(gpu=row["gpu"]))
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
                trace_window: tuple[int, int], gpu_names: dict, how: RowOptions) -> tuple[dict, gpu.DevicePass]:
    """One GPU's row over its steps (`mine`: the NVTX ranges of the process driving it), and its device pass."""
    steps = cpu.steps(mine, how.step_regex, None, None)
    outputs = cp.big_copies(memcpys[(memcpys["device"] == dev) & (memcpys["start_ns"] >= steps["start_ns"].min())]
                            if len(steps) else memcpys.iloc[0:0], "DtoH")
    window = step_window(steps, dev_ops, outputs) or trace_window
    passed = gpu.device_pass(dev_ops, window, how.min_gap_ns)
    util, idle_gaps = passed.util, passed.gaps
    # what the compute engine waited for: gaps between kernels, covered by the rank's own NVTX ranges
    kern = dev_ops.kernels()
    compute_gaps = gpu.device_pass(kern, window, how.min_gap_ns).gaps
    cover = (cpu.gap_cover_by_range(compute_gaps, mine, set(mine["global_tid"]), how.step_regex)
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
