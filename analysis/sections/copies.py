"""How copies between GPU and CPU behaved: per-copy table, per-direction summaries, copy-compute overlap."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...nsys_core.contracts import gbps

from ..common import defaults
from ..common.intervals import Coverage, union
from ..load.frames import process_keys
from ..common.schema import Part
from ..load.kernel_digest import KernelDigest
from ..load.trace import Trace
from . import gpu, unified, window
from .base import OPTS, SAY, TRACE, Options, Say, declare
from dataclasses import dataclass, replace
from .unified import UnifiedMemory
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class MemcpyPart:
    """The `memcpy` section: the copies by direction, their overlap with kernels, migrations, host-side DtoH load."""
    dtoh: CopyDirection
    htod: CopyDirection
    dtod: CopyDirection
    overlap_fraction: float | None
    dtoh_on_compute_stream: float | None
    compute_stream: int | None
    unified: UnifiedMemory | None
    dtoh_host: DtohHost | Absent = ABSENT


@dataclass(frozen=True, kw_only=True)
class CopyDirection:
    """One direction's copies: counts, bytes, times, host memory kinds, how they were issued."""
    count: int
    bytes: int
    total_ns: int
    mean_ns: float
    max_ns: int
    gbps: float | None
    kinds: dict[str, int]
    kind_bytes: dict[str, int]
    memory_kinds: dict[str, int]
    sync: int
    async_: int
    blocking: int
    streams: tuple[int, ...]
    overlap_fraction: float | None


@dataclass(frozen=True, kw_only=True)
class DtohHost:
    """DtoH bytes into host memory per bin, summed over the devices."""
    bin_ns: int
    peak_gbps: float | None
    mean_gbps: float | None
    devices: tuple[int, ...]


def copy_table(memcpys: pd.DataFrame, api: pd.DataFrame, kernels: pd.DataFrame | None,
               kernel_time: dict[int, Coverage] | None = None) -> pd.DataFrame:
    """Each copy joined to its API call (api_name, sync, tid) with overlap_ns: time a kernel ran on the same device.
    kernel_time: each device's kernel time at least where copies run (gpu.DevicePass.kernels_at_copies; a device
    missing there has none), else it is built here from `kernels`."""
    keys = process_keys(memcpys)
    df = memcpys.merge(api if "pid" in keys else api.drop(columns="pid", errors="ignore"), on=keys, how="left")
    df["sync"] = df["sync"].astype("boolean")
    # the call returned only once the copy had finished: the launching thread was held for it
    df["blocking"] = (df["api_end_ns"] >= df["end_ns"]).astype("boolean")
    df["overlap_ns"] = 0
    for device, idx in df.groupby("device").groups.items():
        cov = _kernel_time(kernels, device) if kernel_time is None else kernel_time.get(int(device), NO_TIME)
        rows = df.loc[idx]
        df.loc[idx, "overlap_ns"] = cov.within(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
    df["overlapped"] = df["overlap_ns"] > 0
    return df.sort_values("start_ns", ignore_index=True)


NO_TIME = Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))


def _kernel_time(kernels: pd.DataFrame, device) -> Coverage:
    """The device's kernel time as a Coverage: from the two time columns alone (a long capture holds millions of
    kernels: no copy of the whole frame, and none at all on one device)."""
    on = kernels["device"].to_numpy() == device
    s, e = kernels["start_ns"].to_numpy(), kernels["end_ns"].to_numpy()
    return Coverage(*(union(s, e) if on.all() else union(s[on], e[on])))


