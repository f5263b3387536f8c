"""The article's post-processing: serialise every output byte with numpy().tobytes() and write it.

`chunk_bytes` > 0 serialises the batch in slices of that size: the same bytes go through tobytes()
and write(), but each allocation is small enough for malloc to reuse, so no fresh 1.4 GB buffer is
page-faulted per batch, and each slice is checksummed while it is still in cache.
"""
from __future__ import annotations

import os

import numpy as np

from ..fixes.checksums import checksum_update


class Sink:
    """Where serialised outputs go: /dev/null (the article) or one .npy file per batch."""

    def __init__(self, spec: str):
        self.dir = spec[4:] if spec.startswith("npy:") else None
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
            self.file = None
        else:
            self.file = open(os.devnull, "wb", buffering=0)

    def write_batch(self, batch_id: int, array: np.ndarray, chunk_bytes: int) -> int:
        """Serialise one batch's output and write it; returns its checksum."""
        if self.dir:
            np.save(os.path.join(self.dir, f"batch_{batch_id:06d}.npy"), array)
            return checksum_update(0, array)
        flat = array.reshape(-1).view(np.uint8)
        if chunk_bytes <= 0:
            data = flat.tobytes()
            self.file.write(data)
            return checksum_update(0, data)
        step = max(8, chunk_bytes // 8 * 8)
        total = 0
        for start in range(0, flat.size, step):
            data = flat[start:start + step].tobytes()
            self.file.write(data)
            total = checksum_update(total, data)
        return total

    def close(self):
        """Close the output file."""
        if self.file:
            self.file.close()


def apply_fault(fault: str, batch_id: int, array: np.ndarray) -> None:
    """Test hook: corrupt:N flips one byte of batch N in place; die:N kills the process on batch N."""
    if not fault:
        return
    kind, _, n = fault.partition(":")
    if int(n) != batch_id:
        return
    if kind == "die":
        os._exit(17)
    if kind == "corrupt":
        b = array.reshape(-1).view(np.uint8)
        b[b.size // 2] ^= 0xFF
