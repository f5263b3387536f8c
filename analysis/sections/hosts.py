"""The host-side DtoH load of several GPUs, per machine: the GPUs of one node share its host memory and PCIe, not
another node's.

Per-rank traces of a cluster name their machine (TARGET_INFO_SYSTEM_ENV's Hostname: Trace.hostname, TracePart.host).
host_loads() judges each host alone: its GPUs' DtoH into host memory per bin, its peak against its own capacity
(sharing.shared_capacity for its GPUs), its contention (copies while another GPU of the same host copies: the
copies' `concurrent_fraction` is computed within each host), and orders the hosts the limiting one first. Traces
without a host name count as one host (None), so traces of one machine, or of none known, are one host as before.
Pure functions of DataFrames and dicts.

Which host limits (how_limiting): a host is compute-bound when every one of its GPUs runs kernels at least the
gpu-compute threshold of its window (its `compute_min`). Its GPUs then limit themselves, and a DtoH slowdown on it
is hidden behind their compute; so while any host's GPUs wait, the limiting host is one of those waiting hosts: a
compute-bound host is never blamed for a waiting host's time, nor hides it behind its own slower copies. Only when
every host is compute-bound (then the cluster is: rules/ranks.py gpu-compute) is the limiting host a compute-bound
one. Within each group the DtoH decides: the contended hosts first, the slowest first; then the highest peak share.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...nsys_core.contracts import gbps

from ..common.schema import json_rows
from . import copies as cp
from .sharing import contention, shared_capacity, slowest_kind
from .sharing import Contention
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class HostDtohLoad:
    """A host's DtoH load into its memory against its capacity."""
    host: str | None | Absent = ABSENT
    bin_ns: int
    peak_gbps: float
    mean_gbps: float
    capacity_gbps: float
    capacity_source: str
    busy_share_over_half_capacity: float


@dataclass(frozen=True, kw_only=True)
class HostEntry:
    """One host of several in `ranks.hosts[]` (HostLoad.entry): its traces and GPUs, its DtoH load and contention,
    its slowest memory kind's slowdown, its peak share of its capacity, its least busy GPU's compute share."""
    host: str | None
    traces: tuple[str, ...]
    gpus: tuple[str, ...]
    total_steps_per_s: float
    host_dtoh: HostDtohLoad
    contention: tuple[Contention, ...]
    slowdown: float | None
    peak_share: float
    compute_min: float

TIMELINE_COLUMNS = ["bin_start_ns", "bin_ns", "bytes", "gbps", "gpu"]


@dataclass
class HostLoad:
    """One host's share of the host-side DtoH. name: its host name (None: the traces that record none). traces: the
    labels of its traces. gpus: its GPUs (`gpu` keys). steps_per_s: their sum. timeline: DtoH into host memory per
    bin and GPU on the common clock. total: that summed per bin. summary: its `host_dtoh` object. contention: per
    host memory kind among its own GPUs (sharing.contention). compute_min: its least busy GPU's kernel share of its
    window (0 without GPUs)."""
    name: str | None
    traces: list[str]
    gpus: list[str]
    steps_per_s: float
    timeline: pd.DataFrame
    total: pd.DataFrame
    summary: dict
    contention: pd.DataFrame
    compute_min: float = 0.0

    @property
    def slowdown(self) -> float | None:
        """Its slowest host memory kind's rate while another of its GPUs copies, over its solo rate; None unmeasured."""
        worst = slowest_kind(self.contention)
        return float(worst["slowdown"].iloc[0]) if len(worst) else None

    @property
    def peak_share(self) -> float:
        """Its DtoH peak over its capacity."""
        cap = self.summary["capacity_gbps"]
        return self.summary["peak_gbps"] / cap if cap else 0.0

    def entry(self) -> dict:
        """Its object in `ranks.hosts[]`."""
        return {"host": self.name, "traces": self.traces, "gpus": self.gpus, "total_steps_per_s": self.steps_per_s,
                "host_dtoh": self.summary, "contention": json_rows(self.contention), "slowdown": self.slowdown,
                "peak_share": self.peak_share, "compute_min": self.compute_min}


def host_loads(copies: pd.DataFrame, devices: pd.DataFrame, host_of: dict[str, str | None],
               windows: dict[str, tuple[int, int]], window: tuple[int, int], probe: dict | None, link_gbps: float,
               bin_ns: int, contended_below: float, busy_from: float) -> list[HostLoad]:
    """Every host's load, the limiting one first (how_limiting, with the rules' slowdown threshold contended_below and
    gpu-compute threshold busy_from; ties in the traces' order). copies: the data-carrying
    DtoH copies with `trace` and `concurrent_fraction` (within their host); devices: the GPU rows with `trace`;
    host_of: each trace label's host; windows: each trace's GPU activity on the common clock (traces with some);
    window: all of theirs, whose bins every host's timeline shares."""
    loads = []
    for name in dict.fromkeys(host_of[t] for t in windows):
        traces = [t for t in windows if host_of[t] == name]
        own = (min(windows[t][0] for t in traces), max(windows[t][1] for t in traces))
        rows = devices[devices["trace"].isin(traces)]
        loads.append(_host_load(name, traces, rows, copies[copies["trace"].isin(traces)], window, own, probe,
                                link_gbps, bin_ns))
    return sorted(loads, key=lambda h: how_limiting(h, contended_below, busy_from))


def how_limiting(h: HostLoad, contended_below: float, busy_from: float) -> tuple:
    """Sort key, the limiting host first: the hosts whose GPUs wait (some GPU's kernels run less than busy_from of
    its window) before the compute-bound ones; within each, the hosts whose copies run below contended_below of their
    solo rate while another of their GPUs copies, the slowest first; then the others, the highest DtoH peak against
    its capacity first."""
    s, bound = h.slowdown, h.compute_min >= busy_from
    return (bound, 0, s) if s is not None and s < contended_below else (bound, 1, -h.peak_share)


def _host_load(name, traces: list[str], rows: pd.DataFrame, copies: pd.DataFrame, window: tuple[int, int],
               own: tuple[int, int], probe: dict | None, link_gbps: float, bin_ns: int) -> HostLoad:
    """One host: its GPUs' DtoH per bin of the common window; peak, mean and busy share over its own traces' span."""
    parts = [cp.host_bandwidth(d.assign(copy_kind="DtoH"), window, "DtoH", bin_ns).assign(gpu=g)
             for g, d in copies.groupby("gpu")]
    timeline = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TIMELINE_COLUMNS)
    total = timeline.groupby("bin_start_ns", as_index=False)[["bytes", "gbps"]].sum()
    width = int(timeline["bin_ns"].iloc[0]) if len(timeline) else bin_ns
    inside = total[(total["bin_start_ns"] < own[1]) & (total["bin_start_ns"] + width > own[0])]
    capacity, source = shared_capacity(probe, len(rows), link_gbps)
    summary = {"bin_ns": width,
               "peak_gbps": float(inside["gbps"].max()) if len(inside) else 0.0,
               "mean_gbps": float(gbps(inside["bytes"].sum(), own[1] - own[0])) if own[1] > own[0] else 0.0,
               "capacity_gbps": capacity, "capacity_source": source,
               "busy_share_over_half_capacity": float((inside["gbps"] >= capacity / 2).mean()) if len(inside) else 0.0}
    return HostLoad(name, traces, rows["gpu"].tolist(), float(rows["steps_per_s"].fillna(0).sum()), timeline, total,
                    summary, contention(copies, probe, link_gbps),
                    float(rows["compute_utilization"].min()) if len(rows) else 0.0)
