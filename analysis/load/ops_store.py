r"""A long capture's GPU operations (kernels, memsets) as the device pass and integrity read them, written a chunk
at a time as the table is read: in memory (narrow columns, KernelDigest.ops) or, from SPILL_ROWS rows on, with their
times and correlation ids in temporary files (SpilledOps), so that memory does not grow with the capture (111 M
kernels in the 32 GB benchmark export: 2.2 GiB in memory, a chunk in files).

    table chunks --OpsWriter.add--> DataFrame (narrow, in memory)           below SPILL_ROWS rows
                                \--> SpilledOps: start_ns end_ns correlation_id in files, device pid in memory

The device and the process stay in memory (one value in the usual trace: a view of it, no memory at all).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from .validate import repeated_rows
from ..common.spill import Column

OPS = ("start_ns", "end_ns", "device", "correlation_id", "pid")  # what the device pass and integrity read
NARROW = {"start_ns": np.int64, "end_ns": np.int64, "device": np.int8, "correlation_id": np.int32, "pid": np.int32}
TIMES = ("start_ns", "end_ns")
ONE_VALUE = ("device", "pid")  # one GPU, one process: the usual case, held as a view of one value (no memory)
IN_FILES = ("start_ns", "end_ns", "correlation_id")  # what SpilledOps keeps in temporary files (int64 there)
SPILL_ROWS = 1 << 23  # from this many rows (8 M: about a 2.5 GB export's kernels) into files
READ_ROWS = 1 << 20  # rows per read of a spilled table: a few tens of MB of temporaries


def fits(values: np.ndarray, dtype) -> bool:
    """Whether every value is within the integer type's range."""
    info = np.iinfo(dtype)
    return not values.size or (info.min <= values.min() and values.max() <= info.max)


def one(value: int, dtype, rows: int) -> np.ndarray:
    """A column of one value as a read-only view of it (no memory however many rows), narrow where it fits."""
    return np.broadcast_to(np.asarray(value, dtype if fits(np.asarray([value]), dtype) else np.int64), (rows,))


def distinct(values: np.ndarray) -> np.ndarray:
    """pd.unique() of a column (in order of first appearance), from one comparison pass where it holds one value (a
    view of one process's id over 100 M kernels would otherwise be hashed whole)."""
    if len(values) and values.min() == values.max():
        return np.asarray(values[:1])
    return pd.unique(np.asarray(values))


class SpilledColumn:
    """One column of a SpilledOps as code written for a frame's columns reads it: its min(), max() and dtype from
    what was written, to_numpy() the whole column (read from its file)."""

    def __init__(self, values):
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    @property
    def dtype(self):
        """The values' type."""
        return self.values.dtype

    def min(self):
        """The smallest value."""
        return self.values.min()

    def max(self):
        """The largest value."""
        return self.values.max()

    def to_numpy(self, dtype=None) -> np.ndarray:
        """Every value, in memory."""
        return np.asarray(self.values, dtype=dtype)


