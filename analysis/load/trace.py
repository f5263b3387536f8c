"""A thin, read-only handle on one Nsight Systems SQLite export: `query()` returns DataFrames.

The file is opened with SQLite's `mode=ro&immutable=1`: no journal, no lock, no write, ever
(NVIDIA's own `nsys stats` adds tables to the file it reads; we do not).
"""
from __future__ import annotations

import os
import re
import sqlite3
import threading
import urllib.parse
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from nsys_transfer.nsys_core.contracts import gbps

from nsys_transfer.analysis.load import btree, kernel_digest, runtime_calls, sql, validate
from nsys_transfer.analysis.load.btree import Bits, Filter, In, Touches
from nsys_transfer.analysis.errors import TraceError
from nsys_transfer.analysis.load.inputs import resolve_input
from nsys_transfer.analysis.load.journal import committed_copy

NSYS_TABLES = {"NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_SESSION_START_TIME", "ThreadNames"}
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
UNIFIED_KINDS = ("Unified HtoD", "Unified DtoH", "Unified DtoD")  # managed-memory migrations (copyKind 11-13)
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # nsys --cuda-graph-trace=graph (its default): one row a graph launch
ACTIVITY_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS", "OSRT_API"}
SQLITE_MAGIC = b"SQLite format 3\x00"
LAUNCH_API = re.compile(r"^cu(da)?(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Launch\b|LaunchKernelEx)")
CHUNK_ROWS = 1 << 20  # rows of a big table per read: bounds what one read holds however long the capture
ZONE_ROWS = 1 << 18  # OS runtime rows per zone (osrt_zones): fine enough that a zone spans few GPU gaps
ZONE_COLUMNS = {"start": "start", "end": '"end"', "tid": "globalTid"}  # what sql.ZONE looks at
READ_THREADS = 2  # SQLite steps without the GIL: two chunk reads at once keep both cores of a small machine busy
NO_COPY_API = re.compile(r"^(cu(da)?(LaunchKernel|LaunchCooperativeKernel|LaunchKernelEx)|cuKernelGet)")
IDS_PER_QUERY = 900  # launch_threads: SQLite allows 999 parameters a statement
# the fast reader's form of sql.RUNTIME_FOR_CORRELATIONS: the same columns, in order
LAUNCH_THREAD_COLUMNS = {"correlation_id": "correlationId", "pid": Bits("globalTid"), "global_tid": "globalTid",
                         "api_start_ns": "start", "api_end_ns": '"end"'}
_UNREAD = object()  # page_reduce: a chunk the fast reader could not read
SYNC_API = re.compile(r"^(cuda(Stream|Device|Event|Ctx|Thread)Synchronize|cu(Stream|Ctx|Event)Synchronize)(_v\d+|_ptsz)*$")


def _check_sqlite_file(file: Path, path: str) -> None:
    """Cheap checks before SQLite sees the file: exists, not empty, SQLite, not truncated. path: what the user gave
    (the messages name it, not a cache entry made from it)."""
    if not file.exists():
        raise TraceError(f"{path}: no such file; give the path of an nsys export (.sqlite) or report (.nsys-rep)")
    if file.is_dir():
        raise TraceError(f"{path}: is a directory; give the path of an nsys export (.sqlite) inside it")
    size = file.stat().st_size
    if size == 0:
        raise TraceError(f"{path}: the file is empty; re-export it with `nsys export --type=sqlite REPORT.nsys-rep`")
    with open(file, "rb") as f:
        header = f.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise TraceError(f"{path}: not an SQLite file; give an nsys SQLite export "
                         "(`nsys export --type=sqlite REPORT.nsys-rep`) or the .nsys-rep itself")
    if len(header) < 100:
        raise TraceError(f"{path}: truncated SQLite file ({size} bytes); copy or re-export it again")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change_counter, valid_for = header[24:28], header[92:96]
    if pages and change_counter == valid_for and size < pages * page_size:
        raise TraceError(f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes); "
                         "copy it again or re-export it with `nsys export --type=sqlite`")


