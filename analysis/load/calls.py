"""The CUDA API calls behind the GPU work, as typed tables: the call behind each copy, the host waits, the kernel
launches per thread, the launching thread of an operation."""
from __future__ import annotations

import re
import threading
from functools import cached_property

import numpy as np
import pandas as pd

from ..common import cuda_api
from . import runtime_calls, sql, validate
from .btree import Bits, In, Touches
from .frames import empty, outermost_calls, pid_of, process_keys, timed

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
IDS_PER_QUERY = 900  # launch_threads: SQLite allows 999 parameters a statement
# the fast reader's form of sql.RUNTIME_FOR_CORRELATIONS: the same columns, in order
LAUNCH_THREAD_COLUMNS = {"correlation_id": "correlationId", "pid": Bits("globalTid"), "global_tid": "globalTid",
                         "api_start_ns": "start", "api_end_ns": '"end"'}
API_COLUMNS = ["correlation_id", "pid", "api_start_ns", "api_end_ns", "api_global_tid", "api_name"]
# thread_calls: what it reads of the runtime table, and the columns it gives
THREAD_CALL_READ = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "correlation_id": "correlationId",
                    "name_id": "nameId"}
THREAD_CALL_COLUMNS = ["start_ns", "end_ns", "global_tid", "correlation_id", "name"]
LEAD_NS = 100_000_000  # thread_calls reads the calls that started this long before the window too (a long sync)
SORT_CHECK_ROWS = 64  # rows each side of a bisection bound checked to be in start order


