"""A column of integers held in an unlinked temporary file instead of memory: appended a chunk at a time, read back a
slice at a time. What a long capture holds per GPU operation after the pass that made it (the busy union: 16 B an
interval, hundreds of millions of them in a 32 GB export) goes here, so that resident memory stays that of a slice.

The file lives in the system's temporary folder (TMPDIR), is unlinked from the start and goes with the process.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np


class Column:
    """Integers of one dtype in a temporary file: append() them in order, then read(i, j) any slice."""

    def __init__(self, dtype=np.int64):
        self.dtype = np.dtype(dtype)
        self.size = 0
        self._file = tempfile.TemporaryFile(prefix="nsys-transfer-")  # no name on disk: freed on close or exit

    def append(self, values: np.ndarray) -> None:
        """Add values at the end."""
        part = np.ascontiguousarray(values, dtype=self.dtype)
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

    def close(self) -> None:
        """Remove the file."""
        self._file.close()