class SpilledOps:
    """GPU operations in start order with start_ns, end_ns and correlation_id in temporary files (spill.Column) and
    device and pid in memory. column(c): the Column or array itself (chunked readers); chunks(): the rows READ_ROWS
    at a time; frame(): the whole table in memory (for code that needs it: it then gets the same answers)."""

    def __init__(self, files: dict[str, Column], memory: dict[str, np.ndarray], rows: int):
        self.files, self.memory, self.rows = files, memory, rows

    def __len__(self) -> int:
        return self.rows

    def __contains__(self, c: str) -> bool:
        return c in self.files or c in self.memory

    @property
    def columns(self) -> list[str]:
        """The OPS columns held, in OPS order."""
        return [c for c in OPS if c in self]

    def __getitem__(self, c: str) -> SpilledColumn:
        return SpilledColumn(self.column(c))

    def items(self) -> Iterator[tuple[str, SpilledColumn]]:
        """(name, column) of each column, as a frame's items()."""
        return ((c, self[c]) for c in self.columns)

    def column(self, c: str):
        """The Column (in a file) or array (in memory) of c."""
        return self.files[c] if c in self.files else self.memory[c]

    def chunks(self, columns=OPS, rows: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """{column: values} of `rows` (READ_ROWS) rows at a time, in order."""
        rows = rows or READ_ROWS
        for k in range(0, self.rows, rows):
            yield {c: self.files[c].read(k, k + rows) if c in self.files else self.memory[c][k:k + rows]
                   for c in columns if c in self}

    def frame(self) -> pd.DataFrame:
        """The whole table, in memory."""
        return pd.DataFrame({c: np.asarray(self.column(c)) if c in self.files else self.memory[c]
                             for c in self.columns}, copy=False)

    def touching(self, lo: int, hi: int) -> pd.DataFrame:
        """The rows overlapping [lo, hi), in memory: read a chunk at a time, up to the first that starts at hi (the
        rows are in start order)."""
        parts = []
        for c in self.chunks(self.columns):
            keep = (c["end_ns"] > lo) & (c["start_ns"] < hi)
            if keep.any():
                parts.append(pd.DataFrame({k: v[keep] for k, v in c.items()}))
            if len(c["start_ns"]) and c["start_ns"][-1] >= hi:
                break
        return pd.concat(parts, ignore_index=True) if parts else self.frame().iloc[0:0]

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether an operation overlaps [lo, hi)."""
        return any(bool(((c["end_ns"] > lo) & (c["start_ns"] < hi)).any()) for c in self.chunks(TIMES))

    def close(self) -> None:
        """Remove the files."""
        for col in self.files.values():
            col.close()


def frame_of(ops) -> pd.DataFrame:
    """A table of operations in memory: `ops` itself, or a SpilledOps read whole."""
    return ops.frame() if isinstance(ops, SpilledOps) else ops


class OpsWriter:
    """The OPS columns of a table of GPU operations written chunk after chunk (at most `capacity` rows): into narrow
    arrays, the times with `room` elements before them (KernelDigest.spare_times), or, with spill, SpilledOps."""

    def __init__(self, capacity: int, room: int = 0, spill: bool = False):
        self.spill = spill
        self.times = None if spill else {c: np.empty(room + capacity, np.int64) for c in TIMES}  # pages taken as written
        self.files = {c: Column(np.int64) for c in IN_FILES} if spill else {}
        self.columns = {c: self.times[c][room:] if self.times and c in TIMES else np.empty(capacity, dtype)
                        for c, dtype in NARROW.items() if c not in self.files}
        self.one_value: dict[str, int | None] = dict.fromkeys(ONE_VALUE)  # a column's one value so far (not written)
        self.rows = 0
        self.last_start: int | None = None

    def accepts(self, chunk: pd.DataFrame) -> bool:
        """Whether the chunk holds no row validate.clean drops (negative or missing times, device or stream; an end
        before its start; a row repeated, which needs a start shared, here not even across chunks) and continues the
        start order: what writing the table chunk by chunk needs to give the whole table's answers."""
        start, end = chunk["start_ns"].to_numpy(), chunk["end_ns"].to_numpy()
        if (start < 0).any() or (end < start).any() or (chunk["device"].to_numpy() < 0).any() or \
                (chunk["stream"].to_numpy() < 0).any():
            return False
        if (start[1:] < start[:-1]).any() or (self.last_start is not None and start[0] <= self.last_start):
            return False
        return not (start[1:] == start[:-1]).any() or not repeated_rows(chunk).any()

    def add(self, chunk: pd.DataFrame) -> None:
        """Write one chunk's OPS columns."""
        for c in self.files:
            self.files[c].append(chunk[c].to_numpy())
        for c in self.columns:
            self._write(c, chunk[c].to_numpy())
        self.rows += len(chunk)
        self.last_start = int(chunk["start_ns"].to_numpy()[-1])

    def _write(self, c: str, part: np.ndarray) -> None:
        """A chunk's column into place: widened where it does not fit the narrow type (rare), not written while a
        ONE_VALUE column holds one value."""
        low, high = part.min(), part.max()
        held = None
        if c in self.one_value:
            if low == high and (self.rows == 0 or self.one_value[c] == low):
                self.one_value[c] = int(low)
                return
            held = self.one_value.pop(c)  # a second value: the rows before get their one value written
        values = self.columns[c]
        if not fits(np.asarray([low, high] + ([held] if held is not None else [])), values.dtype):
            values = self.columns[c] = values.astype(np.int64)
        if held is not None:
            values[:self.rows] = held
        values[self.rows:self.rows + part.size] = part

    def memory_column(self, c: str) -> np.ndarray:
        """An in-memory column as written (a view of its one value where it held one)."""
        v = self.columns[c]
        return v[:self.rows] if self.one_value.get(c) is None else one(self.one_value[c], v.dtype, self.rows)

    def done(self):
        """The table: a DataFrame in memory, or SpilledOps."""
        memory = {c: self.memory_column(c) for c in self.columns}
        if self.spill:
            return SpilledOps(self.files, memory, self.rows)
        return pd.DataFrame({c: memory[c] for c in OPS}, copy=False)

    def time_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(starts, ends) of the rows written, READ_ROWS at a time."""
        if self.spill:
            yield from zip(self.files["start_ns"].chunks(READ_ROWS), self.files["end_ns"].chunks(READ_ROWS))
            return
        start, end = self.columns["start_ns"], self.columns["end_ns"]
        for k in range(0, self.rows, READ_ROWS):
            j = min(k + READ_ROWS, self.rows)
            yield start[k:j], end[k:j]