class CudaCalls:
    """The CUDA runtime side of one export (trace: its load.trace.Trace)."""

    def __init__(self, trace):
        self.trace = trace
        self._pass_lock = threading.Lock()  # runtime_pass: read once, whichever thread asks first

    @cached_property
    def api_rows(self) -> pd.DataFrame:
        """Runtime rows behind every copy and every host wait, in one scan of the runtime table."""
        t = self.trace
        if not (t.has(RUNTIME) and t.has(MEMCPY)):
            return empty(API_COLUMNS)
        both = self.runtime_pass()
        rows = both.api if both is not None else None
        if both is not None:
            both.api = None  # handed over: held here alone, so that forgetting api_rows frees them
        if rows is None:
            skip = self._name_ids(sql.NO_COPY_NAME_IDS, cuda_api.NO_COPY)
            rows = t.query(sql.API_ROWS.format(sync=self._sync_table(),
                                               launches=",".join(str(int(i)) for i in skip) or "-1"))
        df = outermost_calls(t.checked(rows, "CUDA API (copy and wait calls)", ("api_global_tid",),
                                       times=("api_start_ns", "api_end_ns")), "api_start_ns", "api_end_ns")
        ids = df.pop("api_name_id")
        df["api_name"] = ids.map(t.strings(ids.unique())).fillna("?")
        return df

    def runtime_pass(self) -> runtime_calls.RuntimePass | None:
        """The copy and wait calls, the synchronize calls, the calls per name and the launches per thread, in one
        pass of the fast reader (load.runtime_calls); None where it cannot read the whole table."""
        with self._pass_lock:
            if not hasattr(self, "_runtime_pass"):
                self._runtime_pass = self._read_runtime_pass()
            return self._runtime_pass

    def _read_runtime_pass(self) -> runtime_calls.RuntimePass | None:
        t = self.trace
        if t.reader.pages is None or not t.has(RUNTIME):
            return None
        copy_ids = None
        if t.has(MEMCPY):
            copy_ids = [i for (i,) in t.connection().execute(sql.COPY_AND_WAIT_IDS.format(sync=self._sync_table()))
                        if i is not None]
            if not all(isinstance(i, int) for i in copy_ids):
                return None  # SQL's rules decide whether a float id matches

        def ids(statement: str, pattern: re.Pattern) -> np.ndarray:
            return np.array(list(self._name_ids(statement, pattern)), np.int64)
        names = runtime_calls.Names(ids(sql.SYNC_NAME_IDS, cuda_api.SYNC), ids(sql.NO_COPY_NAME_IDS, cuda_api.NO_COPY),
                                    ids(sql.LAUNCH_NAME_IDS, cuda_api.LAUNCH),
                                    None if copy_ids is None else np.unique(np.array(copy_ids, np.int64)),
                                    ids(sql.SETUP_NAME_IDS, cuda_api.SETUP), cuda_api.SLOW_LAUNCH_NS)
        parts = t.reader.page_reduce(RUNTIME, runtime_calls.COLUMNS, lambda chunk: runtime_calls.split(chunk, names))
        return None if parts is None else runtime_calls.combine(parts)

    def _name_ids(self, statement: str, pattern: re.Pattern) -> dict[int, str]:
        """{string id: name} of the API names a sql.*_NAME_IDS statement finds that match the pattern."""
        return {i: v for i, v in self.trace.connection().execute(statement) if pattern.match(v)}

    def _sync_table(self) -> str:
        """sql.API_ROWS' {sync}: the waits' correlation ids too, where the export has them."""
        return (" UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
                if self.trace.has("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") else "")

    @cached_property
    def memcpy_api(self) -> pd.DataFrame:
        """The runtime call behind each copy: correlation_id, api_name, api times, api_global_tid, tid, sync.

        sync: the program asked to wait for the copy, by a synchronous API or by a stream/context
        synchronize right after it (what torch's `.cpu()` and `copy_()` without non_blocking do).
        """
        t = self.trace
        if not (t.has(MEMCPY) and t.has(RUNTIME)):
            return empty([*API_COLUMNS, "sync", "tid"])
        t.background.wait("calls.api_rows")
        rows = self.api_rows
        keys = process_keys(t.device.memcpys)
        df = rows.merge(t.device.memcpys[keys].drop_duplicates(), on=keys, how="inner")
        df["tid"] = df["api_global_tid"] & 0xFFFFFF
        df["sync"] = ~df["api_name"].str.contains("Async", regex=False) | _synchronized_after(df, rows)
        return df.reset_index(drop=True)

    @cached_property
    def api_by_thread(self) -> pd.DataFrame:
        """Kernel launch calls (cuda/cu...Launch...) per thread and name: global_tid, name, count, total_ns."""
        t = self.trace
        if not t.has(RUNTIME):
            return empty(["global_tid", "name", "count", "total_ns"])
        names = self._name_ids(sql.LAUNCH_NAME_IDS, cuda_api.LAUNCH)
        if not names:
            return empty(["global_tid", "name", "count", "total_ns"])
        ids = ",".join(str(int(i)) for i in names)
        query = (sql.API_BY_THREAD_PER_CALL if self.has_twins() else
                 sql.API_BY_THREAD_DISTINCT if self.rows_repeat() else sql.API_BY_THREAD)
        df = t.query(query.format(ids=ids))
        df["name"] = df.pop("name_id").map(names)
        return df

    def rows_repeat(self) -> bool:
        """Whether the export's runtime rows repeat (its synchronize calls' validation says so): counts then leave
        the repeats out."""
        self.trace.background.wait("calls.sync_calls")
        return any("repeat" in w for w in self._syncs[1])

    def launch_stats(self, tids) -> tuple[int, int]:
        """(calls, total_ns) of the kernel launches the given threads made: one filtered scan, no grouping."""
        tids = sorted({int(t) for t in tids})
        if not tids or not self.trace.has(RUNTIME):
            return 0, 0
        names = list(self._name_ids(sql.LAUNCH_NAME_IDS, cuda_api.LAUNCH))
        if not names:
            return 0, 0
        repeats, twins = self.rows_repeat(), self.has_twins()
        both = None if repeats or twins else self.runtime_pass()
        if both is not None:
            mine = [both.launches[t] for t in tids if t in both.launches]
            return sum(n for n, _ in mine), sum(ns for _, ns in mine)
        query = sql.LAUNCH_STATS_PER_CALL if twins else sql.LAUNCH_STATS_DISTINCT if repeats else sql.LAUNCH_STATS
        row = self.trace.connection().execute(query.format(tids=",".join(map(str, tids)),
                                                           ids=",".join(str(int(i)) for i in names))).fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    @property
    def sync_calls(self) -> pd.DataFrame:
        """Calls that block the host until the GPU catches up: stream/device/event/context synchronize."""
        return self._syncs[0]

    @cached_property
    def setup_calls(self) -> pd.DataFrame:
        """One-time set-up calls (cuda_api.SETUP: the context, module loading, allocations and frees, streams) and
        kernel launches that held the thread at least cuda_api.SLOW_LAUNCH_NS (loading their module): start_ns,
        end_ns, global_tid, name (a slow launch's name says so)."""
        t = self.trace
        cols = ["start_ns", "end_ns", "global_tid", "name"]
        if not t.has(RUNTIME):
            return empty(cols)
        setup, launches = self._name_ids(sql.SETUP_NAME_IDS, cuda_api.SETUP), \
            self._name_ids(sql.LAUNCH_NAME_IDS, cuda_api.LAUNCH)
        both = self.runtime_pass()
        rows = both.setup if both is not None else None
        if rows is None:
            rows = t.query(sql.SETUP_CALLS.format(ids=",".join(str(int(i)) for i in setup) or "-1",
                                                  launches=",".join(str(int(i)) for i in launches) or "-1",
                                                  slow=cuda_api.SLOW_LAUNCH_NS))
        df = timed(validate.clean(rows, "CUDA set-up calls", ("global_tid",))[0])
        names = {**{i: cuda_api.base_name(v) for i, v in setup.items()},
                 **{i: f"{cuda_api.base_name(v)} (loading its module)" for i, v in launches.items()}}
        df["name"] = df.pop("name_id").map(names).fillna("?")
        return _outermost(df[cols]).reset_index(drop=True)

    @cached_property
    def _twins(self) -> bool:
        t = self.trace
        return t.has(RUNTIME) and "callchainId" in t.columns(RUNTIME) and t.one_row(sql.HAS_CALLCHAINS) is not None

    def has_twins(self) -> bool:
        """Whether the export holds CUDA backtraces (nsys --cudabacktrace), with which nsys 2024.2 records some calls
        twice under one correlation id: counts are then made per call."""
        return self._twins

    @cached_property
    def _syncs(self) -> tuple[pd.DataFrame, list[str]]:
        """sync_calls, and what their validation dropped (its own: other threads add to `warnings` meanwhile)."""
        t = self.trace
        cols = ["start_ns", "end_ns", "duration_ns", "global_tid", "correlation_id", "name"]
        if not t.has(RUNTIME):
            return empty(cols), []
        names = self._name_ids(sql.SYNC_NAME_IDS, cuda_api.SYNC)
        if not names:
            return empty(cols), []
        both = self.runtime_pass()
        rows = both.sync if both is not None else None
        if rows is None:
            rows = t.query(sql.SYNC_CALLS.format(ids=",".join(str(int(i)) for i in names)))
        df, said = validate.clean(rows, "CUDA synchronize calls", ("global_tid",))
        t.warnings += said
        df = timed(df)
        if self.has_twins():  # one row per call: the outermost of a call and its backtrace twin
            pid = pid_of(df["global_tid"].to_numpy(np.int64))
            df = outermost_calls(df.assign(pid=pid), "start_ns", "end_ns").drop(columns="pid")
            df = df.reset_index(drop=True)
        df["name"] = df.pop("name_id").map(names)
        return df, said

    def launch_threads(self, correlation_ids) -> pd.DataFrame:
        """correlation_id -> global_tid of the runtime call that launched it (for a few ids; the outermost call where
        several share an id)."""
        t = self.trace
        ids = sorted({int(i) for i in correlation_ids})
        if not ids or not t.has(RUNTIME):
            return empty(["correlation_id", "pid", "global_tid", "api_start_ns", "api_end_ns"])
        df = t.reader.page_columns(RUNTIME, LAUNCH_THREAD_COLUMNS, (In("correlationId", tuple(ids)),))
        if df is not None:  # in the order of the SQL reads below: by batch of ids, then by rowid
            batch = np.searchsorted(ids, df["correlation_id"].to_numpy()) // IDS_PER_QUERY
            df = df.iloc[np.argsort(batch, kind="stable")].reset_index(drop=True)
        else:
            df = pd.concat([t.query(sql.RUNTIME_FOR_CORRELATIONS.format(ids=",".join("?" * len(part))), part)
                            for k in range(0, len(ids), IDS_PER_QUERY) for part in [ids[k:k + IDS_PER_QUERY]]],
                           ignore_index=True)
        return outermost_calls(df, "api_start_ns", "api_end_ns")


    def thread_calls(self, tids, lo: int, hi: int) -> pd.DataFrame:
        """Every CUDA runtime and driver call of these threads overlapping [lo, hi): start_ns, end_ns, global_tid,
        correlation_id, name; the outermost where calls nest (a runtime call's driver calls). One filtered read of the
        table (the replay of a few steady iterations: rules/prediction.py)."""
        t = self.trace
        tids = tuple(sorted({int(x) for x in tids}))
        if not tids or not t.has(RUNTIME):
            return empty(THREAD_CALL_COLUMNS)
        filters = (Touches(np.array([lo]), np.array([hi])), In("globalTid", tids))
        rows = self._rowids_between(lo - LEAD_NS, hi)
        df = (t.reader.table_columns(RUNTIME, THREAD_CALL_READ, filters) if rows is None else
              pd.concat(list(t.reader.int_column_ranges(RUNTIME, THREAD_CALL_READ, [(*rows, filters)])),
                        ignore_index=True))
        df = df[(df["end_ns"] > lo) & (df["start_ns"] < hi) & (df["end_ns"] >= df["start_ns"])]
        if df.empty:
            return empty(THREAD_CALL_COLUMNS)
        df = outermost_calls(df.assign(pid=pid_of(df["global_tid"].to_numpy(np.int64))), "start_ns", "end_ns")
        ids = df.pop("name_id")
        df["name"] = ids.map(t.strings(ids.unique())).fillna("?").to_numpy(object)
        return df.drop(columns="pid").sort_values("start_ns", kind="stable").reset_index(drop=True)

    def _rowids_between(self, lo: int, hi: int) -> tuple[int, int] | None:
        """(a, b]: the rowids of the runtime rows starting in [lo, hi), where the table is in start order (nsys
        exports it so; checked at both ends), found by bisection; None where it is not, or has no rowid order."""
        con = self.trace.connection()
        # one MIN and one MAX a statement: SQLite answers each from the b-tree's edge, both together by a full scan
        first = (con.execute(f"SELECT MIN(rowid) FROM {RUNTIME}").fetchone()[0],
                 con.execute(f"SELECT MAX(rowid) FROM {RUNTIME}").fetchone()[0])
        if first[0] is None:
            return None

        def start_at(r: int) -> int | None:
            row = con.execute(f"SELECT start FROM {RUNTIME} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (r,)).fetchone()
            return None if row is None else int(row[0])

        def first_at_or_after(t: int) -> int:
            a, b = int(first[0]), int(first[1]) + 1  # the answer lies in [a, b]
            while a < b:
                m = (a + b) // 2
                s = start_at(m)
                if s is None or s >= t:
                    b = m
                else:
                    a = m + 1
            return a
        a, b = first_at_or_after(lo), first_at_or_after(hi)
        if not self._sorted_near(con, a, b):
            return None
        return a - 1, b - 1

    @staticmethod
    def _sorted_near(con, a: int, b: int) -> bool:
        """Whether the rows around the two bounds are in start order (a table in start order throughout is what
        the bisection assumes; a few rows at each end are checked)."""
        for r in (a, b):
            starts = [x[0] for x in con.execute(f"SELECT start FROM {RUNTIME} WHERE rowid BETWEEN ? AND ? ORDER BY "
                                                "rowid", (r - SORT_CHECK_ROWS, r + SORT_CHECK_ROWS))]
            if any(y < x for x, y in zip(starts, starts[1:])):
                return False
        return True


def _outermost(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls not inside another of the same thread (a driver call nested in its runtime call, a call nsys 2024.2
    records twice): each instant counted once."""
    if len(calls) < 2:
        return calls
    d = calls.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    tid, end = d["global_tid"].to_numpy(), d["end_ns"].to_numpy()
    reach = pd.Series(end).groupby(tid).cummax().to_numpy()  # the furthest end so far on the thread
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    same = np.r_[False, tid[1:] == tid[:-1]]
    return d[~(same & (end <= before))]


def _synchronized_after(api: pd.DataFrame, rows: pd.DataFrame, within_ns: int = 1_000_000) -> np.ndarray:
    """True where the same thread calls a stream/device/context synchronize within `within_ns` after the copy call."""
    syncs = rows[rows["api_name"].str.contains(cuda_api.SYNC_AFTER_COPY, regex=True)].rename(
        columns={"api_start_ns": "start_ns", "api_global_tid": "global_tid"})
    out = np.zeros(len(api), dtype=bool)
    if api.empty or syncs.empty:
        return out
    tids = api["api_global_tid"].to_numpy()
    ends = api["api_end_ns"].to_numpy()
    for tid, st in syncs.sort_values("start_ns").groupby("global_tid")["start_ns"]:
        st = st.to_numpy()
        rows_i = np.flatnonzero(tids == tid)
        i = np.searchsorted(st, ends[rows_i], side="left")
        ok = i < len(st)
        out[rows_i[ok]] = (st[np.clip(i[ok], 0, len(st) - 1)] - ends[rows_i[ok]]) <= within_ns
    return out
