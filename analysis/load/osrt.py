"""The OS runtime calls (OSRT_API), read in scoped parts: the table can hold tens of millions of rows, of which the
analysis uses few. Zones (rowid ranges with their time span) let a read by time skip what lies outside it."""
from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from . import btree, sql, validate
from .btree import Filter, In
from .frames import empty, timed
from ..common.spill import Frames

TABLE = "OSRT_API"
ZONE_ROWS = 1 << 18  # OS runtime rows per zone: fine enough that a zone spans few GPU gaps
ZONE_COLUMNS = {"start": "start", "end": '"end"', "tid": "globalTid"}  # what sql.ZONE looks at


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


class OsRuntime:
    """The OS runtime calls of one export (trace: its load.trace.Trace)."""

    def __init__(self, trace):
        self.trace = trace
        self._damaged = threading.Event()  # a scoped read met rows validate.clean drops: count() checks the table

    @cached_property
    def frame(self) -> pd.DataFrame:
        """Every OS runtime call: start_ns, end_ns, duration_ns, global_tid, name. Tens of millions of rows in a long
        capture: the analysis reads scoped parts (chunks) and uses this only for a damaged table."""
        t = self.trace
        if not t.has(TABLE):
            return empty(["start_ns", "end_ns", "duration_ns", "global_tid", "name"])
        df = t.checked(t.reader.table_columns(TABLE, sql.OSRT_COLUMNS), "OS runtime", ("global_tid",))
        df["name"] = t.names_of(df.pop("name_id"), "OS runtime")
        return df

    def chunks(self, filters: tuple[Filter, ...]) -> Iterator[pd.DataFrame]:
        """The OS runtime calls passing the filters (on OSRT_API's columns, e.g. btree.In("nameId", ids)), in
        rowid chunks: start_ns, end_ns, duration_ns, global_tid, name. Damaged rows are dropped here without a
        warning; count() then checks the whole table once and says what it drops."""
        if not self.trace.has(TABLE):
            return
        for df in self.trace.reader.int_column_chunks(TABLE, sql.OSRT_COLUMNS, filters):
            yield from self._checked(df)

    def _checked(self, df: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """A chunk of OS runtime rows, damaged rows dropped and names given; nothing for an empty one."""
        if df.empty:
            return
        df, said = validate.clean(df, "OS runtime", ("global_tid",))
        df["name"] = self.trace.names_of(df.pop("name_id"), "OS runtime", said)
        if said:
            self._damaged.set()
        yield timed(df)

    def zone_chunks(self, where_of) -> Iterator[pd.DataFrame]:
        """chunks() zone by zone (zones): where_of(zone) gives the zone's filters, or None to skip the zone without
        reading it (e.g. no GPU gap inside its time span)."""
        self.trace.background.wait("osrt.zones")  # a background read may be computing them
        ranges = [(z.lo, z.hi, w) for z in self.zones for w in [where_of(z)] if w is not None]
        for df in self.trace.reader.int_column_ranges(TABLE, sql.OSRT_COLUMNS, ranges) if ranges else ():
            yield from self._checked(df)

    @cached_property
    def zones(self) -> list[Zone]:
        """The table cut into rowid ranges of ZONE_ROWS, each with its row count, time span and unusable rows: a
        read by time skips the zones outside it and filters each zone by the times inside it (one cheap scan, no
        rows handed over; read in the background by the analysis)."""
        if not self.trace.has(TABLE):
            return []

        def zone(got, bounds: tuple[int, int]) -> Zone:
            if got is not None:
                return _zone_of(bounds, got)
            rows, first, last, unusable = self.trace.one_row(sql.ZONE.format(lo=bounds[0], hi=bounds[1]))
            known = isinstance(first, int) and isinstance(last, int)  # text or a float: a damaged export
            return Zone(bounds[0], bounds[1], int(rows), first if known else None, last if known else None,
                        int(unusable or 0))
        return self.trace.reader.page_map(TABLE, ZONE_COLUMNS, zone, ZONE_ROWS)

    def zone_rows(self, names, sink) -> bool:
        """One pass of the fast reader over the table for two reads: it fills zones, and hands sink() the calls with
        these name ids as chunks((In("nameId", names),)) would (the same chunks, checked the same way), as the pass
        goes (nothing held but the chunk in hand); False, with nothing filled, where the fast reader cannot read
        every zone (sink() may have had some chunks: the caller drops them)."""
        per_chunk = self.trace.reader.chunk_rows // ZONE_ROWS  # zones grouped into chunks()' very chunks: the same rows checked
        reader = self.trace.reader
        if reader.pages is None or not self.trace.has(TABLE) or "zones" in self.__dict__ or not per_chunk or \
                reader.chunk_rows % ZONE_ROWS:
            return False
        wanted = np.unique(np.asarray(list(names), np.int64))

        def zone(got, bounds: tuple[int, int]):
            if got is None:
                return None
            keep = np.isin(got["name_id"], wanted)
            rows = {c: got[k][keep] for c, k in (("start_ns", "start"), ("end_ns", "end"), ("global_tid", "tid"),
                                                 ("name_id", "name_id"))}
            return _zone_of(bounds, got), rows
        zones, group = [], []
        for part in reader.page_iter(TABLE, {**ZONE_COLUMNS, "name_id": "nameId"}, zone, ZONE_ROWS):
            if part is None:
                return False
            zones.append(part[0])
            group.append(part[1])
            if len(group) == per_chunk:
                self._hand_over(group, sink)
                group = []
        if group:
            self._hand_over(group, sink)
        self.__dict__["zones"] = zones
        return True

    def _hand_over(self, group: list[dict], sink) -> None:
        """One chunk's rows (its zones' wanted rows joined), checked, to sink()."""
        for df in self._checked(pd.DataFrame({c: np.concatenate([rows[c] for rows in group])
                                              for c in sql.OSRT_COLUMNS}, copy=False)):
            sink(df)

    def named_calls(self, names, into: Frames) -> None:
        """The calls with these name ids, as chunks((In("nameId", names),)) gives them, appended to `into` as they are
        read, with the zones filled too: in one pass where the fast reader can read every zone (zone_rows), else in
        two reads on this thread."""
        if not self.zone_rows(names, into.append):
            into.clear()  # what a pass that could not finish handed over
            for chunk in (self.chunks((In("nameId", tuple(names)),)) if names else ()):
                into.append(chunk)
            _ = self.zones  # read here, as the one pass would have: the callers waiting on "osrt.zones" expect it

    def names(self, pattern: re.Pattern) -> dict[int, str]:
        """{string id: text} of the OS call names matching `pattern` (names are short: long strings are not read)."""
        rows = self.trace.connection().execute(sql.SHORT_STRINGS).fetchall()
        return {int(i): str(v) for i, v in rows if v is not None and pattern.match(str(v))}

    def count(self) -> int:
        """Usable OS runtime calls: the table's row count (its zones'), or, where the table holds unusable rows or a
        scoped read met damaged ones, the rows the checked full load keeps (its warnings then say what was dropped)."""
        if not self.trace.has(TABLE):
            return 0
        if self._damaged.is_set() or self.unusable():
            return len(self.frame)
        return sum(z.rows for z in self.zones)

    def unusable(self) -> int:
        """OS runtime rows whose times or thread no figure can use, in the whole table (counted by the zone scan, so
        that a damaged row is reported wherever it lies, not only where the scoped reads look)."""
        self.trace.background.wait("osrt.zones")
        return sum(z.unusable for z in self.zones)

    def starts(self, filters: tuple[Filter, ...]) -> np.ndarray:
        """Start times of the OS runtime calls with usable times passing the filters, sorted: one column, chunked."""
        if not self.trace.has(TABLE):
            return np.zeros(0, np.int64)
        parts = [c["start_ns"].to_numpy() for c in
                 self.trace.reader.int_column_chunks(TABLE, {"start_ns": "start"}, (*filters, btree.USABLE))]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def span(self, where: str = "1") -> tuple[int, int] | None:
        """(first start, last end) of the usable OS runtime calls matching `where`; None when there are none."""
        if not self.trace.has(TABLE):
            return None
        first, last = self.trace.one_row(sql.OSRT_SPAN.format(where=where))
        return (int(first), int(last)) if first is not None else None


def _zone_of(bounds: tuple[int, int], got: dict[str, np.ndarray]) -> Zone:
    """sql.ZONE's figures from the zone's integer columns (read by btree.Pages, which reads nothing else)."""
    start, end, tid = got["start"], got["end"], got["tid"]
    if not len(start):
        return Zone(*bounds, 0, None, None, 0)
    return Zone(*bounds, len(start), int(start.min()), int(end.max()),
                int(np.count_nonzero((start < 0) | (end < start) | (tid < 0))))
