r"""What the analysis keeps of the kernel table: each kernel's time, device, process and correlation id in narrow
columns, and the figures grouped by name, stream and launching process. A long capture's kernel table (27.7 M rows,
1.47 GiB as a frame on the 8 GB benchmark) is never held whole: `Builder` takes it a chunk at a time.

    kernel table (rowid chunks) --Builder.add--> ops: start_ns end_ns device correlation_id pid   (25 B a kernel)
                                             \--> by_name, by_stream, by_owner                     (a row a group)

The chunked form is exact only for a table nothing is dropped from and that is in start order (what nsys writes):
`add()` says False at the first chunk that is not, and the caller then loads the whole table (`of_frame`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from . import ops_store
from .ops_store import NARROW, ONE_VALUE, OPS, fits, one
from .validate import nameless_rows

NAME_COLUMNS = ["name", "count", "total_ns", "min_ns", "max_ns"]
CHUNK = 1 << 20  # durations made this many at a time: bounded temporaries


@dataclass
class KernelDigest:
    """The kernels as the analysis uses them. ops: one row per kernel (OPS). by_name: count, total_ns, min_ns and
    max_ns per name, in order of first appearance. by_stream: kernel time per stream, by stream. by_owner: kernel
    time per (device, pid), sorted by both."""
    ops: pd.DataFrame
    by_name: pd.DataFrame
    by_stream: pd.Series
    by_owner: pd.DataFrame
    count: int
    total_ns: int
    median_ns: float | None
    # the arrays behind ops' start_ns and end_ns where Builder made them, with room before them for the other GPU
    # operations: the device pass may write the busy union into them (gpu.Spare)
    spare_times: tuple[np.ndarray, np.ndarray] | None = None
    graph_runs: int = 0  # of `count`, the graph launches traced as a whole (Trace.graph_runs), named 'CUDA graph N'

    def without_ops(self) -> "KernelDigest":
        """The same figures with no kernel rows (an empty ops frame): what is kept once the device pass is done."""
        return replace(self, ops=pd.DataFrame({c: np.zeros(0, v.dtype) for c, v in self.ops.items()}),
                       spare_times=None)

    def names(self) -> list[str]:
        """The kernel names, in order of first appearance."""
        return self.by_name["name"].astype(str).tolist()

    def compute_stream(self) -> int | None:
        """The stream that ran most kernel time (the lowest such id on a tie); None without kernels."""
        return int(self.by_stream.idxmax()) if len(self.by_stream) else None

    def driving_process(self) -> pd.DataFrame:
        """device -> pid that launched most kernel time on it (the rank driving that GPU). Columns: device, pid."""
        if self.by_owner.empty:
            return pd.DataFrame({"device": pd.Series(dtype="int64"), "pid": pd.Series(dtype="int64")})
        t = self.by_owner.sort_values("duration_ns", ascending=False).drop_duplicates("device")
        return t[["device", "pid"]].sort_values("device", ignore_index=True)

    def top(self, n: int = 10) -> pd.DataFrame:
        """Kernels grouped by name: count, total_ns, mean_ns, min_ns, max_ns, pct of kernel time; the n largest."""
        if self.by_name.empty:
            return pd.DataFrame(columns=["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "pct"])
        g = self.by_name.set_index("name")
        g.insert(2, "mean_ns", g["total_ns"] / g["count"])
        g["pct"] = 100.0 * g["total_ns"] / g["total_ns"].sum()
        return g.sort_values("total_ns", ascending=False).head(n).reset_index()


def median(values: np.ndarray, mine: bool = False) -> float:
    """The median of integers as pandas gives it (the middle one, or the mean of the two middle ones), from one
    partitioned copy (pandas' median holds three times the column: 165 MiB on 6.9 M kernels), or from the array
    itself where it is the caller's to reorder (mine)."""
    half = values.size // 2
    kth = [half] if values.size % 2 else [half - 1, half]
    values = values if mine else values.copy()
    values.partition(kth)
    return sum(float(values[k]) for k in kth) / len(kth)


def narrow_ops(df: pd.DataFrame) -> pd.DataFrame:
    """The OPS columns of a table of GPU operations in NARROW types where its values fit, a ONE_VALUE column of one
    value as a view of it."""
    out = {}
    for c in (c for c in OPS if c in df):
        v = df[c].to_numpy()
        if c in ONE_VALUE and v.size and v.min() == v.max():
            out[c] = one(int(v[0]), NARROW[c], v.size)
        else:
            out[c] = v.astype(NARROW[c], copy=False) if fits(v, NARROW[c]) else v
    return pd.DataFrame(out, copy=False)


def of_frame(kernels: pd.DataFrame, graph_runs: int = 0) -> KernelDigest:
    """The digest of a loaded kernel table (trace.device.kernels: its names a column of text or categories), of which
    graph_runs rows are graph launches traced as a whole."""
    d = kernels["duration_ns"]
    by_name = d.groupby(kernels["name"], sort=False, observed=True).agg(["count", "sum", "min", "max"])
    by_name = by_name.reset_index().set_axis(NAME_COLUMNS, axis=1)
    ops = kernels[[c for c in OPS if c in kernels]]
    owners = _owners(kernels["device"].to_numpy(), kernels["pid"].to_numpy(), d.to_numpy())
    return KernelDigest(ops, by_name, d.groupby(kernels["stream"]).sum(), owners,
                        len(kernels), int(d.sum()) if len(kernels) else 0,
                        median(d.to_numpy()) if len(kernels) else None, graph_runs=graph_runs)


def _owners(device: np.ndarray, pid: np.ndarray, duration: np.ndarray) -> pd.DataFrame:
    """Kernel time per (device, pid), sorted by both."""
    return pd.DataFrame({"device": device, "pid": pid, "duration_ns": duration}).groupby(
        ["device", "pid"], as_index=False)["duration_ns"].sum()


class Builder:
    """A KernelDigest from the kernel table's chunks in rowid order (columns: OPS, stream, name_id), kept only while
    every chunk is clean and in start order; `capacity`: at most this many rows; `room`: that many elements more
    before the times (KernelDigest.spare_times); from ops_store.SPILL_ROWS rows on, the ops go to temporary files."""

    def __init__(self, capacity: int, room: int = 0):
        self.ops = ops_store.OpsWriter(capacity, room, spill=capacity >= ops_store.SPILL_ROWS)
        self.total_ns = self.longest_ns = 0  # the longest 0: a table of instants, which validate.clean warns of
        self.groups: dict[str, pd.DataFrame] = {}

    @property
    def rows(self) -> int:
        """The kernels taken so far."""
        return self.ops.rows

    def add(self, chunk: pd.DataFrame) -> bool:
        """Take one chunk; False (and nothing kept) where it holds a row validate.clean would drop, or starts before
        the rows before it: then only the whole table gives the same answers."""
        if chunk.empty:
            return True
        if not self.ops.accepts(chunk):
            return False
        self.ops.add(chunk)
        duration = chunk["end_ns"].to_numpy() - chunk["start_ns"].to_numpy()
        self.total_ns += int(duration.sum())
        self.longest_ns = max(self.longest_ns, int(duration.max()))
        self._group(chunk, duration)
        return True

    def _group(self, chunk: pd.DataFrame, duration: np.ndarray) -> None:
        """The chunk's sums by name id, stream and (device, pid), added to the running ones."""
        d = pd.Series(duration, copy=False)
        parts = {"name_id": d.groupby(chunk["name_id"].to_numpy(), sort=False).agg(["count", "sum", "min", "max"]),
                 "stream": d.groupby(chunk["stream"].to_numpy()).sum().to_frame("sum"),
                 "owner": _owners(chunk["device"].to_numpy(), chunk["pid"].to_numpy(), duration)}
        for key, part in parts.items():
            if key in self.groups:
                part = _combine(self.groups[key], part, key)
            self.groups[key] = part

    def done(self, texts) -> tuple[KernelDigest, list[str]] | None:
        """The digest, and a warning for name ids without text; texts(ids) -> {id: text}. None for an empty table
        or one of instants only (the whole table's load says what is wrong with it)."""
        if not self.rows or (self.rows > 1 and not self.longest_ns):
            return None
        by_id = self.groups["name_id"]
        by_name, said = _named(by_id, texts(by_id.index))
        stream, owner = self.groups["stream"]["sum"], self.groups["owner"]
        spare = None if self.ops.spill else (self.ops.times["start_ns"], self.ops.times["end_ns"])
        return KernelDigest(self.ops.done(), by_name, stream.rename_axis("stream").rename("duration_ns"), owner,
                            self.rows, self.total_ns, self._median(), spare), said

    def _median(self) -> float:
        """The kernels' median duration: from one array of them in memory, or, spilled, from passes over the files."""
        if self.ops.spill:
            return chunked_median(self.ops.time_chunks, self.rows, self.longest_ns)
        return median(self._durations(), mine=True)

    def _durations(self) -> np.ndarray:
        """Every kernel's duration, in 32 bits where the longest fits (half the memory of the times' difference)."""
        out = np.empty(self.rows, np.uint32 if self.longest_ns < 2 ** 32 else np.int64)
        start, end = self.ops.columns["start_ns"], self.ops.columns["end_ns"]
        for k in range(0, self.rows, CHUNK):
            j = min(k + CHUNK, self.rows)
            np.subtract(end[k:j], start[k:j], out=out[k:j], casting="unsafe")
        return out


RADIX_BITS = 16  # bits of the durations told apart per pass of chunked_median (a 64 K-bin count)


def chunked_median(chunks, rows: int, longest: int) -> float:
    """median() of the durations (end - start) of `rows` intervals handed over by chunks() (a fresh iterator each
    call), none longer than `longest`: each middle value found RADIX_BITS bits at a time, from the highest, by
    counting the durations that share the bits found so far (two passes for durations under 4.3 s, no copy)."""
    half = rows // 2
    kth = [half] if rows % 2 else [half - 1, half]
    return sum(float(_kth_duration(chunks, k, max(1, int(longest).bit_length()))) for k in kth) / len(kth)


def _kth_duration(chunks, k: int, bits: int) -> int:
    """The k-th smallest duration (0-based) of durations below 2**bits."""
    prefix, low = 0, bits  # the durations looked at: those whose bits from `low` up equal prefix
    while low > 0:
        step = min(RADIX_BITS, low)
        shift = low - step
        counts = np.zeros(1 << step, np.int64)
        for s, e in chunks():
            d = e - s
            d = d[(d >> low) == prefix] if low < bits else d
            counts += np.bincount((d >> shift) & ((1 << step) - 1), minlength=1 << step)
        below = np.cumsum(counts)
        digit = int(np.searchsorted(below, k, side="right"))
        k -= int(below[digit - 1]) if digit else 0
        prefix, low = (prefix << step) | digit, shift
    return prefix


def _combine(before: pd.DataFrame, more: pd.DataFrame, key: str) -> pd.DataFrame:
    """Running group figures plus a chunk's: counts and sums added, minima and maxima kept; name ids in order of
    first appearance, streams sorted, owners as groupby sorts them."""
    if key == "owner":
        both = pd.concat([before, more], ignore_index=True)
        return both.groupby(["device", "pid"], as_index=False)["duration_ns"].sum()
    both = pd.concat([before, more])
    if key == "stream":
        return both.groupby(level=0).sum()
    return both.groupby(level=0, sort=False).agg({"count": "sum", "sum": "sum", "min": "min", "max": "max"})


def _named(by_id: pd.DataFrame, texts: dict[int, str]) -> tuple[pd.DataFrame, list[str]]:
    """Figures by name id as figures by name (ids with one text merged, as Trace.names_of merges them), and a warning
    for the rows whose id has no text (shown as '?')."""
    said = nameless_rows(int(by_id.loc[[i for i in by_id.index if int(i) not in texts], "count"].sum()), "kernel")
    names = pd.Index([texts.get(int(i), "?") for i in by_id.index])
    g = by_id.groupby(names, sort=False).agg({"count": "sum", "sum": "sum", "min": "min", "max": "max"})
    g = g.reset_index().set_axis(NAME_COLUMNS, axis=1)
    g["name"] = pd.Categorical(g["name"], categories=g["name"])
    return g.astype({c: "int64" for c in NAME_COLUMNS[1:]}), said
