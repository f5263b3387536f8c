"""Integer columns of an export's tables, behind one interface with two back-ends: the b-tree page reader
(btree.Pages, where it was built and can read the range) and SQLite (every other case: no compiled reader, a damaged
export). Callers never know which one answered: the answers are the same (tests/test_btree.py)."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from . import btree, sql
from .btree import Bits, Filter
from .frames import concat_columns
from ..common.memory import LARGE_TRACE_BYTES

CHUNK_ROWS = 1 << 20  # rows of a big table per read: bounds what one read holds however long the capture
# ... and from memory.LARGE_TRACE_BYTES on: several tables are read at once, each a few reads ahead (0.8 -> 0.6 GiB
# peak on the 8 GB benchmark export; benchmarks/memory_timeline.py). A multiple of osrt.ZONE_ROWS.
LARGE_TRACE_CHUNK_ROWS = 1 << 18
READ_THREADS = 2  # SQLite steps without the GIL: two chunk reads at once keep both cores of a small machine busy
_UNREAD = object()  # page_reduce: a chunk the fast reader could not read


class ColumnReader:
    """Reads integer columns of one export. one_row(statement): the first row of a SQL statement (the handle's)."""

    def __init__(self, path: Path, connection: Callable, one_row: Callable[[str], tuple]):
        self.pages = btree.Pages.open(path, connection)  # None where the fast reader is not built
        self._one_row = one_row
        large = Path(path).stat().st_size >= LARGE_TRACE_BYTES if Path(path).is_file() else False
        self.chunk_rows = LARGE_TRACE_CHUNK_ROWS if large else CHUNK_ROWS  # rows per read of a big table

    def close(self) -> None:
        """Release the fast reader's mapping."""
        if self.pages is not None:
            self.pages.close()

    def int_columns(self, table: str, columns: dict[str, str], where: str = "") -> pd.DataFrame:
        """Integer columns of a table, in one SQL scan, parsed in C by numpy (small tables, or a rowid range).

        Building a Python tuple per row costs ~4x the time and several times the memory on millions of rows;
        `group_concat` keeps the work inside SQLite and numpy. NULL reads as -1 (validate.MISSING, which the typed
        tables drop with a warning). Every group_concat walks the same scan, so the columns line up. Text or a float
        where an integer belongs (a damaged export) fails numpy's parse; only then is the table read again with each
        value's type checked (sql.int_or_missing: 1.5x the scan).
        """
        try:
            return self._parsed_columns(table, columns, where, sql.null_as_missing)
        except ValueError:
            return self._parsed_columns(table, columns, where, sql.int_or_missing)

    def _parsed_columns(self, table: str, columns: dict[str, str], where: str, as_int) -> pd.DataFrame:
        select = ", ".join(f"group_concat({as_int(expr)})" for expr in columns.values())
        texts = self._one_row(sql.INT_COLUMNS.format(select=select, table=table, where=where))
        parsed = {name: np.fromstring(text, sep=",", dtype=np.int64) if text else np.zeros(0, dtype=np.int64)
                  for name, text in zip(columns, texts)}
        if len({len(v) for v in parsed.values()}) > 1:  # numpy < 2 stops at unparsable text instead of raising
            raise ValueError("columns of different lengths")
        return pd.DataFrame(parsed, copy=False)  # one block per column: no copy of millions of rows

    def table_columns(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = ()
                      ) -> pd.DataFrame:
        """Integer columns of the rows of a big table passing the filters, read in chunks (int_column_chunks)."""
        return concat_columns(self.int_column_chunks(table, columns, filters), list(columns))

    def int_column_chunks(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = (),
                          chunk_rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The rows passing the filters, in rowid ranges of chunk_rows (self.chunk_rows), in order
        (int_column_ranges)."""
        ranges = self.rowid_ranges(table, chunk_rows or self.chunk_rows)
        yield from self.int_column_ranges(table, columns, [(lo, hi, filters) for lo, hi in ranges])

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
        """One rowid range: from the table's pages where the fast reader can, else through SQLite."""
        fast = self.pages.read(table, columns, lo, hi, filters) if self.pages else None
        if fast is not None:
            return pd.DataFrame(fast, copy=False)
        exprs = {name: c.sql() if isinstance(c, Bits) else c for name, c in columns.items()}
        return self.int_columns(table, exprs, sql.ROWID_CHUNK.format(lo=lo, hi=hi, where=btree.where(filters)))

    def page_map(self, table: str, columns: dict[str, str | Bits], fn, rows: int, filters: tuple[Filter, ...] = ()
                 ) -> list:
        """[fn(columns read by the fast reader, or None where it cannot read them, (lo, hi)) of each rowid range of
        `rows`], in order, on READ_THREADS threads."""
        def one(bounds: tuple[int, int]):
            return fn(self.pages.read(table, columns, *bounds, filters) if self.pages else None, bounds)
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"pages-{table}") as pool:
            return list(pool.map(one, self.rowid_ranges(table, rows)))

    def page_iter(self, table: str, columns: dict[str, str | Bits], fn, rows: int) -> Iterator:
        """page_map() as a generator, in order, with at most 2 x READ_THREADS ranges read ahead of the caller (what
        fn keeps of a range is held only until the caller takes it); a caller that stops early leaves the rest unread."""
        def one(bounds: tuple[int, int]):
            return fn(self.pages.read(table, columns, *bounds) if self.pages else None, bounds)
        pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"pages-{table}")
        try:
            pending: deque = deque()
            for bounds in self.rowid_ranges(table, rows):
                pending.append(pool.submit(one, bounds))
                if len(pending) > 2 * READ_THREADS:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def page_reduce(self, table: str, columns: dict[str, str | Bits], reduce, filters: tuple[Filter, ...] = ()
                    ) -> list | None:
        """[reduce(frame) of each rowid chunk], in order, read by the fast reader alone (page_map); None where it
        cannot read every chunk (no compiled reader, a damaged export): the caller then asks SQLite its own question,
        whose answer stays exact on damaged exports."""
        if self.pages is None:
            return None
        parts = self.page_map(table, columns, lambda got, _: _UNREAD if got is None else
                              reduce(pd.DataFrame(got, copy=False)), self.chunk_rows, filters)
        return None if any(p is _UNREAD for p in parts) else parts

    def page_columns(self, table: str, columns: dict[str, str | Bits], filters: tuple[Filter, ...] = ()
                     ) -> pd.DataFrame | None:
        """The rows passing the filters, read by the fast reader alone; None where it cannot (page_reduce)."""
        parts = self.page_reduce(table, columns, lambda df: df, filters)
        return None if parts is None else concat_columns(iter(parts), list(columns))

    def rowid_ranges(self, table: str, rows: int) -> list[tuple[int, int]]:
        """(lo, hi] rowid ranges of `rows` rowids covering the table; none when it is empty."""
        first, last = self._one_row(sql.ROWID_RANGE.format(table=table))
        return [] if first is None else [(lo, min(lo + rows, last)) for lo in range(first - 1, last, rows)]
