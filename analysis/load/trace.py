"""The handle on one Nsight Systems SQLite export: open and validate it, run SQL on it (`query()` returns DataFrames),
and reach its typed tables, each group in its own module:

    trace.device   kernels, kernel_digest, graph_runs, memcpys, memsets, gpus        (load/device.py)
    trace.calls    api_rows, memcpy_api, sync_calls, api_by_thread, launch_threads   (load/calls.py)
    trace.host     nvtx, threads, off_cpu, mpi_calls                                 (load/host.py)
    trace.osrt     the OS runtime calls in scoped reads and zones                    (load/osrt.py)
    trace.reader   integer columns of big tables, from the fast reader or SQLite    (load/reader.py)
    trace.background  reads beside the analysis                                      (load/background.py)

The file is opened with SQLite's `mode=ro&immutable=1`: no journal, no lock, no write, ever (NVIDIA's own `nsys stats`
adds tables to the file it reads; we do not).
"""
from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from functools import cached_property
from pathlib import Path

import pandas as pd

from ..common.errors import TraceError
from . import kineto, sql, validate
from .background import Background
from .calls import CudaCalls
from .device import DeviceTables
from .frames import timed
from .host import HostTables
from .inputs import resolve_input
from .journal import committed_copy
from .osrt import OsRuntime
from .reader import ColumnReader
from .validate import check_sqlite_file

NSYS_TABLES = {"NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_SESSION_START_TIME", "ThreadNames"}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
ACTIVITY_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS", "OSRT_API",
                   kineto.HOST_EVENTS}  # a torch.profiler trace's Python calls alone: its CPU-only program, line by line


