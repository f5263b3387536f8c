"""The fast reader of an export's big tables: integer columns straight from SQLite's table b-tree pages.

    analysis               Trace.int_column_ranges(table, columns, [(lo, hi, filters)])
       |                        |
       |     Pages.read() ------+-- _btree.scan(): the rows of rowids (lo, hi] passing the filters, decoded in C
       |        | None          |      (65-130 ns a value through SQLite's own row loop; a few here)
       +--------+---------------+-- SQLite: the same filters as SQL (Filter.sql()), the exact answer or error

Pages.read() gives None whenever SQLite must answer instead: no compiled reader (a machine without a C compiler at
install), a value that is not an integer (a damaged export: SQLite's rules decide what it reads as), an
overflowing or short record, a page that does not parse. The answers are the same either way
(tests/test_btree.py compares both on every bundled trace and on damaged exports). A file up to MAP_WHOLE_BYTES is
mapped once; a larger one is read page by page, so that resident memory stays bounded.
"""
from __future__ import annotations

import mmap
import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import sql

try:
    from . import _btree  # type: ignore[attr-defined]  # compiled: mypy cannot read it
except ImportError:  # built by `pip install .` where a C compiler is present; SQLite reads everything otherwise
    _btree = None

SQLITE_ONLY = "NSYS_TRANSFER_SQLITE_ONLY"  # set (to anything but 0) to read through SQLite alone: tests, bisecting
MAX_SQL_INTERVALS = 4096  # intervals in Touches' SQL form (a binary search 12 CASEs deep); more are merged into fewer
# A file up to this size is mapped once and its pages read in place: a per-scan copy of every page out of the page
# cache cost more than parsing it. A larger file is read page by page, so that the pages a scan read leave the
# process's memory with it: resident memory then stays bounded whatever the file's size.
MAP_WHOLE_BYTES = 1 << 30
MAX_RANGE_ROWS = 1 << 24  # rowids per scan: room for each is reserved (virtual memory, resident only where written)
_IDENTIFIER = re.compile(r'^"?([A-Za-z_][A-Za-z0-9_]*)"?$')
_OK = 0  # _btree.scan's status when it read every row; on any other, SQLite reads them


@dataclass(frozen=True)
class Bits:
    """A column's bits (value >> shift) & mask: e.g. the process id inside a globalTid (sql.PID_OF)."""
    column: str
    shift: int = 24
    mask: int = 0xFFFFFF

    def sql(self) -> str:
        """The same value in SQL."""
        return f"(({self.column} >> {self.shift}) & {self.mask})"


@dataclass(frozen=True)
class In:
    """Rows whose column (or Bits of it) is one of `values` (integers); `negate`: is none of them."""
    column: str | Bits
    values: tuple[int, ...]
    negate: bool = False

    def sql(self) -> str:
        """The same condition in SQL (NULL passes neither form, as in SQL)."""
        expr = self.column.sql() if isinstance(self.column, Bits) else self.column
        listed = ", ".join(str(int(v)) for v in sorted(self.values))
        return f"{expr} {'NOT IN' if self.negate else 'IN'} ({listed})"


@dataclass(frozen=True, eq=False)
class Touches:
    """Rows whose [start, end) overlaps one of these disjoint sorted intervals (int64 arrays)."""
    starts: np.ndarray
    ends: np.ndarray

    def sql(self) -> str:
        """A superset in SQL: at most MAX_SQL_INTERVALS intervals, the closest neighbours merged (an exact test
        in numpy follows every read that uses it)."""
        return sql.touches_any(*coarse(self.starts, self.ends, MAX_SQL_INTERVALS))


@dataclass(frozen=True)
class Usable:
    """Rows whose times and thread any figure can use (sql.USABLE_TIMES): 0 <= start <= end, globalTid >= 0."""

    def sql(self) -> str:
        """The same condition in SQL."""
        return sql.USABLE_TIMES

    @staticmethod
    def keep(raw: dict[str, np.ndarray]) -> np.ndarray:
        """The rows it keeps, on integers read by the fast reader (which reads nothing else)."""
        return (raw["start"] >= 0) & (raw["end"] >= raw["start"]) & (raw["globalTid"] >= 0)


USABLE = Usable()
Filter = In | Touches | Usable


def where(filters: tuple[Filter, ...]) -> str:
    """The SQL condition of these filters, all of them."""
    return " AND ".join(f"({f.sql()})" for f in filters) or "1"


