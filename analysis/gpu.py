"""What the GPU did: busy/compute utilisation per device, idle gaps, top kernels."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from nsys_transfer.analysis.intervals import Coverage, covered_sorted, gaps, union, union_sorted


def gpu_ops(kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> pd.DataFrame:
    """Every GPU operation as (start_ns, end_ns, device, activity, correlation_id, pid), in start order (kernels,
    then copies, then memsets on equal starts): device_pass() then needs no sort and no sorted copy of its own."""
    parts = [(df, a) for df, a in ((kernels, "kernel"), (memcpys, "memcpy"), (memsets, "memset")) if len(df)]
    if parts:  # numpy concatenation: pandas' concat of millions of rows costs several times more
        starts = np.concatenate([df["start_ns"].to_numpy(np.int64) for df, _ in parts])
        order = np.argsort(starts, kind="stable")  # timsort: near-linear on traces, which are mostly in time order
        in_order = bool((order[1:] > order[:-1]).all())
        del starts

        def column(values: list[np.ndarray]) -> np.ndarray:  # concatenated, then put in start order
            joined = np.concatenate(values)
            return joined if in_order else joined[order]
        cols = {c: column([df[c].to_numpy(np.int64) if c in df else np.full(len(df), -1, np.int64) for df, _ in parts])
                for c in ("start_ns", "end_ns", "device", "correlation_id", "pid")}
        codes = column([np.full(len(df), i, dtype=np.int8) for i, (df, _) in enumerate(parts)])
        cols["activity"] = pd.Categorical.from_codes(codes, categories=[a for _, a in parts])
        return pd.DataFrame(cols, copy=False)  # one block per column: no consolidated copy of millions of rows
    return pd.DataFrame({**{c: pd.Series(dtype="int64") for c in ("start_ns", "end_ns", "device", "correlation_id", "pid")},
                         "activity": pd.Series(dtype=object)})


def analysis_window(ops: pd.DataFrame, user: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """From the first GPU operation's start to the last one's end, unless the user set one."""
    if user:
        return user
    if ops.empty:
        return None
    return int(ops["start_ns"].min()), int(ops["end_ns"].max())


def idle_gaps(ops: pd.DataFrame, window: tuple[int, int], min_gap_ns: int) -> pd.DataFrame:
    """Per device, stretches of the window with no GPU operation, at least min_gap_ns long.

    Columns: device, start_ns, end_ns, duration_ns, next_correlation_id and next_pid (the op that ends the gap and
    its process; -1 at the end).
    """
    return device_pass(ops, window, min_gap_ns).gaps


class DevicePass(NamedTuple):
    """What device_pass() returns: utilisation per device, the idle gaps, the busy Coverages and each device's
    kernels at its copies."""
    util: pd.DataFrame                    # per device: busy_ns (kernels, copies, memsets), compute_ns, utilization
    gaps: pd.DataFrame                    # idle_gaps()
    busy: Coverage                        # busy time of any device
    busy_by_device: dict[int, Coverage]   # each device's busy time
    kernels_at_copies: dict[int, Coverage]  # union of each device's kernels that overlap its copies (copy_table)


def device_pass(ops: pd.DataFrame, window: tuple[int, int], min_gap_ns: int) -> DevicePass:
    """Per-device utilisation, idle_gaps() and the busy Coverages from one sort per device (large traces)."""
    lo, hi = window
    rows, gap_parts = [], []
    by_device: dict[int, Coverage] = {}
    at_copies: dict[int, Coverage] = {}
    dev = ops["device"].to_numpy()
    devices = np.unique(dev)
    act = pd.Categorical(ops["activity"])  # categorical from gpu_ops(); an empty frame may be plain
    cats = list(act.categories)
    kernel_code = cats.index("kernel") if "kernel" in cats else -1
    copy_code = cats.index("memcpy") if "memcpy" in cats else -1
    codes = np.asarray(act.codes)
    for device in devices:
        m = slice(None) if len(devices) == 1 else dev == device  # one device: no copy of every column
        s, e, order = _sorted_times(ops["start_ns"].to_numpy()[m], ops["end_ns"].to_numpy()[m], lo, hi)
        dev_codes = codes[m] if order is None else codes[m][order]
        kern = dev_codes == kernel_code
        # compute time first, its copies freed before the busy union is built (memory peaks here on long captures)
        if kern.all():
            compute = covered_sorted(s, e)
        else:
            ks, ke = s[kern], e[kern]
            reach = np.maximum.accumulate(ke)  # the latest end so far: binary-searchable, unlike the ends
            compute = covered_sorted(ks, ke, reach)
            copy = dev_codes == copy_code
            at_copies[int(device)] = _kernels_at_copies(ks, ke, reach, s[copy], e[copy])
            del ks, ke, reach, copy
        del kern, dev_codes
        bs, be = union_sorted(s, e)
        del e  # the starts stay: they find each gap's next operation below
        busy = int((be - bs).sum())
        rows.append({"device": int(device), "busy_ns": busy, "compute_ns": compute, "window_ns": hi - lo,
                     "utilization": busy / (hi - lo) if hi > lo else 0.0,
                     "compute_utilization": compute / (hi - lo) if hi > lo else 0.0})
        g = gaps(bs, be, lo, hi, min_gap_ns)
        if len(g):
            # the first operation starting at or after each gap's end (gap ends lie inside the window: the
            # clipped starts find the same one)
            nxt = np.searchsorted(s, g["end_ns"].to_numpy(), side="left")
            at = np.clip(nxt, 0, len(s) - 1) if order is None else order[np.clip(nxt, 0, len(s) - 1)]
            for col in ("correlation_id", "pid"):
                g[f"next_{col}"] = np.where(nxt < len(s), ops[col].to_numpy()[m][at], -1)
            g.insert(0, "device", int(device))
            gap_parts.append(g)
        by_device[int(device)] = Coverage(bs, be)
    util = pd.DataFrame(rows, columns=["device", "busy_ns", "compute_ns", "window_ns", "utilization",
                                       "compute_utilization"])
    gap_table = (pd.concat(gap_parts, ignore_index=True).sort_values("start_ns", ignore_index=True) if gap_parts else
                 pd.DataFrame({c: pd.Series(dtype="int64") for c in
                               ["device", "start_ns", "end_ns", "duration_ns", "next_correlation_id", "next_pid"]}))
    covs = list(by_device.values())
    if len(covs) == 1:  # already disjoint and sorted
        busy = covs[0]
    elif covs:
        busy = Coverage(*union(np.concatenate([c.s for c in covs]), np.concatenate([c.e for c in covs])))
    else:
        busy = Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))
    return DevicePass(util, gap_table, busy, by_device, at_copies)


def _kernels_at_copies(ks: np.ndarray, ke: np.ndarray, reach: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> Coverage:
    """The union of the kernels (sorted by start; reach: their latest end so far) that overlap a copy: their overlap
    with each copy is the kernel time inside it. Binary searches find each copy's candidate kernels, and the
    candidate ranges never overlap, so at most every kernel is looked at once (one long kernel under many copies)."""
    if not cs.size or not ks.size:
        return Coverage(ks[:0], ke[:0])
    us, ue = union_sorted(cs, ce)
    first = np.searchsorted(reach, us, side="right")  # every kernel before it ended by the copy's start
    last = np.searchsorted(ks, ue, side="left")       # every kernel from it on starts after the copy's end
    first[1:] = np.maximum(first[1:], last[:-1])      # both ascend: below the previous end was looked at already
    n = np.maximum(last - first, 0)
    near = np.repeat(first - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))  # ascending, no repeats
    near = near[Coverage(us, ue).touches(ks[near], ke[near])]
    return Coverage(*union_sorted(ks[near], ke[near]))


def _sorted_times(starts: np.ndarray, ends: np.ndarray, lo, hi) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Starts and ends in start order, clipped to [lo, hi], and the order applied (None: they were in order, as
    gpu_ops() gives them). The caller's arrays are never changed: a clip that cuts something works on copies."""
    order = None if bool((starts[1:] >= starts[:-1]).all()) else np.argsort(starts, kind="stable")
    s, e = (starts, ends) if order is None else (starts[order], ends[order])
    if s.size and (s[0] < lo or s[-1] > hi or ends.max() > hi or ends.min() < lo):
        s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
    return s, e, order


def driving_process(kernels: pd.DataFrame) -> pd.DataFrame:
    """device -> pid that launched most kernel time on it (the rank driving that GPU). Columns: device, pid."""
    if kernels.empty:
        return pd.DataFrame({"device": pd.Series(dtype="int64"), "pid": pd.Series(dtype="int64")})
    t = kernels.groupby(["device", "pid"], as_index=False)["duration_ns"].sum()
    t = t.sort_values("duration_ns", ascending=False).drop_duplicates("device")
    return t[["device", "pid"]].sort_values("device", ignore_index=True)


def top_kernels(kernels: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """Kernels grouped by name: count, total_ns, mean_ns, min_ns, max_ns, pct of kernel time."""
    if kernels.empty:
        return pd.DataFrame(columns=["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "pct"])
    g = kernels.groupby("name", sort=False)["duration_ns"].agg(["count", "sum", "mean", "min", "max"])
    g = g.rename(columns={"sum": "total_ns", "mean": "mean_ns", "min": "min_ns", "max": "max_ns"})
    g["pct"] = 100.0 * g["total_ns"] / g["total_ns"].sum()
    return g.sort_values("total_ns", ascending=False).head(n).reset_index()
