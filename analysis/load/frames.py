"""Small helpers shared by the typed tables: empty frames, timed rows, process keys, nesting of ranges."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from . import sql
from .btree import Bits


def pid_of(global_id):
    """The OS pid inside nsys' globalTid / globalPid (bits 24-47); ints or numpy arrays (the SQL twin: sql.PID_OF)."""
    return (global_id >> 24) & 0xFFFFFF


def process_keys(gpu_rows: pd.DataFrame) -> list[str]:
    """Join keys from GPU rows to runtime rows: (pid, correlation_id); correlation ids repeat across processes."""
    if "pid" in gpu_rows and (gpu_rows["pid"].to_numpy() >= 0).all():
        return ["pid", "correlation_id"]
    return ["correlation_id"]


def outermost_calls(api: pd.DataFrame, start: str, end: str | None = None) -> pd.DataFrame:
    """One API row per (pid, correlation_id): the outermost call (earliest start, then longest) when several share
    the id, as in exports that record a call and a nested one (`cudaMemcpy` and `cudaMemcpy_v3020`). Joining GPU
    activity to every row would count each copy or kernel once per row."""
    keys = ["pid", "correlation_id"] if "pid" in api else ["correlation_id"]
    if api.empty or not api.duplicated(keys).any():
        return api
    order = api.assign(_neg_end=-api[end]) if end else api
    order = order.sort_values([*keys, start, *(["_neg_end"] if end else [])], kind="stable")
    return api.loc[order.index[~order.duplicated(keys)]].sort_index()


def concat_columns(chunks: Iterator[pd.DataFrame], names: list[str]) -> pd.DataFrame:
    """Integer chunks with these columns as one frame, column by column: no consolidated copy of the whole table."""
    parts = list(chunks)
    if len(parts) == 1:
        return parts[0]
    # column by column, each chunk's column dropped once copied: the table is never held twice
    return pd.DataFrame({c: np.concatenate([p.pop(c).to_numpy() for p in parts] or [np.zeros(0, np.int64)])
                         for c in names}, copy=False)


def empty(cols) -> pd.DataFrame:
    """A frame with these columns and no rows (integer where the name says so)."""
    return pd.DataFrame({c: pd.Series(dtype="int64" if c.endswith(("_ns", "_id", "device", "stream", "bytes", "tid", "pid"))
                                      else "object") for c in cols})


def shared_text(values: pd.Series) -> pd.Series:
    """The same text column holding one string object per distinct value. Text read from SQL, or made from a numpy
    array, holds a string object per row: 0.5 GiB for the 1.9 M NVTX ranges of a 32 GB capture, against 8 B a row
    shared."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    shared = np.asarray(uniques, dtype=object)[codes]
    return pd.Series(pd.array(shared, dtype=values.dtype), index=values.index, name=values.name)


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """start_ns and end_ns as int64, and duration_ns from them."""
    df["start_ns"] = df["start_ns"].astype("int64")
    df["end_ns"] = df["end_ns"].astype("int64")
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return df


def short_copy_kind(label: str) -> str:
    """'Device-to-Host' -> 'DtoH'; 'Unified Host-to-Device' -> 'Unified HtoD'; short names pass through."""
    words = {"Host": "H", "Device": "D", "Array": "A", "Peer": "P"}
    prefix = "Unified " if label.startswith("Unified ") else ""
    core = label[len(prefix):]
    if "-to-" in core:
        a, b = core.split("-to-", 1)
        if a in words and b in words:
            return f"{prefix}{words[a]}to{words[b]}"
    return label


def nesting(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent row of each range within its thread (rows sorted by thread, start, -end)."""
    n = len(df)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    tids = df["global_tid"].to_numpy()
    starts = df["start_ns"].to_numpy()
    ends = df["end_ns"].to_numpy()
    stack: list[int] = []
    prev_tid = None
    for i in range(n):
        if tids[i] != prev_tid:
            stack.clear()
            prev_tid = tids[i]
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack and ends[i] <= ends[stack[-1]]:
            parent[i] = stack[-1]
            depth[i] = depth[stack[-1]] + 1
        stack.append(i)
    return depth, parent


def pid_expr(columns: set[str], col: str = "globalPid") -> str:
    """The launching process's OS pid in SQL, or -1 where an export has no globalPid (joins then use ids alone)."""
    return sql.PID_OF.format(col=col) if "globalPid" in columns else "-1"


def pid_column(columns: set[str]) -> Bits | str:
    """pid_expr() for a big table's chunked read: Bits, which the fast reader takes too."""
    return Bits("globalPid") if "globalPid" in columns else "-1"


def in_sorted(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """np.isin(values, sorted_keys) by binary search: np.isin sorts both sides each call (per chunk of a long
    table, against hundreds of thousands of keys: minutes at 32 GB), and hashes packed keys pathologically slowly."""
    if sorted_keys.size == 0:
        return np.zeros(values.shape, dtype=bool)
    i = np.searchsorted(sorted_keys, values)
    return sorted_keys[np.minimum(i, sorted_keys.size - 1)] == values
