"""One pass over the CUDA runtime table for four reads (Trace.runtime_pass), where the fast reader can read it.

    runtime rows (chunk by chunk)  --+-- correlation id of a copy or a wait, not a launch   -> api   (sql.API_ROWS)
      start, end, globalTid,         +-- a synchronize call                                  -> sync  (sql.SYNC_CALLS)
      correlationId, nameId          +-- every row: calls per name id                        -> name_counts
                                     +-- a kernel launch: calls and time per thread          -> launches (sql.LAUNCH_STATS)
                                     +-- a set-up call, or a launch that loads its module    -> setup (sql.SETUP_CALLS)

Each read alone is a pass over the whole table (13.5 M rows in a 2 GB export): one pass and numpy masks cost less
than three of them. The rows come out as the SQL forms give them: same columns, rowid order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .btree import Bits
from .frames import in_sorted

COLUMNS = {"start": "start", "end": '"end"', "tid": "globalTid", "corr": "correlationId", "name": "nameId"}
API_COLUMNS = ["correlation_id", "pid", "api_start_ns", "api_end_ns", "api_global_tid", "api_name_id"]  # API_ROWS'
SYNC_COLUMNS = ["start_ns", "end_ns", "global_tid", "correlation_id", "name_id"]  # sql.SYNC_CALLS'
SETUP_COLUMNS = ["start_ns", "end_ns", "global_tid", "name_id"]  # sql.SETUP_CALLS'
MAX_DENSE_ID = 1 << 24  # name ids below this are counted with bincount (StringIds ids are small), others by unique


@dataclass
class Names:
    """The name ids each read keeps, and the copy and wait correlation ids, sorted (None: no copy table)."""
    sync: np.ndarray
    no_copy: np.ndarray
    launch: np.ndarray
    copy_ids: np.ndarray | None
    setup: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    slow_launch_ns: int = 1_000_000


@dataclass
class RuntimePass:
    """api: sql.API_ROWS' rows (None without a copy table); sync: sql.SYNC_CALLS' rows; name_counts: calls per name
    id; launches: per globalTid, (kernel launch calls, their total time in ns)."""
    api: pd.DataFrame | None
    sync: pd.DataFrame
    name_counts: dict[int, int]
    launches: dict[int, tuple[int, int]]
    setup: pd.DataFrame | None = None


def split(chunk: pd.DataFrame, names: Names) -> tuple:
    """One chunk's share of every read (combine() adds them up)."""
    name, corr = chunk["name"].to_numpy(), chunk["corr"].to_numpy()
    api = None
    if names.copy_ids is not None:
        api = _api_form(chunk[in_sorted(corr, names.copy_ids) & ~np.isin(name, names.no_copy)])
    sync = chunk[np.isin(name, names.sync)]
    sync = pd.DataFrame(dict(zip(SYNC_COLUMNS, (sync[c].to_numpy() for c in ("start", "end", "tid", "corr", "name")))))
    is_launch = np.isin(name, names.launch)
    launch = chunk[is_launch]
    per_tid = (launch.assign(ns=launch["end"] - launch["start"]).groupby("tid")["ns"].agg(["size", "sum"])
               if len(launch) else None)
    slow = is_launch & ((chunk["end"].to_numpy() - chunk["start"].to_numpy()) >= names.slow_launch_ns)
    setup = chunk[np.isin(name, names.setup) | slow]
    setup = pd.DataFrame(dict(zip(SETUP_COLUMNS, (setup[c].to_numpy() for c in ("start", "end", "tid", "name")))))
    return api, sync, _counts(name), per_tid, setup


def combine(parts: list[tuple]) -> RuntimePass:
    """The chunks' shares as one RuntimePass, in rowid order."""
    apis = [p[0] for p in parts]
    api = None if any(a is None for a in apis) else _concat(apis, API_COLUMNS)
    sync = _concat([p[1] for p in parts], SYNC_COLUMNS)
    counts: dict[int, int] = {}
    for ids, n in (p[2] for p in parts):
        for i, k in zip(ids.tolist(), n.tolist()):
            counts[i] = counts.get(i, 0) + k
    per_tid = [p[3] for p in parts if p[3] is not None]
    launches = {}
    if per_tid:
        total = pd.concat(per_tid).groupby(level=0).sum()
        launches = {int(t): (int(r["size"]), int(r["sum"])) for t, r in total.iterrows()}
    return RuntimePass(api, sync, counts, launches, _concat([p[4] for p in parts], SETUP_COLUMNS))


def _api_form(rows: pd.DataFrame) -> pd.DataFrame:
    """sql.API_ROWS' columns, in order: the process id is the globalTid's bits 24-47."""
    pid, tid = Bits("globalTid"), rows["tid"].to_numpy()
    values = (rows["corr"].to_numpy(), (tid >> pid.shift) & pid.mask, rows["start"].to_numpy(),
              rows["end"].to_numpy(), tid, rows["name"].to_numpy())
    return pd.DataFrame(dict(zip(API_COLUMNS, values)))


def _counts(name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(name ids, calls of each) in one chunk."""
    if len(name) and 0 <= name.min() and name.max() < MAX_DENSE_ID:
        counts = np.bincount(name)
        ids = np.flatnonzero(counts)
        return ids, counts[ids]
    return np.unique(name, return_counts=True)


def _concat(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in columns})
    return pd.concat(parts, ignore_index=True)
