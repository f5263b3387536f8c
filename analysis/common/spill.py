"""A column of integers held in an unlinked temporary file instead of memory: appended a chunk at a time, read back a
slice at a time. What a long capture holds per GPU operation after the pass that made it (the busy union: 16 B an
interval, hundreds of millions of them in a 32 GB export) goes here, so that resident memory stays that of a slice.

Frames does the same for tables read in parts (the waiting OS calls: tens of millions of rows, read beside the
kernel table and used only by the idle attribution). The files live in the system's temporary folder (TMPDIR), are
unlinked from the start and go with the process.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np
import pandas as pd


class Column:
    """Integers of one dtype in a temporary file: append() them in order, then read(i, j) any slice."""

    def __init__(self, dtype=np.int64):
        self.dtype = np.dtype(dtype)
        self.size = 0
        self.low = self.high = None  # the smallest and largest value appended
        self._file = tempfile.TemporaryFile(prefix="nsys-transfer-")  # no name on disk: freed on close or exit

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, rows: slice) -> np.ndarray:
        """A slice of the values (step 1), read from the file: what code written for arrays reads a chunk at a time."""
        i, j, step = rows.indices(self.size)
        if step != 1:
            raise IndexError("a spilled column is read in slices of step 1")
        return self.read(i, j)

    def __array__(self, dtype=None, copy=None):
        """Every value, read whole: where code that needs the whole column meets one, it still gets the answer."""
        return self.read(0, self.size).astype(dtype or self.dtype, copy=False)

    def min(self):
        """The smallest value (ValueError when empty, as numpy's)."""
        if self.low is None:
            raise ValueError("min of an empty column")
        return self.low

    def max(self):
        """The largest value (ValueError when empty)."""
        if self.high is None:
            raise ValueError("max of an empty column")
        return self.high

    def append(self, values: np.ndarray) -> None:
        """Add values at the end."""
        part = np.ascontiguousarray(values, dtype=self.dtype)
        if part.size:
            low, high = part.min(), part.max()
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)
        view, done = memoryview(part).cast("B"), 0
        while done < len(view):
            done += os.pwrite(self._file.fileno(), view[done:], (self.size * self.dtype.itemsize) + done)
        self.size += part.size

    def read(self, i: int, j: int) -> np.ndarray:
        """Values i..j-1 (clipped to the column) as a new array."""
        i, j = max(0, i), min(j, self.size)
        out = np.empty(max(0, j - i), self.dtype)
        view, done, at = memoryview(out).cast("B"), 0, i * self.dtype.itemsize
        while done < len(view):
            got = os.preadv(self._file.fileno(), [view[done:]], at + done)
            if got <= 0:
                raise OSError(f"temporary file short by {len(view) - done} bytes")
            done += got
        return out

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The values, `rows` at a time, in order."""
        for k in range(0, self.size, rows):
            yield self.read(k, k + rows)

    def close(self) -> None:
        """Remove the file."""
        self._file.close()


class Frames:
    """Frames of the same columns (integers, or categories) appended one after the other into temporary files, read
    back as the one frame their concatenation would be, column by column (the categories in order of first
    appearance, as pandas' union_categoricals gives them; other columns in the type numpy's concatenation gives),
    whole (frame) or a slice of time at a time (touching): each appended part's span of `times` is kept."""

    def __init__(self, columns: list[str], times: tuple[str, str] = ("start_ns", "end_ns")):
        self.columns, self.times = list(columns), times
        self.rows = 0
        self._runs: dict[str, list[tuple[int, Column]]] = {c: [] for c in self.columns}  # (first row, Column) a type
        self._codes: dict[str, dict] = {}  # categorical column -> {category: code}
        self._category_type: dict[str, object] = {}
        self._spans: list[tuple[int, int, int, int]] = []  # each part: first row, end row, first start, last end
        self._dtypes: dict[str, pd.CategoricalDtype] = {}  # categorical column -> its type over the categories so far

    def clear(self) -> None:
        """Drop every row appended so far."""
        for runs in self._runs.values():
            for _, col in runs:
                col.close()
        self.__init__(self.columns, self.times)

    def append(self, df: pd.DataFrame) -> None:
        """Add the rows of a frame holding these columns."""
        if not len(df):
            return
        for c in self.columns:
            v = df[c]
            values = self._coded(c, v.array) if isinstance(v.dtype, pd.CategoricalDtype) else v.to_numpy()
            runs = self._runs[c]
            if not runs or runs[-1][1].dtype != values.dtype:
                runs.append((self.rows, Column(values.dtype)))
            runs[-1][1].append(values)
        start, end = (df[t].to_numpy() for t in self.times)
        self._spans.append((self.rows, self.rows + len(df), int(start.min()), int(end.max())))
        self.rows += len(df)

    def _coded(self, c: str, cat: pd.Categorical) -> np.ndarray:
        """The codes of a part's categories in the categories seen so far (new ones added in their order)."""
        known = self._codes.setdefault(c, {})
        self._category_type.setdefault(c, cat.categories.dtype)
        for name in cat.categories:
            known.setdefault(name, len(known))
        remap = np.fromiter((known[name] for name in cat.categories), np.int64, len(cat.categories))
        codes = np.asarray(cat.codes)
        return np.where(codes >= 0, remap[np.maximum(codes, 0)] if remap.size else -1, -1).astype(np.int32)

    def frame(self) -> pd.DataFrame:
        """Every row appended, as one frame."""
        return self._rows([(0, self.rows)]) if self.rows else pd.DataFrame(columns=self.columns)

    def touching(self, lo: int, hi: int) -> pd.DataFrame:
        """The rows of the parts whose span of times overlaps [lo, hi) (a superset of the rows starting before hi
        and ending after lo), in order, typed as frame() types them; the whole when nothing was appended."""
        if not self.rows:
            return self.frame()
        ranges: list[tuple[int, int]] = []
        for a, b, first, last in self._spans:
            if first < hi and last > lo:
                if ranges and ranges[-1][1] == a:
                    ranges[-1] = (ranges[-1][0], b)
                else:
                    ranges.append((a, b))
        return self._rows(ranges or [(0, 0)])

    def _dtype(self, c: str) -> pd.CategoricalDtype:
        """The categorical column's type, one object until a category is added: every frame read back shares it, so
        that what is worked out per category (idle_calls.calls_matching) is worked out once."""
        held = self._dtypes.get(c)
        if held is None or len(held.categories) != len(self._codes[c]):  # categories are only ever added
            held = self._dtypes[c] = pd.CategoricalDtype(pd.Index(list(self._codes[c]), dtype=self._category_type[c]))
        return held

    def _rows(self, ranges: list[tuple[int, int]]) -> pd.DataFrame:
        """Rows a..b-1 of each range, one below the other."""
        out = {}
        for c in self.columns:
            runs = self._runs[c]
            kind = np.result_type(*[col.dtype for _, col in runs])
            pieces = [col.read(a - first, b - first) for a, b in ranges for first, col in runs]
            values = np.concatenate(pieces).astype(kind, copy=False) if len(pieces) != 1 else pieces[0]
            if c in self._codes:
                values = pd.Categorical.from_codes(values, dtype=self._dtype(c))
            out[c] = values
        return pd.DataFrame(out, copy=False)
