"""What the GPU did: busy/compute utilisation per device, idle gaps, top kernels."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import Coverage, gaps, union


def gpu_ops(kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> pd.DataFrame:
    """Every GPU operation as (start_ns, end_ns, device, activity, correlation_id)."""
    parts = [(df, a) for df, a in ((kernels, "kernel"), (memcpys, "memcpy"), (memsets, "memset")) if len(df)]
    if parts:  # numpy concatenation: pandas' concat of millions of rows costs several times more
        cols = {c: np.concatenate([df[c].to_numpy(np.int64) for df, _ in parts])
                for c in ("start_ns", "end_ns", "device", "correlation_id")}
        cols["activity"] = pd.Categorical.from_codes(
            np.concatenate([np.full(len(df), i, dtype=np.int8) for i, (df, _) in enumerate(parts)]),
            categories=[a for _, a in parts])
        return pd.DataFrame(cols)
    if not parts:
        return pd.DataFrame({"start_ns": pd.Series(dtype="int64"), "end_ns": pd.Series(dtype="int64"),
                             "device": pd.Series(dtype="int64"), "correlation_id": pd.Series(dtype="int64"),
                             "activity": pd.Series(dtype=object)})
    return pd.concat(parts, ignore_index=True)


def analysis_window(ops: pd.DataFrame, user: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """From the first GPU operation's start to the last one's end, unless the user set one."""
    if user:
        return user
    if ops.empty:
        return None
    return int(ops["start_ns"].min()), int(ops["end_ns"].max())


def utilization(ops: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """Per device: busy_ns (kernels+copies+memsets union), compute_ns (kernels union), window_ns, ratios."""
    lo, hi = window
    rows = []
    for device, d in ops.groupby("device", sort=True):
        s = d["start_ns"].clip(lo, hi).to_numpy()
        e = d["end_ns"].clip(lo, hi).to_numpy()
        busy = Coverage(*union(s, e)).total
        k = (d["activity"] == "kernel").to_numpy()
        compute = Coverage(*union(s[k], e[k])).total
        rows.append({"device": int(device), "busy_ns": busy, "compute_ns": compute, "window_ns": hi - lo,
                     "utilization": busy / (hi - lo) if hi > lo else 0.0,
                     "compute_utilization": compute / (hi - lo) if hi > lo else 0.0})
    return pd.DataFrame(rows, columns=["device", "busy_ns", "compute_ns", "window_ns", "utilization",
                                       "compute_utilization"])


def idle_gaps(ops: pd.DataFrame, window: tuple[int, int], min_gap_ns: int) -> pd.DataFrame:
    """Per device, stretches of the window with no GPU operation, at least min_gap_ns long.

    Columns: device, start_ns, end_ns, duration_ns, next_correlation_id (the op that ends the gap, -1 at the end).
    """
    lo, hi = window
    out = []
    for device, d in ops.groupby("device", sort=True):
        s, e = union(d["start_ns"].to_numpy(), d["end_ns"].to_numpy())
        g = gaps(s, e, lo, hi, min_gap_ns)
        if g.empty:
            continue
        d_sorted = d.sort_values("start_ns")
        starts = d_sorted["start_ns"].to_numpy()
        nxt = np.searchsorted(starts, g["end_ns"].to_numpy(), side="left")
        corr = d_sorted["correlation_id"].to_numpy()
        g["next_correlation_id"] = np.where(nxt < len(starts), corr[np.clip(nxt, 0, len(starts) - 1)], -1)
        g.insert(0, "device", int(device))
        out.append(g)
    if not out:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in
                             ["device", "start_ns", "end_ns", "duration_ns", "next_correlation_id"]})
    return pd.concat(out, ignore_index=True).sort_values("start_ns", ignore_index=True)


def top_kernels(kernels: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """Kernels grouped by name: count, total_ns, mean_ns, min_ns, max_ns, pct of kernel time."""
    if kernels.empty:
        return pd.DataFrame(columns=["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "pct"])
    g = kernels.groupby("name", sort=False)["duration_ns"].agg(["count", "sum", "mean", "min", "max"])
    g = g.rename(columns={"sum": "total_ns", "mean": "mean_ns", "min": "min_ns", "max": "max_ns"})
    g["pct"] = 100.0 * g["total_ns"] / g["total_ns"].sum()
    return g.sort_values("total_ns", ascending=False).head(n).reset_index()