def copy_summary(copies: pd.DataFrame, kind: str) -> CopyDirection:
    """count, bytes, total_ns, mean_ns, max_ns, gbps (bytes over summed time), kinds {src->dst: n}, sync/async, streams."""
    d = copies[copies["copy_kind"] == kind]
    if d.empty:
        return CopyDirection(count=0, bytes=0, total_ns=0, mean_ns=0, max_ns=0, gbps=None, kinds={}, kind_bytes={},
                             memory_kinds={}, sync=0, async_=0, blocking=0, streams=(), overlap_fraction=None)
    total = int(d["duration_ns"].sum())
    host_kind = d["dst_kind"] if kind.endswith("toH") else d["src_kind"]
    return CopyDirection(
        count=int(len(d)), bytes=int(d["bytes"].sum()), total_ns=total,
        mean_ns=float(d["duration_ns"].mean()), max_ns=int(d["duration_ns"].max()),
        gbps=float(gbps(d["bytes"].sum(), total)) if total else None,
        kinds={str(k): int(v) for k, v in host_kind.value_counts().items()},
        # where the bytes went: 15 pinned scalar reads beside 15 pageable 0.2 GB copies are a pageable direction
        kind_bytes={str(k): int(v) for k, v in d["bytes"].groupby(host_kind, observed=True).sum().sort_values(ascending=False).items()},
        memory_kinds={f"{s}->{t}": int(v) for (s, t), v in d.groupby(["src_kind", "dst_kind"]).size().items()},
        sync=int((d["sync"] == True).sum()), async_=int((d["sync"] == False).sum()),  # noqa: E712 (nullable)
        blocking=int((d["blocking"] == True).sum()),  # noqa: E712
        streams=tuple(sorted(int(s) for s in d["stream"].unique())),
        overlap_fraction=float(d["overlap_ns"].sum() / total) if total else None,
    )


def overlap_fraction(copies: pd.DataFrame) -> float | None:
    """Share of all copy time during which a kernel ran on the same device."""
    total = copies["duration_ns"].sum()
    return float(copies["overlap_ns"].sum() / total) if total else None


def big_copies(copies: pd.DataFrame, kind: str = "DtoH", min_fraction: float = 0.5, min_bytes: int = 0
               ) -> pd.DataFrame:
    """The copies that carry the data (at least min_fraction of the largest, and at least min_bytes), not the scalar
    reads."""
    d = copies[copies["copy_kind"] == kind]
    if d.empty:
        return d
    return d[d["bytes"] >= max(min_fraction * d["bytes"].max(), min_bytes)]