def coarse(starts: np.ndarray, ends: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `most` intervals covering these: the closest neighbours merged."""
    if len(starts) <= most:
        return starts, ends
    between = starts[1:] - ends[:-1]
    cut = np.sort(np.argpartition(between, len(between) - (most - 1))[len(between) - (most - 1):])  # widest holes
    first = np.concatenate(([0], cut + 1))
    last = np.concatenate((cut, [len(starts) - 1]))
    return starts[first], ends[last]


class Pages:
    """One export's table b-trees, for _btree.scan. Use Pages.open(); read() gives None where SQLite must answer."""

    def __init__(self, source: str | mmap.mmap, page_size: int, usable: int,
                 connection: Callable[[], sqlite3.Connection]):
        self.source, self.page_size, self.usable = source, page_size, usable
        self._connection = connection  # the calling thread's connection to the same file (Trace.connection)
        self._tables: dict[str, tuple[int, list[str]] | None] = {}

    @classmethod
    def open(cls, path: Path, connection: Callable[[], sqlite3.Connection]) -> "Pages | None":
        """The reader of this file, or None where it cannot be used (no compiled reader, SQLITE_ONLY set)."""
        if _btree is None or os.environ.get(SQLITE_ONLY, "0") not in ("", "0"):
            return None
        with open(path, "rb") as f:
            header = f.read(100)
            if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
                return None
            mapped = _mapped(f) if os.fstat(f.fileno()).st_size <= MAP_WHOLE_BYTES else None
        source = str(path) if mapped is None else mapped
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        return cls(source, page_size, page_size - header[20], connection)

    def close(self) -> None:
        """Unmap the file (once no scan reads it)."""
        if isinstance(self.source, mmap.mmap):
            self.source.close()

    def _table(self, table: str) -> tuple[int, list[str]] | None:
        """(root page, column names in record order) of a rowid table; None for anything else."""
        if table not in self._tables:
            try:
                self._tables[table] = self._layout(table)
            except sqlite3.DatabaseError:  # a damaged schema: SQLite says so when it reads the table
                return None
        return self._tables[table]

    def _layout(self, table: str) -> tuple[int, list[str]] | None:
        row = self._connection().execute(sql.TABLE_ROOT, (table,)).fetchone()
        if row is None or not isinstance(row[0], int) or "WITHOUT ROWID" in str(row[1]).upper():
            return None
        info = self._connection().execute(sql.RECORD_FIELDS, (table,)).fetchall()
        stored = all(hidden == 0 for _, hidden in info)  # generated columns are not in the record
        return (row[0], [name for name, _ in info]) if stored else None

    def read(self, table: str, columns: dict[str, str | Bits], lo: int, hi: int,
             filters: tuple[Filter, ...] = ()) -> dict[str, np.ndarray] | None:
        """The columns of the rows with lo < rowid <= hi passing the filters, as int64 arrays; None where SQLite
        must answer (see the module's docstring)."""
        layout = self._table(table)
        if layout is None or not 0 <= hi - lo <= MAX_RANGE_ROWS:
            return None
        root, names = layout
        fields: list[str] = []
        slot = {}
        for source in [*columns.values(), *_filter_columns(filters)]:
            name = _bare(source.column if isinstance(source, Bits) else source)
            if name is None or name not in names:
                return None
            if name not in slot:
                slot[name] = len(fields)
                fields.append(name)
        ins, touches = _compiled(filters, slot)
        if len(fields) > 16:
            return None
        status, _seen, data = _btree.scan(self.source, root, self.page_size, self.usable,
                                          [names.index(n) for n in fields], lo, hi, ins, touches)
        if status != _OK:
            return None
        raw = {n: np.frombuffer(data[slot[n]], dtype=np.int64) for n in fields}
        if any(isinstance(f, Usable) for f in filters):
            keep = Usable.keep(raw)
            raw = raw if keep.all() else {n: v[keep] for n, v in raw.items()}
        return {out: _value(raw, source) for out, source in columns.items()}


def _mapped(f) -> mmap.mmap | None:
    """The open file mapped read-only; None where it cannot be (a file system without mmap): then read by page."""
    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def _bare(expr: str) -> str | None:
    """The column a plain (optionally quoted) identifier names; None for any other SQL expression."""
    m = _IDENTIFIER.match(expr.strip())
    return m.group(1) if m else None


def _filter_columns(filters: tuple[Filter, ...]) -> list[str | Bits]:
    cols: list[str | Bits] = []
    for f in filters:
        cols += [f.column] if isinstance(f, In) else ["start", "end"] if isinstance(f, Touches) else [
            "start", "end", "globalTid"]
    return cols


def _compiled(filters: tuple[Filter, ...], slot: dict[str, int]) -> tuple[list, list]:
    """The filters in _btree.scan's form: (slot, shift, mask, sorted values, negate), (start slot, end slot, starts,
    ends)."""
    ins, touches = [], []
    for f in filters:
        if isinstance(f, Usable):  # applied in numpy after the scan (Pages.read)
            continue
        if isinstance(f, Touches):
            touches.append((slot["start"], slot["end"], np.ascontiguousarray(f.starts, np.int64),
                            np.ascontiguousarray(f.ends, np.int64)))
            continue
        bits = f.column if isinstance(f.column, Bits) else Bits(f.column, 0, -1)
        ins.append((slot[_bare(bits.column)], bits.shift, bits.mask, np.unique(np.asarray(f.values, np.int64)), f.negate))
    return ins, touches


def _value(raw: dict[str, np.ndarray], source: str | Bits) -> np.ndarray:
    if isinstance(source, Bits):
        return (raw[_bare(source.column)] >> source.shift) & source.mask
    return raw[_bare(source)]


def not_built_notice() -> str | None:
    """One line for the user where the fast reader was not built (no C compiler at install) and SQLite reads
    everything; None where it is built or SQLite alone was asked for (SQLITE_ONLY)."""
    if _btree is not None or os.environ.get(SQLITE_ONLY, "0") not in ("", "0"):
        return None
    return ("analyze-trace: note: the fast reader (analysis/load/_btree.c) is not built, so SQLite reads every table: "
            "the same answers, slower on long captures; install a C compiler and reinstall (pip install -e .)")