class Trace:
    """One nsys export. Use `Trace.open(path)` (accepts .sqlite, .sqlite.xz and .nsys-rep) as a context manager."""

    def __init__(self, path: str | os.PathLike, source: str | None = None):
        self.path = Path(path)
        self.source = source or str(path)
        check_sqlite_file(self.path, self.source)
        self._uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
        self._owner, self._local = threading.get_ident(), threading.local()
        self._extra_cons: list[sqlite3.Connection] = []
        self.warnings: list[str] = []  # what a damaged export made us drop or replace (load.validate)
        try:
            self.con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")  # some exports hold invalid UTF-8
            self.tables = {r[0] for r in self.con.execute(sql.TABLES)}
            self._drop_empty_runtime()
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{self.source}: unreadable SQLite ({e}); copy it again or re-export it") from None
        self.reader = ColumnReader(self.path, self.connection, self.one_row)
        self.background = Background(self.table)
        self.device, self.calls = DeviceTables(self), CudaCalls(self)
        self.host, self.osrt = HostTables(self), OsRuntime(self)
        self._check_nsys_export()
        if self.profiler == "torch.profiler":
            self.warnings.append(kineto.WHAT_IS_MISSING)  # said once, in the warnings of the text and the JSON

    def _drop_empty_runtime(self) -> None:
        """An emptied CUDA API table reads as an absent one: every figure that needs its rows then says so once."""
        if RUNTIME_TABLE in self.tables and self.con.execute(sql.ANY_ROW.format(table=RUNTIME_TABLE)).fetchone() is None:
            self.tables.discard(RUNTIME_TABLE)
        self.warnings += validate.no_runtime_table(self.tables)

    def _check_nsys_export(self) -> None:
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for the background reads and close the SQLite connections."""
        if getattr(self, "background", None) is not None:
            self.background.close()
        for con in getattr(self, "_extra_cons", []):
            con.close()
        if getattr(self, "reader", None) is not None:
            self.reader.close()
        if getattr(self, "con", None) is not None:
            self.con.close()
            self.con = None

    # --- SQL --------------------------------------------------------------------------------------------------
    def query(self, statement: str, params=()) -> pd.DataFrame:
        """The rows of a SQL statement as a DataFrame; a TraceError when the export is damaged."""
        try:
            cur = self.connection().execute(statement, params)
            cols = [d[0] for d in cur.description]
            return pd.DataFrame.from_records(cur.fetchall(), columns=cols)
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None

    def one_row(self, statement: str) -> tuple:
        """The first row of a SQL statement (aggregates, bounds); a TraceError when the export is damaged."""
        try:
            return self.connection().execute(statement).fetchone()
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None

    def _damaged(self, e: sqlite3.DatabaseError) -> TraceError:
        return TraceError(f"{self.source}: the export is damaged or truncated ({e}); re-export it")

    def connection(self) -> sqlite3.Connection:
        """The main connection on the opening thread; a private one on any other (background reads run there)."""
        if threading.get_ident() == self._owner:
            return self.con
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            con.text_factory = self.con.text_factory
            self._extra_cons.append(con)
        return con

    def has(self, table: str) -> bool:
        """Whether the export has this table."""
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        """The table's column names; empty when the table is absent."""
        return {r[0] for r in self.connection().execute(sql.COLUMNS, (table,))} if self.has(table) else set()

    # --- the typed tables' shared steps ------------------------------------------------------------------------
    def table(self, name: str):
        """A typed table by its dotted name ("device.kernels", "host.nvtx"): what Background.load() reads."""
        group, attr = name.split(".")
        return getattr(getattr(self, group), attr)

    def forget(self, *names: str) -> None:
        """Drop loaded tables (e.g. "device.kernels") the caller no longer needs; reading one again loads it again."""
        for name in names:
            group, attr = name.split(".")
            getattr(self, group).__dict__.pop(attr, None)

    def checked(self, df: pd.DataFrame, what: str, required: tuple[str, ...] = (),
                times: tuple[str, str] = validate.TIMES) -> pd.DataFrame:
        """df without the rows a damaged export holds (validate.clean), each reason added to `warnings`; timed."""
        df, said = validate.clean(df, what, required, times)
        self.warnings += said
        return timed(df) if times == validate.TIMES else df

    def names_of(self, ids: pd.Series, what: str, said: list[str] | None = None) -> pd.Categorical:
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

    def strings(self, ids) -> dict[int, str]:
        """The string table's text for these ids (unknown and NULL ids left out)."""
        ids = sorted({int(i) for i in ids if i is not None and not pd.isna(i)})
        out: dict[int, str] = {}
        con = self.connection()
        for k in range(0, len(ids), 900):  # SQLite's parameter limit
            chunk = ids[k:k + 900]
            rows = con.execute(sql.STRINGS_FOR.format(ids=",".join("?" * len(chunk))), chunk).fetchall()
            out.update((i, str(v)) for i, v in rows if v is not None)  # a NULL value names nothing: shown as '?'
        return out

    def enum(self, table: str, fallback: dict[int, str], col: str = "label") -> dict[int, str]:
        """An enum table's {value: label}, over `fallback` (for exports without the table)."""
        if self.has(table) and col in self.columns(table):
            return {**fallback, **dict(self.connection().execute(sql.ENUM.format(col=col, table=table)).fetchall())}
        return fallback

    # --- metadata ---------------------------------------------------------------------------------------------
    @cached_property
    def metadata(self) -> dict:
        """The export's metadata table as a dict; empty in exports without one."""
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table):
                return dict(self.connection().execute(sql.META.format(table=table)).fetchall())
        return {}

    @property
    def profiler(self) -> str:
        """What recorded the trace: "nsys" (an Nsight Systems export) or "torch.profiler" (a Kineto trace, converted
        by load/kineto.py)."""
        return "torch.profiler" if kineto.MARKER_TABLE in self.tables else "nsys"

    @cached_property
    def nsys_version(self) -> str:
        """The nsys version that exported the trace, as its metadata names it."""
        return self.metadata.get("EXPORT_PRODUCT_VERSION", "2020.x or older (no export metadata)")

    @cached_property
    def session_start_utc_ns(self) -> int | None:
        """When the capture session began (UTC ns): trace timestamps count from it; None in exports without it."""
        if not self.has("TARGET_INFO_SESSION_START_TIME"):
            return None
        row = self.connection().execute(sql.SESSION_START).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    @cached_property
    def kineto_identity(self) -> dict[str, str]:
        """A torch.profiler trace's own marks (load/kineto.py's KINETO_TRACE): the process it recorded (`pid`), its
        rank and world size where torch.distributed was up (`rank`, `world_size`: empty otherwise), its format; {} for
        an nsys export."""
        if not self.has(kineto.MARKER_TABLE):
            return {}
        return {str(k): str(v) for k, v in self.connection().execute(f"SELECT name, value FROM {kineto.MARKER_TABLE}")}

    @cached_property
    def hostname(self) -> str | None:
        """The machine the capture ran on (TARGET_INFO_SYSTEM_ENV's Hostname row): ranks on one host share its memory
        and PCIe; None in exports without it (older ones: the public 2020.3 and 2021.2 captures)."""
        if not {"name", "value"} <= self.columns("TARGET_INFO_SYSTEM_ENV"):
            return None
        row = self.connection().execute(sql.HOSTNAME).fetchone()
        return str(row[0]) if row and row[0] is not None else None