class Trace:
    """One nsys export. Use `Trace.open(path)` (accepts .sqlite, .sqlite.xz and .nsys-rep) as a context manager."""

    def __init__(self, path: str | os.PathLike, source: str | None = None):
        self.path = Path(path)
        self.source = source or str(path)
        _check_sqlite_file(self.path, self.source)
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
        self._uri, self._owner, self._local, self._prefetching = uri, threading.get_ident(), threading.local(), {}
        self._extra_cons: list[sqlite3.Connection] = []
        self._loaded: dict[str, threading.Event] = {}  # prefetch(): set once a name's frame is loaded
        self._results: dict[str, dict] = {}
        self._sync_warnings: list[str] = []
        self._runtime_lock = threading.Lock()  # runtime_pass: read once, whichever thread asks first
        self._osrt_damaged = False  # a scoped read met rows validate.clean drops: osrt_count() checks the whole table
        self.warnings: list[str] = []  # what a damaged export made us drop or replace (analysis.validate)
        try:
            self.con = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")  # some exports hold invalid UTF-8
            self.tables = {r[0] for r in self.con.execute(sql.TABLES)}
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{self.source}: unreadable SQLite ({e}); copy it again or re-export it") from None
        self._pages = btree.Pages.open(self.path, self._connection)  # the big tables' fast reader, where built
        if "StringIds" not in self.tables or not (self.tables & NSYS_TABLES):
            self.close()
            raise TraceError(f"{self.source}: an SQLite file, but not an Nsight Systems export (no StringIds or "
                             "nsys tables); export one with `nsys export --type=sqlite REPORT.nsys-rep`")
        if not (self.tables & ACTIVITY_TABLES):
            self.close()
            raise TraceError(f"{self.source}: an nsys export with no CUDA, NVTX or OS runtime tables, so nothing to "
                             "analyse; profile with `nsys profile --trace=cuda,nvtx,osrt` (or `make profile`)")

    @classmethod
    def open(cls, path: str | os.PathLike, nsys=None) -> "Trace":
        """Open a .sqlite, .sqlite.xz or .nsys-rep (exported with nsys) as a Trace, reading a committed copy."""
        local, source = resolve_input(Path(path), nsys)
        local, journal_note = committed_copy(local, source)  # never read a writer's uncommitted pages
        trace = cls(local, source)
        trace.warnings += [journal_note] if journal_note else []
        return trace

    # --- plumbing -------------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for the background loads and close the SQLite connections."""
        for t in getattr(self, "_prefetching", {}).values():
            t.join()
        for con in getattr(self, "_extra_cons", []):
            con.close()
        if getattr(self, "_pages", None) is not None:
            self._pages.close()
        if getattr(self, "con", None) is not None:
            self.con.close()
            self.con = None

    def query(self, statement: str, params=()) -> pd.DataFrame:
        """The rows of a SQL statement as a DataFrame; a TraceError when the export is damaged."""
        try:
            cur = self._connection().execute(statement, params)
            cols = [d[0] for d in cur.description]
            return pd.DataFrame.from_records(cur.fetchall(), columns=cols)
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None

    def one_row(self, statement: str) -> tuple:
        """The first row of a SQL statement (aggregates, bounds); a TraceError when the export is damaged."""
        try:
            return self._connection().execute(statement).fetchone()
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None

    def _damaged(self, e: sqlite3.DatabaseError) -> TraceError:
        return TraceError(f"{self.source}: the export is damaged or truncated ({e}); re-export it")

    def int_columns(self, table: str, columns: dict[str, str], where: str = "") -> pd.DataFrame:
        """Integer columns of a table, in one SQL scan, parsed in C by numpy (small tables, or a rowid range).

        Building a Python tuple per row (what `query()` does) costs ~4x the time and several times the
        memory on millions of rows; `group_concat` keeps the work inside SQLite and numpy. NULL reads as -1
        (validate.MISSING, which `_checked()` drops with a warning). Every group_concat walks the same scan, so
        the columns line up. Text or a float where an integer belongs (a damaged export) fails numpy's parse;
        only then is the table read again with each value's type checked (sql.int_or_missing: 1.5x the scan).
        """
        try:
            return self._parsed_columns(table, columns, where, sql.null_as_missing)
        except ValueError:
            return self._parsed_columns(table, columns, where, sql.int_or_missing)

    def _parsed_columns(self, table: str, columns: dict[str, str], where: str, as_int) -> pd.DataFrame:
        select = ", ".join(f"group_concat({as_int(expr)})" for expr in columns.values())
        texts = self.one_row(sql.INT_COLUMNS.format(select=select, table=table, where=where))
        parsed = {name: np.fromstring(text, sep=",", dtype=np.int64) if text else np.zeros(0, dtype=np.int64)
                  for name, text in zip(columns, texts)}
        if len({len(v) for v in parsed.values()}) > 1:  # numpy < 2 stops at unparsable text instead of raising
            raise ValueError("columns of different lengths")
        return pd.DataFrame(parsed, copy=False)  # one block per column: no copy of millions of rows

    def table_columns(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = ()
                      ) -> pd.DataFrame:
        """Integer columns of the rows of a big table passing the filters, read in chunks (int_column_chunks)."""
        return _concat_columns(self.int_column_chunks(table, columns, filters), list(columns))

    def int_column_chunks(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = (),
                          chunk_rows: int = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        """The rows passing the filters, in rowid ranges of chunk_rows, in order (int_column_ranges)."""
        yield from self.int_column_ranges(table, columns, [(lo, hi, filters) for lo, hi in self._rowid_ranges(
            table, chunk_rows)])

    def int_column_ranges(self, table: str, columns: dict[str, str | Bits],
                          ranges: list[tuple[int, int, tuple[Filter, ...]]]) -> Iterator[pd.DataFrame]:
        """Integer columns of each (lo, hi, filters): the rows with lo < rowid <= hi passing the filters, in order.
        The next ranges are read on background threads while the caller works on one (at most READ_THREADS + 1 in
        memory)."""
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"read-{table}") as pool:
            pending: deque = deque()
            for lo, hi, filters in ranges:
                pending.append(pool.submit(self._range_columns, table, columns, lo, hi, filters))
                if len(pending) > READ_THREADS:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()

    def _range_columns(self, table: str, columns: dict[str, str | Bits], lo: int, hi: int,
                       filters: tuple[Filter, ...]) -> pd.DataFrame:
        """One rowid range: from the table's pages where the fast reader can (btree.Pages), else through SQLite."""
        fast = self._pages.read(table, columns, lo, hi, filters) if self._pages else None
        if fast is not None:
            return pd.DataFrame(fast, copy=False)
        exprs = {name: c.sql() if isinstance(c, Bits) else c for name, c in columns.items()}
        return self.int_columns(table, exprs, sql.ROWID_CHUNK.format(lo=lo, hi=hi, where=btree.where(filters)))

    def page_reduce(self, table: str, columns: dict[str, str | Bits], reduce, filters: tuple[Filter, ...] = ()
                    ) -> list | None:
        """[reduce(frame) of each rowid chunk], in order, read by the fast reader alone (btree.Pages) on
        READ_THREADS threads; None where it cannot read every chunk (no compiled reader, a damaged export): the caller
        then asks SQLite its own question, whose answer stays exact on damaged exports."""
        if self._pages is None:
            return None

        def one(bounds: tuple[int, int]):
            got = self._pages.read(table, columns, *bounds, filters)
            return _UNREAD if got is None else reduce(pd.DataFrame(got, copy=False))
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"pages-{table}") as pool:
            parts = list(pool.map(one, self._rowid_ranges(table, CHUNK_ROWS)))
        return None if any(p is _UNREAD for p in parts) else parts

    def page_columns(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = ()
                     ) -> pd.DataFrame | None:
        """The rows passing the filters, read by the fast reader alone; None where it cannot (page_reduce)."""
        parts = self.page_reduce(table, columns, lambda df: df, filters)
        return None if parts is None else _concat_columns(iter(parts), list(columns))

    def _rowid_ranges(self, table: str, rows: int) -> list[tuple[int, int]]:
        """(lo, hi] rowid ranges of `rows` rowids covering the table; none when it is empty."""
        first, last = self.one_row(sql.ROWID_RANGE.format(table=table))
        return [] if first is None else [(lo, min(lo + rows, last)) for lo in range(first - 1, last, rows)]

    def _connection(self) -> sqlite3.Connection:
        """The main connection on the opening thread; a private one on any other (prefetch() runs there)."""
        if threading.get_ident() == self._owner:
            return self.con
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            con.text_factory = self.con.text_factory
            self._extra_cons.append(con)
        return con

    def _checked(self, df: pd.DataFrame, what: str, required: tuple[str, ...] = (),
                 times: tuple[str, str] = validate.TIMES) -> pd.DataFrame:
        """df without the rows a damaged export holds (validate.clean), each reason added to `warnings`; timed."""
        df, said = validate.clean(df, what, required, times)
        self.warnings += said
        return _timed(df) if times == validate.TIMES else df

    def prefetch_call(self, key: str, fn, *args, also: tuple[str, ...] = ()) -> None:
        """Run fn(*args) on a background thread; `result(key)` joins it and returns its value; `wait()` for a name in
        `also` (a property fn fills) joins it too."""
        box: dict = {}

        def work():
            try:
                box["value"] = fn(*args)
            except BaseException as e:  # re-raised on the caller's thread
                box["error"] = e
        t = threading.Thread(target=work, name=f"prefetch-{key}", daemon=True)
        self._prefetching.update({n: t for n in (key, *also)})
        self._results[key] = box
        t.start()

    def result(self, key: str):
        """The value a prefetch loaded under key, waiting for it; its exception re-raised here."""
        self.wait(key)
        box = self._results.pop(key)
        if "error" in box:
            raise box["error"]
        return box["value"]

    def prefetch(self, *names: str) -> threading.Thread:
        """Load the named frames (e.g. "osrt", "nvtx") on a background thread: SQLite scans without the GIL,
        so on two cores they overlap with the GPU analysis. Reading the property later waits for it."""
        loaded = {n: threading.Event() for n in names}  # wait(n) waits for n alone, not for the names after it

        def work():
            try:
                for n in names:
                    try:
                        getattr(self, n)
                    except TraceError:
                        pass  # raised again, on the caller's thread, when the property is read
                    finally:
                        loaded[n].set()
            finally:
                for event in loaded.values():
                    event.set()
        t = threading.Thread(target=work, name=f"prefetch-{'-'.join(names)}", daemon=True)
        self._prefetching.update({n: t for n in names})
        self._loaded.update(loaded)
        t.start()
        return t

    def wait(self, *names: str) -> None:
        """Wait for the prefetch of these frames (cached_property has no lock from Python 3.12 on)."""
        for n in names:
            event, t = self._loaded.get(n), self._prefetching.get(n)
            if event is not None:
                event.wait()
            elif t is not None:
                t.join()

    def forget(self, *names: str) -> None:
        """Drop loaded frames (e.g. "kernels") the caller no longer needs; reading one again loads it again."""
        for n in names:
            self.__dict__.pop(n, None)

    def has(self, table: str) -> bool:
        """Whether the export has this table."""
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        """The table's column names; empty when the table is absent."""
        return {r[0] for r in self._connection().execute(sql.COLUMNS, (table,))} if self.has(table) else set()

    # --- metadata -------------------------------------------------------------------------------
    @cached_property
    def metadata(self) -> dict:
        """The export's metadata table as a dict; empty in exports without one."""
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table):
                return dict(self._connection().execute(sql.META.format(table=table)).fetchall())
        return {}

    @cached_property
    def nsys_version(self) -> str:
        """The nsys version that exported the trace, as its metadata names it."""
        return self.metadata.get("EXPORT_PRODUCT_VERSION", "2020.x or older (no export metadata)")

    @cached_property
    def session_start_utc_ns(self) -> int | None:
        """When the capture session began (UTC ns): trace timestamps count from it; None in exports without it."""
        if not self.has("TARGET_INFO_SESSION_START_TIME"):
            return None
        row = self._connection().execute(sql.SESSION_START).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def strings(self, ids) -> dict[int, str]:
        """The string table's text for these ids (unknown and NULL ids left out)."""
        ids = sorted({int(i) for i in ids if i is not None and not pd.isna(i)})
        out: dict[int, str] = {}
        con = self._connection()
        for k in range(0, len(ids), 900):  # SQLite's parameter limit
            chunk = ids[k:k + 900]
            rows = con.execute(sql.STRINGS_FOR.format(ids=",".join("?" * len(chunk))), chunk).fetchall()
            out.update((i, str(v)) for i, v in rows if v is not None)  # a NULL value names nothing: shown as '?'
        return out

    def _enum(self, table: str, fallback: dict[int, str], col: str = "label") -> dict[int, str]:
        if self.has(table) and col in self.columns(table):
            return {**fallback, **dict(self._connection().execute(sql.ENUM.format(col=col, table=table)).fetchall())}
        return fallback

    # --- typed frames -----------------------------------------------------------------------------
    @cached_property
    def kernels(self) -> pd.DataFrame:
        """start_ns, end_ns, duration_ns, device, stream, correlation_id, pid (of the launching process), name."""
        if not self.has(KERNEL_TABLE):
            self.warnings += validate.no_kernel_table(self.tables)
            return _empty(["start_ns", "end_ns", "duration_ns", "device", "stream", "correlation_id", "pid", "name"])
        df = self.table_columns(KERNEL_TABLE, self._kernel_columns())
        df = self._checked(df, "kernel", ("device", "stream"))
        df["name"] = self._names(df.pop("name_id"), "kernel")
        return df

    @cached_property
    def off_cpu(self) -> pd.DataFrame:
        """When each thread was off the CPU, from the scheduler's events (nsys --cpuctxsw): start_ns, end_ns,
        global_tid and the name '(off CPU)' (categories), one row from a switch out to the next switch in; empty
        without SCHED_EVENTS."""
        cols = ["start_ns", "end_ns", "global_tid", "name"]
        if not self.has("SCHED_EVENTS") or not {"start", "isSchedIn", "globalTid"} <= self.columns("SCHED_EVENTS"):
            return _empty(cols)
        ev = self.int_columns("SCHED_EVENTS", {"t": "start", "tid": "globalTid", "into": "isSchedIn"})
        ev = ev[(ev["t"] >= 0) & (ev["tid"] >= 0)].sort_values(["tid", "t"], kind="stable")
        t, tid, into = (ev[c].to_numpy() for c in ("t", "tid", "into"))
        out = np.flatnonzero((into[:-1] == 0) & (into[1:] != 0) & (tid[:-1] == tid[1:]))  # out, then back in
        return pd.DataFrame({"start_ns": t[out], "end_ns": t[out + 1], "global_tid": tid[out],
                             "name": pd.Categorical(["(off CPU)"] * out.size)})

    @cached_property
    def mpi_calls(self) -> pd.DataFrame:
        """The MPI calls nsys traced (--trace=mpi: the MPI_*_EVENTS tables): start_ns, end_ns, global_tid, name
        (categories); empty without them."""
        cols = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "name_id": "textId"}
        parts = [self.int_columns(t, cols) for t in sorted(self.tables) if t.startswith("MPI_") and
                 t.endswith("_EVENTS") and {"start", "end", "globalTid", "textId"} <= self.columns(t)]
        parts = [p for p in parts if len(p)]
        if not parts:
            return _empty(["start_ns", "end_ns", "global_tid", "name"])
        df = self._checked(pd.concat(parts, ignore_index=True), "MPI call", ("global_tid",))
        df["name"] = self._names(df.pop("name_id"), "MPI call")
        return df[["start_ns", "end_ns", "global_tid", "name"]].sort_values("start_ns", ignore_index=True)

    def full_kernel_names(self, names: list[str]) -> dict[str, str]:
        """{short name: demangled name} for a few kernel names (the top kernels'); empty where the export has no
        demangled names."""
        if not names or not self.has(KERNEL_TABLE) or "demangledName" not in self.columns(KERNEL_TABLE) or \
                "shortName" not in self.columns(KERNEL_TABLE):
            return {}
        con = self._connection()
        ids = con.execute(f"SELECT id, value FROM StringIds WHERE value IN ({','.join('?' * len(names))})",
                          names).fetchall()
        try:
            full = {str(v): con.execute(sql.FULL_KERNEL_NAME, (i,)).fetchone() for i, v in ids}
        except sqlite3.DatabaseError:
            return {}
        texts = self.strings(f[0] for f in full.values() if f)
        return {short: texts[f[0]] for short, f in full.items() if f and f[0] in texts}

    def graph_kernels(self) -> tuple[int, int, int]:
        """(kernels, their GPU ns, graph launches they ran under) of the kernels traced inside CUDA graphs
        (`--cuda-graph-trace=node`: graphNodeId set, the launch's correlation id); zeros where none is, or where the
        export records no graphs (the kernel table is then not scanned)."""
        graphs = {"CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS"} & self.tables
        if not graphs or "graphNodeId" not in self.columns(KERNEL_TABLE):
            return 0, 0, 0
        n, ns, launches = self.one_row(sql.GRAPH_KERNELS)
        return int(n or 0), int(ns or 0), int(launches or 0)

    def kernels_touching(self, lo: int, hi: int) -> pd.DataFrame:
        """The kernels overlapping [lo, hi) (`kernels`' columns but the name): a filtered read, so that a chart of a
        few steps of a long capture does not load its whole kernel table. Damaged rows are dropped silently (the
        analysis says what it drops)."""
        graphs = self.graph_runs.drop(columns=["name", "graph_id"])
        if not self.has(KERNEL_TABLE):
            df = pd.concat([self.kernels.drop(columns="name"), graphs], ignore_index=True)
        else:
            columns = {k: v for k, v in self._kernel_columns().items() if k != "name_id"}
            df = self.table_columns(KERNEL_TABLE, columns, (Touches(np.array([lo]), np.array([hi])),))
            df = pd.concat([_timed(validate.clean(df, "kernel", ("device", "stream"))[0]), graphs], ignore_index=True)
        df = df.sort_values("start_ns", kind="stable")
        return df[(df["end_ns"] > lo) & (df["start_ns"] < hi)].reset_index(drop=True)  # the SQL form: a superset

    def _kernel_columns(self) -> dict[str, str | Bits]:
        cols = self.columns(KERNEL_TABLE)
        name_col = "shortName" if "shortName" in cols else "demangledName"
        return {**sql.KERNEL_COLUMNS, "pid": self._pid_column(cols), "name_id": name_col}

    @cached_property
    def kernel_digest(self) -> kernel_digest.KernelDigest:
        """The kernels as the analysis keeps them (analysis.kernel_digest): from one chunked pass where the table is
        clean and in start order, so that it is never held whole; else from the whole table (`kernels`). A graph
        launch traced as a whole (`graph_runs`) counts as one kernel-like operation named after its graph: its GPU
        time is compute like its kernels', and nsys recorded nothing finer."""
        if len(self.graph_runs):
            return self.kernel_digest_of(self.kernels, self.graph_runs)
        digest = self._chunked_kernel_digest() if self.has(KERNEL_TABLE) else None
        return digest if digest is not None else kernel_digest.of_frame(self.kernels)

    @staticmethod
    def kernel_digest_of(kernels: pd.DataFrame, graphs: pd.DataFrame) -> kernel_digest.KernelDigest:
        """The digest of these kernels and graph launches traced whole (`graph_runs`' rows), in start order."""
        both = pd.concat([kernels, graphs.drop(columns="graph_id")], ignore_index=True)
        return kernel_digest.of_frame(both.sort_values("start_ns", kind="stable", ignore_index=True),
                                      graph_runs=len(graphs))

    @cached_property
    def graph_runs(self) -> pd.DataFrame:
        """CUDA graph launches traced as a whole (CUPTI_ACTIVITY_KIND_GRAPH_TRACE): `kernels`' columns, the name
        'CUDA graph N' (N: nsys's graphId), and graph_id; empty where the capture traced graphs node by node (their
        kernels are in the kernel table, under the graph launch's correlation id) or used none."""
        cols = ["start_ns", "end_ns", "duration_ns", "device", "stream", "correlation_id", "pid", "name", "graph_id"]
        if not self.has(GRAPH_TABLE):
            return _empty(cols)
        have = self.columns(GRAPH_TABLE)
        columns = {**sql.KERNEL_COLUMNS, "pid": self._pid_expr(have),
                   "graph_id": "graphId" if "graphId" in have else "-1"}
        df = self._checked(self.int_columns(GRAPH_TABLE, columns), "CUDA graph", ("device", "stream"))
        df["name"] = pd.Categorical([f"CUDA graph {g}" if g >= 0 else "CUDA graph" for g in df["graph_id"]])
        return df[cols]

    def _chunked_kernel_digest(self) -> kernel_digest.KernelDigest | None:
        ranges = self._rowid_ranges(KERNEL_TABLE, CHUNK_ROWS)
        others = sum(hi - lo for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if self.has(t)
                     for lo, hi in self._rowid_ranges(t, 1 << 62))  # at least the copies and memsets: room for them
        builder = kernel_digest.Builder(sum(hi - lo for lo, hi in ranges), others)
        chunks = self.int_column_ranges(KERNEL_TABLE, self._kernel_columns(), [(lo, hi, ()) for lo, hi in ranges])
        for chunk in chunks:
            if not builder.add(chunk):
                chunks.close()  # waits for the reads in flight
                return None
        got = builder.done(self.strings)
        if got is None:
            return None
        self.warnings += got[1]
        return got[0]

    def _names(self, ids: pd.Series, what: str, said: list[str] | None = None) -> pd.Categorical:
        """String-table ids to a categorical of names, without a Python string per row; a warning for ids without
        text goes to `said` (default: the trace's warnings)."""
        codes, uniques = pd.factorize(ids)
        names = self.strings(uniques)
        (self.warnings if said is None else said).extend(validate.nameless(codes, uniques, names, what))
        labels = pd.Index([names.get(int(u), "?") for u in uniques])
        if labels.has_duplicates:  # two ids with one text: merge them
            cats = pd.Index(labels.unique())
            return pd.Categorical.from_codes(cats.get_indexer(labels)[codes], categories=cats)
        return pd.Categorical.from_codes(codes, categories=labels)

    @cached_property
    def memcpys(self) -> pd.DataFrame:
        """One row per copy: timing, bytes, copy_kind (HtoD, DtoH, ...), src_kind/dst_kind (Pageable, Pinned, Device, ...), gbps,
        migration_cause (a unified-memory migration's CUPTI cause: 1 a user prefetch, 2 a page fault, 3 the driver's
        prefetch on a fault, 4 an eviction; -1 for other copies or where the export does not say)."""
        cols = ["start_ns", "end_ns", "duration_ns", "device", "stream", "correlation_id", "pid", "bytes", "copy_kind",
                "src_kind", "dst_kind", "gbps", "migration_cause"]
        if not self.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
            return _empty(cols)
        have = self.columns("CUPTI_ACTIVITY_KIND_MEMCPY")
        pid = self._pid_expr(have, "m.globalPid")
        cause = "COALESCE(m.migrationCause, -1)" if "migrationCause" in have else "-1"  # unified memory's, -1: none
        df = self._checked(self.query(sql.MEMCPYS.format(pid=pid, cause=cause)), "memcpy",
                           ("device", "stream", "bytes"))
        copy_kind = {k: _short_copy_kind(v) for k, v in self._enum("ENUM_CUDA_MEMCPY_OPER", sql.COPY_KIND).items()}
        mem_kind = self._enum("ENUM_CUDA_MEM_KIND", sql.MEM_KIND)
        self.warnings += validate.uncoded(df, ("copy_kind_id", "src_kind_id", "dst_kind_id"), "memcpy")
        df["copy_kind"] = df.pop("copy_kind_id").map(copy_kind).fillna("Unknown")
        df["src_kind"] = df.pop("src_kind_id").map(mem_kind).fillna("Unknown")
        df["dst_kind"] = df.pop("dst_kind_id").map(mem_kind).fillna("Unknown")
        df["gbps"] = gbps(df["bytes"], df["duration_ns"].where(df["duration_ns"] > 0)).astype(float)
        return df

    @cached_property
    def api_rows(self) -> pd.DataFrame:
        """Runtime rows behind every copy and every host wait, in one scan of the runtime table."""
        if not (self.has("CUPTI_ACTIVITY_KIND_RUNTIME") and self.has("CUPTI_ACTIVITY_KIND_MEMCPY")):
            return _empty(["correlation_id", "pid", "api_start_ns", "api_end_ns", "api_global_tid", "api_name"])
        both = self.runtime_pass()
        rows = both.api if both is not None else None
        if rows is None:
            # calls that never issue a copy or a wait: kernel launches and kernel queries (a graph launch does copy)
            skip = self._name_ids(sql.NO_COPY_NAME_IDS, NO_COPY_API)
            rows = self.query(sql.API_ROWS.format(sync=self._sync_table(),
                                                  launches=",".join(str(int(i)) for i in skip) or "-1"))
        df = outermost_calls(self._checked(rows, "CUDA API (copy and wait calls)",
                                           ("api_global_tid",), times=("api_start_ns", "api_end_ns")),
                             "api_start_ns", "api_end_ns")
        ids = df.pop("api_name_id")
        df["api_name"] = ids.map(self.strings(ids.unique())).fillna("?")
        return df

    def runtime_pass(self) -> runtime_calls.RuntimePass | None:
        """The copy and wait calls, the synchronize calls, the calls per name and the launches per thread, in one
        pass of the fast reader (analysis.runtime_calls); None where it cannot read the whole table."""
        with self._runtime_lock:
            if not hasattr(self, "_runtime_pass"):
                self._runtime_pass = self._read_runtime_pass()
            return self._runtime_pass

    def _read_runtime_pass(self) -> runtime_calls.RuntimePass | None:
        if self._pages is None or not self.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
            return None
        copy_ids = None
        if self.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
            copy_ids = [i for (i,) in self._connection().execute(sql.COPY_AND_WAIT_IDS.format(sync=self._sync_table()))
                        if i is not None]
            if not all(isinstance(i, int) for i in copy_ids):
                return None  # SQL's rules decide whether a float id matches
        def ids(statement: str, pattern: re.Pattern) -> np.ndarray:
            return np.array(list(self._name_ids(statement, pattern)), np.int64)
        names = runtime_calls.Names(ids(sql.SYNC_NAME_IDS, SYNC_API), ids(sql.NO_COPY_NAME_IDS, NO_COPY_API),
                                    ids(sql.LAUNCH_NAME_IDS, LAUNCH_API),
                                    None if copy_ids is None else np.unique(np.array(copy_ids, np.int64)))
        parts = self.page_reduce("CUPTI_ACTIVITY_KIND_RUNTIME", runtime_calls.COLUMNS,
                                 lambda chunk: runtime_calls.split(chunk, names))
        return None if parts is None else runtime_calls.combine(parts)

    def _name_ids(self, statement: str, pattern: re.Pattern) -> dict[int, str]:
        """{string id: name} of the API names a sql.*_NAME_IDS statement finds that match the pattern."""
        return {i: v for i, v in self._connection().execute(statement) if pattern.match(v)}

    def _sync_table(self) -> str:
        """sql.API_ROWS' {sync}: the waits' correlation ids too, where the export has them."""
        return (" UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
                if self.has("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") else "")

    @cached_property
    def memcpy_api(self) -> pd.DataFrame:
        """The runtime call behind each copy: correlation_id, api_name, api times, api_global_tid, tid, sync.

        sync: the program asked to wait for the copy, by a synchronous API or by a stream/context
        synchronize right after it (what torch's `.cpu()` and `copy_()` without non_blocking do).
        """
        if not (self.has("CUPTI_ACTIVITY_KIND_MEMCPY") and self.has("CUPTI_ACTIVITY_KIND_RUNTIME")):
            return _empty(["correlation_id", "pid", "api_start_ns", "api_end_ns", "api_global_tid", "api_name", "sync",
                           "tid"])
        self.wait("api_rows")
        rows = self.api_rows
        keys = process_keys(self.memcpys)
        df = rows.merge(self.memcpys[keys].drop_duplicates(), on=keys, how="inner")
        df["tid"] = df["api_global_tid"] & 0xFFFFFF
        df["sync"] = ~df["api_name"].str.contains("Async", regex=False) | self._synchronized_after(df, rows)
        return df.reset_index(drop=True)

    def _synchronized_after(self, api: pd.DataFrame, rows: pd.DataFrame, within_ns: int = 1_000_000) -> np.ndarray:
        """True where the same thread calls a stream/device/context synchronize within `within_ns` after the copy call."""
        syncs = rows[rows["api_name"].str.contains(r"cuda(?:Stream|Device|Ctx)Synchronize|cu(?:Stream|Ctx)Synchronize",
                                                   regex=True)].rename(columns={"api_start_ns": "start_ns",
                                                                                "api_global_tid": "global_tid"})
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

    @cached_property
    def api_by_thread(self) -> pd.DataFrame:
        """Kernel launch calls (cuda/cu...Launch...) per thread and name: global_tid, name, count, total_ns."""
        if not self.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
            return _empty(["global_tid", "name", "count", "total_ns"])
        names = self._name_ids(sql.LAUNCH_NAME_IDS, LAUNCH_API)
        if not names:
            return _empty(["global_tid", "name", "count", "total_ns"])
        self.wait("sync_calls")  # its validation says whether the runtime rows repeat
        self.sync_calls  # noqa: B018
        # an export whose runtime rows repeat (seen in its synchronize calls) is counted without the repeats
        repeats = any("repeat" in w for w in self._sync_warnings)
        ids = ",".join(str(int(i)) for i in names)
        df = self.query((sql.API_BY_THREAD_DISTINCT if repeats else sql.API_BY_THREAD).format(ids=ids))
        df["name"] = df.pop("name_id").map(names)
        return df

    def launch_stats(self, tids) -> tuple[int, int]:
        """(calls, total_ns) of the kernel launches the given threads made: one filtered scan, no grouping."""
        tids = sorted({int(t) for t in tids})
        if not tids or not self.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
            return 0, 0
        names = list(self._name_ids(sql.LAUNCH_NAME_IDS, LAUNCH_API))
        if not names:
            return 0, 0
        self.wait("sync_calls")  # its validation says whether the runtime rows repeat
        self.sync_calls  # noqa: B018
        repeats = any("repeat" in w for w in self._sync_warnings)
        both = None if repeats else self.runtime_pass()
        if both is not None:
            mine = [both.launches[t] for t in tids if t in both.launches]
            return sum(n for n, _ in mine), sum(ns for _, ns in mine)
        query = sql.LAUNCH_STATS_DISTINCT if repeats else sql.LAUNCH_STATS
        row = self._connection().execute(query.format(tids=",".join(map(str, tids)),
                                                      ids=",".join(str(int(i)) for i in names))).fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    @cached_property
    def sync_calls(self) -> pd.DataFrame:
        """Calls that block the host until the GPU catches up: stream/device/event/context synchronize."""
        cols = ["start_ns", "end_ns", "duration_ns", "global_tid", "correlation_id", "name"]
        if not self.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
            return _empty(cols)
        names = self._name_ids(sql.SYNC_NAME_IDS, SYNC_API)
        if not names:
            return _empty(cols)
        both = self.runtime_pass()
        rows = both.sync if both is not None else None
        if rows is None:
            rows = self.query(sql.SYNC_CALLS.format(ids=",".join(str(int(i)) for i in names)))
        df, said = validate.clean(rows, "CUDA synchronize calls", ("global_tid",))
        self.warnings += said
        self._sync_warnings = said  # its own: other threads add to `warnings` meanwhile
        df = _timed(df)
        df["name"] = df.pop("name_id").map(names)
        return df

    @cached_property
    def memsets(self) -> pd.DataFrame:
        """The CUDA memsets as the device pass and integrity read them: start_ns, end_ns, device, correlation_id, pid
        (in narrow types: kernel_digest.narrow_ops; millions of rows in a long capture); empty without the table."""
        if not self.has("CUPTI_ACTIVITY_KIND_MEMSET"):
            return _empty(list(kernel_digest.OPS))
        cols = self.columns("CUPTI_ACTIVITY_KIND_MEMSET")
        return kernel_digest.narrow_ops(self._checked(self.table_columns(
            "CUPTI_ACTIVITY_KIND_MEMSET", {**sql.MEMSET_COLUMNS, "pid": self._pid_column(cols)}), "memset",
            ("device", "stream")))

    @staticmethod
    def _pid_expr(columns: set[str], col: str = "globalPid") -> str:
        """The launching process's OS pid, or -1 where an export has no globalPid (joins then use ids alone)."""
        return sql.PID_OF.format(col=col) if "globalPid" in columns else "-1"

    @staticmethod
    def _pid_column(columns: set[str]) -> Bits | str:
        """_pid_expr() for a big table's chunked read: Bits, which the fast reader takes too."""
        return Bits("globalPid") if "globalPid" in columns else "-1"

    def launch_threads(self, correlation_ids) -> pd.DataFrame:
        """correlation_id -> global_tid of the runtime call that launched it (for a few ids; the outermost call where
        several share an id)."""
        ids = sorted({int(i) for i in correlation_ids})
        if not ids or not self.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
            return _empty(["correlation_id", "pid", "global_tid", "api_start_ns", "api_end_ns"])
        df = self.page_columns("CUPTI_ACTIVITY_KIND_RUNTIME", LAUNCH_THREAD_COLUMNS, (In("correlationId", tuple(ids)),))
        if df is not None:  # in the order of the SQL reads below: by batch of ids, then by rowid
            batch = np.searchsorted(ids, df["correlation_id"].to_numpy()) // IDS_PER_QUERY
            df = df.iloc[np.argsort(batch, kind="stable")].reset_index(drop=True)
        else:
            df = pd.concat([self.query(sql.RUNTIME_FOR_CORRELATIONS.format(ids=",".join("?" * len(part))), part)
                            for k in range(0, len(ids), IDS_PER_QUERY) for part in [ids[k:k + IDS_PER_QUERY]]],
                           ignore_index=True)
        return outermost_calls(df, "api_start_ns", "api_end_ns")

    @cached_property
    def nvtx(self) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges: name, domain, kind, global_tid, tid, depth, parent (row index or -1)."""
        cols = ["start_ns", "end_ns", "duration_ns", "name", "domain", "kind", "global_tid", "tid", "depth", "parent"]
        if not self.has("NVTX_EVENTS"):
            return _empty(cols)
        text, join = sql.nvtx_text(self.columns("NVTX_EVENTS"))
        df = self.query(sql.NVTX.format(text=text, join=join))
        if df.empty:
            return _empty(cols)
        df = self._checked(df, "NVTX", ("global_tid",))
        self.warnings += validate.unnamed(df["name"], "NVTX", "(unnamed)")
        df["name"] = df["name"].fillna("(unnamed)").astype(str)  # an edited export may hold numbers there
        domains = dict(self.query(sql.NVTX_DOMAINS.format(text=text, join=join)).itertuples(index=False))
        df["domain"] = df.pop("domain_id").map(domains).astype(object).fillna("").astype(str)
        df["kind"] = np.where(df.pop("event_type") == sql.NVTX_PUSHPOP, "PushPop", "StartEnd")
        df = df.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False],
                                    kind="stable").reset_index(drop=True)
        df["tid"] = df["global_tid"] & 0xFFFFFF
        df["depth"], df["parent"] = _nesting(df)
        return df

    @cached_property
    def osrt(self) -> pd.DataFrame:
        """Every OS runtime call: start_ns, end_ns, duration_ns, global_tid, name. Tens of millions of rows in a long
        capture: the analysis reads scoped parts (osrt_chunks) and uses this only for a damaged table."""
        if not self.has("OSRT_API"):
            return _empty(["start_ns", "end_ns", "duration_ns", "global_tid", "name"])
        df = self._checked(self.table_columns("OSRT_API", sql.OSRT_COLUMNS), "OS runtime", ("global_tid",))
        df["name"] = self._names(df.pop("name_id"), "OS runtime")
        return df

    # --- OS runtime calls, in scoped reads -------------------------------------------------------------------------
    def osrt_chunks(self, filters: tuple[Filter, ...]) -> Iterator[pd.DataFrame]:
        """The OS runtime calls passing the filters (on OSRT_API's columns, e.g. btree.In("nameId", ids)), in
        rowid chunks: start_ns, end_ns, duration_ns, global_tid, name. Damaged rows are dropped here without a
        warning; osrt_count() then checks the whole table once and says what it drops."""
        if not self.has("OSRT_API"):
            return
        for df in self.int_column_chunks("OSRT_API", sql.OSRT_COLUMNS, filters):
            yield from self._checked_osrt(df)

    def _checked_osrt(self, df: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """A chunk of OS runtime rows, damaged rows dropped and names given; nothing for an empty one."""
        if df.empty:
            return
        df, said = validate.clean(df, "OS runtime", ("global_tid",))
        df["name"] = self._names(df.pop("name_id"), "OS runtime", said)
        if said:  # set, never cleared: two reader threads may get here at once
            self._osrt_damaged = True
        yield _timed(df)

    def osrt_zone_chunks(self, where_of) -> Iterator[pd.DataFrame]:
        """osrt_chunks() zone by zone (osrt_zones): where_of(zone) gives the zone's filters, or None to skip the
        zone without reading it (e.g. no GPU gap inside its time span)."""
        self.wait("osrt_zones")  # a prefetch may be computing them (cached_property has no lock from Python 3.12)
        ranges = [(z.lo, z.hi, w) for z in self.osrt_zones for w in [where_of(z)] if w is not None]
        for df in self.int_column_ranges("OSRT_API", sql.OSRT_COLUMNS, ranges) if ranges else ():
            yield from self._checked_osrt(df)

    @cached_property
    def osrt_zones(self) -> list[Zone]:
        """The OS runtime table cut into rowid ranges of ZONE_ROWS, each with its row count, time span and unusable
        rows: a read by time skips the zones outside it and filters each zone by the times inside it (one cheap scan,
        no rows handed over; prefetched by the analysis)."""
        if not self.has("OSRT_API"):
            return []
        def zone(bounds: tuple[int, int]) -> Zone:
            got = self._pages.read("OSRT_API", ZONE_COLUMNS, *bounds) if self._pages else None
            if got is not None:
                return _zone_of(bounds, got)
            rows, first, last, unusable = self.one_row(sql.ZONE.format(lo=bounds[0], hi=bounds[1]))
            known = isinstance(first, int) and isinstance(last, int)  # text or a float: a damaged export
            return Zone(bounds[0], bounds[1], int(rows), first if known else None, last if known else None,
                        int(unusable or 0))
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="read-zones") as pool:
            return list(pool.map(zone, self._rowid_ranges("OSRT_API", ZONE_ROWS)))

    def osrt_zone_rows(self, names) -> list[pd.DataFrame] | None:
        """One pass of the fast reader over the OS runtime table for two reads: it fills osrt_zones, and gives the
        calls with these name ids as osrt_chunks((In("nameId", names),)) would (the same chunks, checked the same
        way); None, with nothing filled, where the fast reader cannot read every zone."""
        per_chunk = CHUNK_ROWS // ZONE_ROWS  # zones grouped into osrt_chunks' very chunks: the same rows checked
        if self._pages is None or not self.has("OSRT_API") or "osrt_zones" in self.__dict__ or not per_chunk or \
                CHUNK_ROWS % ZONE_ROWS:
            return None
        wanted = np.unique(np.asarray(list(names), np.int64))

        def zone(bounds: tuple[int, int]):
            got = self._pages.read("OSRT_API", {**ZONE_COLUMNS, "name_id": "nameId"}, *bounds)
            if got is None:
                return None
            keep = np.isin(got["name_id"], wanted)
            rows = {c: got[k][keep] for c, k in (("start_ns", "start"), ("end_ns", "end"), ("global_tid", "tid"),
                                                 ("name_id", "name_id"))}
            return _zone_of(bounds, got), rows
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="pages-zones") as pool:
            parts = list(pool.map(zone, self._rowid_ranges("OSRT_API", ZONE_ROWS)))
        if any(p is None for p in parts):
            return None
        self.__dict__["osrt_zones"] = [z for z, _ in parts]
        out = []
        for k in range(0, len(parts), per_chunk):  # each group of zones let go once joined: the rows are held once
            group = [rows for _, rows in parts[k:k + per_chunk]]
            parts[k:k + per_chunk] = [None] * len(group)
            out += self._checked_osrt(pd.DataFrame({c: np.concatenate([rows[c] for rows in group])
                                                    for c in sql.OSRT_COLUMNS}, copy=False))
        return out

    def osrt_names(self, pattern: re.Pattern) -> dict[int, str]:
        """{string id: text} of the OS call names matching `pattern` (names are short: long strings are not read)."""
        rows = self._connection().execute(sql.SHORT_STRINGS).fetchall()
        return {int(i): str(v) for i, v in rows if v is not None and pattern.match(str(v))}

    def osrt_count(self) -> int:
        """Usable OS runtime calls: the table's row count (its zones'), or, where the table holds unusable rows or a
        scoped read met damaged ones, the rows the checked full load keeps (its warnings then say what was dropped)."""
        if not self.has("OSRT_API"):
            return 0
        if self._osrt_damaged or self.osrt_unusable():
            return len(self.osrt)
        return sum(z.rows for z in self.osrt_zones)

    def osrt_unusable(self) -> int:
        """OS runtime rows whose times or thread no figure can use, in the whole table (counted by the zone scan, so
        that a damaged row is reported wherever it lies, not only where the scoped reads look)."""
        self.wait("osrt_zones")
        return sum(z.unusable for z in self.osrt_zones)

    def osrt_starts(self, filters: tuple[Filter, ...]) -> np.ndarray:
        """Start times of the OS runtime calls with usable times passing the filters, sorted: one column, chunked."""
        if not self.has("OSRT_API"):
            return np.zeros(0, np.int64)
        parts = [c["start_ns"].to_numpy() for c in
                 self.int_column_chunks("OSRT_API", {"start_ns": "start"}, (*filters, btree.USABLE))]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def osrt_span(self, where: str = "1") -> tuple[int, int] | None:
        """(first start, last end) of the usable OS runtime calls matching `where`; None when there are none."""
        if not self.has("OSRT_API"):
            return None
        first, last = self.one_row(sql.OSRT_SPAN.format(where=where))
        return (int(first), int(last)) if first is not None else None

    @cached_property
    def threads(self) -> pd.DataFrame:
        """Thread names with their global_tid, tid and pid (the last name of each thread)."""
        if not self.has("ThreadNames"):
            return _empty(["global_tid", "thread_name", "tid", "pid"])
        df = self.query(sql.THREAD_NAMES).drop_duplicates("global_tid", keep="last")
        df["tid"] = df["global_tid"] & 0xFFFFFF
        df["pid"] = pid_of(df["global_tid"].to_numpy())
        return df

    @cached_property
    def gpus(self) -> pd.DataFrame:
        """The GPUs the export lists: device, name and chip (one row per device)."""
        if not self.has("TARGET_INFO_GPU"):
            return _empty(["device", "name", "chip"])
        cols = self.columns("TARGET_INFO_GPU")
        id_col = "id" if "id" in cols else "deviceId"
        chip = "chipName" if "chipName" in cols else "NULL"  # 2020 exports have no chip name
        return self.query(sql.GPUS.format(id_col=id_col, chip=chip)).drop_duplicates("device")


@dataclass(frozen=True)
class Zone:
    """Rows lo < rowid <= hi of a table: how many, their first start and last end (None where a damaged export holds
    a non-integer there: the zone then spans all time), and how many have unusable times or thread."""
    lo: int
    hi: int
    rows: int
    start_ns: int | None
    end_ns: int | None
    unusable: int = 0


def _zone_of(bounds: tuple[int, int], got: dict[str, np.ndarray]) -> Zone:
    """sql.ZONE's figures from the zone's integer columns (read by btree.Pages, which reads nothing else)."""
    start, end, tid = got["start"], got["end"], got["tid"]
    if not len(start):
        return Zone(*bounds, 0, None, None, 0)
    return Zone(*bounds, len(start), int(start.min()), int(end.max()),
                int(np.count_nonzero((start < 0) | (end < start) | (tid < 0))))


def _short_copy_kind(label: str) -> str:
    """'Device-to-Host' -> 'DtoH'; 'Unified Host-to-Device' -> 'Unified HtoD'; short names pass through."""
    words = {"Host": "H", "Device": "D", "Array": "A", "Peer": "P"}
    prefix = "Unified " if label.startswith("Unified ") else ""
    core = label[len(prefix):]
    if "-to-" in core:
        a, b = core.split("-to-", 1)
        if a in words and b in words:
            return f"{prefix}{words[a]}to{words[b]}"
    return label


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


def _concat_columns(chunks: Iterator[pd.DataFrame], names: list[str]) -> pd.DataFrame:
    """Integer chunks with these columns as one frame, column by column: no consolidated copy of the whole table."""
    parts = list(chunks)
    if len(parts) == 1:
        return parts[0]
    # column by column, each chunk's column dropped once copied: the table is never held twice
    return pd.DataFrame({c: np.concatenate([p.pop(c).to_numpy() for p in parts] or [np.zeros(0, np.int64)])
                         for c in names}, copy=False)


def _empty(cols) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c.endswith(("_ns", "_id", "device", "stream", "bytes", "tid", "pid"))
                                      else "object") for c in cols})


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    df["start_ns"] = df["start_ns"].astype("int64")
    df["end_ns"] = df["end_ns"].astype("int64")
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return df


def _nesting(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
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