def host_bandwidth(copies: pd.DataFrame, window: tuple[int, int], kind: str = "DtoH",
                   bin_ns: int = defaults.BIN_NS, max_bins: int = 200_000) -> pd.DataFrame:
    """Bytes moving between host and devices per time bin, summed over every device of the trace.

    Each copy's bytes are spread evenly over its duration; the cumulative bytes are piecewise linear between copy
    starts and ends, so interpolating them at the bin edges is exact, in O((copies + bins) log). Bins grow when
    the window would need more than `max_bins`. Columns: bin_start_ns, bin_ns, bytes, gbps. With several GPUs this
    is the host-side load they share (link, memory bandwidth), which no single device's view shows.
    """
    lo, hi = window
    bin_ns = max(bin_ns, -(-(hi - lo) // max_bins))
    edges = np.arange(lo, hi + bin_ns, bin_ns, dtype=np.int64)
    d = copies[copies["copy_kind"] == kind]
    if d.empty:
        moved = np.zeros(len(edges) - 1)
    else:
        s, e = d["start_ns"].to_numpy(), np.maximum(d["end_ns"].to_numpy(), d["start_ns"].to_numpy() + 1)
        rate = d["bytes"].to_numpy(dtype=float) / (e - s)
        t = np.concatenate((s, e))
        dr = np.concatenate((rate, -rate))
        order = np.argsort(t, kind="stable")
        t, dr = t[order], dr[order]
        r = np.cumsum(dr)                                          # rate after each event
        cum = np.concatenate(([0.0], np.cumsum(r[:-1] * np.diff(t))))  # bytes moved up to each event
        moved = np.diff(np.interp(edges, t, cum))
    return pd.DataFrame({"bin_start_ns": edges[:-1], "bin_ns": bin_ns, "bytes": moved, "gbps": moved / bin_ns})


def copies_on_compute_stream(copies: pd.DataFrame, s: int | None, kind: str = "DtoH") -> float | None:
    """Share of the big copies of this kind on stream s, the one that runs most kernel time (KernelDigest.
    compute_stream); None without either."""
    d = big_copies(copies, kind)
    if s is None or d.empty:
        return None
    return float(np.mean(d["stream"].to_numpy() == s))


def part(memcpys: pd.DataFrame, memcpy_api, kernels, kernel_time, compute_stream, window, bin_ns: int,
         kernels_recorded: bool) -> Part:
    """The `memcpy` section and its tables (memcpy: every copy joined to its API call; dtoh_host_timeline).
    memcpy_api: the calls behind the copies (a callable: read only when there are copies)."""
    copies = copy_table(memcpys, memcpy_api(), kernels, kernel_time) if len(memcpys) else memcpys.assign(
        sync=pd.Series(dtype="boolean"), overlap_ns=pd.Series(dtype="int64"), overlapped=pd.Series(dtype=bool),
        api_name=pd.Series(dtype=object), tid=pd.Series(dtype="int64"), blocking=pd.Series(dtype="boolean"),
        api_start_ns=pd.Series(dtype="int64"), api_end_ns=pd.Series(dtype="int64"),
        api_global_tid=pd.Series(dtype="int64"))
    tables = {"memcpy": copies}
    out = MemcpyPart(dtoh=copy_summary(copies, "DtoH"), htod=copy_summary(copies, "HtoD"),
                     dtod=copy_summary(copies, "DtoD"), overlap_fraction=overlap_fraction(copies),
                     dtoh_on_compute_stream=copies_on_compute_stream(copies, compute_stream),
                     compute_stream=compute_stream, unified=unified.summary(copies, window))
    if not kernels_recorded:  # overlap with kernels nobody recorded: unknown
        out = replace(out, dtoh=replace(out.dtoh, overlap_fraction=None), htod=replace(out.htod, overlap_fraction=None),
                      dtod=replace(out.dtod, overlap_fraction=None), overlap_fraction=None)
    if window is not None:
        timed = copies[copies["duration_ns"].to_numpy() > 0] if len(copies) else copies  # a rate needs a time
        host = host_bandwidth(timed, window, "DtoH", bin_ns)
        tables["dtoh_host_timeline"] = host
        out = replace(out, dtoh_host=DtohHost(
            bin_ns=int(host["bin_ns"].iloc[0]) if len(host) else bin_ns,
            peak_gbps=float(host["gbps"].max()) if len(host) else None,
            mean_gbps=float(gbps(host["bytes"].sum(), window[1] - window[0])) if len(host) else None,
            devices=tuple(sorted(int(x) for x in copies.loc[copies["copy_kind"] == "DtoH", "device"].unique()))))
    return Part(out, tables)


def memcpy_part(trace: Trace, memcpys: pd.DataFrame, copy_kernels: pd.DataFrame | None,
                kernel_time: dict[int, Coverage] | None, digest: KernelDigest, window_ns: tuple[int, int] | None,
                opts: Options, kernels_recorded: bool, say: Say) -> Part:
    """The `memcpy` section; the runtime calls it joined are let go after it (a long capture's millions of calls)."""
    say("joining copies to their API calls")
    out = part(memcpys, lambda: trace.calls.memcpy_api, copy_kernels, kernel_time, digest.compute_stream(), window_ns,
               opts.bin_ns, kernels_recorded)
    trace.forget("calls.api_rows", "calls.memcpy_api")  # in the copy table now
    return out


declare(memcpy_part, needs=lambda: (TRACE, window.GpuRows.memcpys, gpu.PassedOver.copy_kernels,
                                    gpu.PassedOver.kernel_time, gpu.PassedOver.digest, window.window_ns, OPTS,
                                    gpu.PassedOver.kernels_recorded, SAY), part="memcpy", json_at=30, tables_at=30)
