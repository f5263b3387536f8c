"""The host buffers an output pipeline copies into: `n` slots, each one flat block of bytes holding every output
tensor of a batch at a fixed offset, sized from the first batch (or from `like`).

Shared between processes, a slot is shared memory pinned in place with cudaHostRegister: pin_memory=True followed
by share_memory_() moves the bytes to a new, unpinned mapping, and every copy into it is then pageable. Within one
process (threads) a slot is plain pinned memory. Without a GPU nothing is pinned."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from nsys_transfer.fixes.errors import HostBufferError, LayoutError

ALIGN = 64  # bytes: every tensor starts on a cache line, so any dtype's view is aligned


@dataclass(frozen=True)
class Layout:
    """Where each output tensor lives in a slot: its offset, its capacity in bytes, its dtype and first shape."""
    offsets: tuple
    capacity: tuple
    dtypes: tuple
    shapes: tuple

    @classmethod
    def of(cls, leaves) -> "Layout":
        """The layout for these tensors (a meta tensor works: only shapes and dtypes are read)."""
        offsets, capacity, at = [], [], 0
        for t in leaves:
            offsets.append(at)
            capacity.append(t.numel() * t.element_size())
            at += -(-capacity[-1] // ALIGN) * ALIGN
        return cls(tuple(offsets), tuple(capacity), tuple(t.dtype for t in leaves), tuple(tuple(t.shape) for t in leaves))

    @property
    def nbytes(self) -> int:
        """The bytes of one slot."""
        if not self.offsets:
            return 0
        return self.offsets[-1] + -(-self.capacity[-1] // ALIGN) * ALIGN

    def check(self, leaves) -> None:
        """LayoutError unless these tensors fit (same count and dtypes, each no larger than the first batch's)."""
        if len(leaves) != len(self.dtypes):
            raise LayoutError(f"this batch has {len(leaves)} output tensors, the first had {len(self.dtypes)}")
        for i, (t, dtype, cap, shape) in enumerate(zip(leaves, self.dtypes, self.capacity, self.shapes)):
            if t.dtype != dtype:
                raise LayoutError(f"output tensor {i} is {t.dtype}, the first batch's was {dtype}")
            if t.numel() * t.element_size() > cap:
                raise LayoutError(f"output tensor {i} has shape {tuple(t.shape)}, larger than the first batch's "
                                  f"{shape} the buffers were sized for: pass like= with the largest outputs")


class HostSlots:
    """n slots of `layout.nbytes` bytes: shared (for worker processes) and/or pinned (for a GPU)."""

    def __init__(self, layout: Layout, n: int, shared: bool, pin: bool):
        self.layout, self.registered = layout, []
        size = max(layout.nbytes, ALIGN)
        if shared:
            _check_room("/dev/shm", n * size, n, "enlarge /dev/shm (docker: --shm-size) or pass fewer buffers=, "
                        "or threads=True (no shared memory)")
        self.flat = [self._one(size, shared, pin) for _ in range(n)]

    def _one(self, size: int, shared: bool, pin: bool) -> torch.Tensor:
        try:
            if not shared:
                return torch.empty(size, dtype=torch.uint8, pin_memory=pin)
            flat = torch.empty(size, dtype=torch.uint8).share_memory_()
        except RuntimeError as e:
            self.close()
            raise HostBufferError(f"cannot allocate a {size >> 20} MiB output buffer ({e}); pass fewer buffers=") from e
        if pin:
            self._register(flat)
        return flat

    def _register(self, flat: torch.Tensor) -> None:
        rc = torch.cuda.cudart().cudaHostRegister(flat.data_ptr(), flat.numel(), 0)
        if int(rc) != 0:
            self.close()
            raise HostBufferError(f"cudaHostRegister refused a {flat.numel() >> 20} MiB shared buffer (error {int(rc)}): "
                                  "raise the locked-memory limit (ulimit -l) or pass fewer buffers=")
        self.registered.append(flat)

    def views(self, slot: int, shapes) -> list[torch.Tensor]:
        """The tensors of slot `slot` for a batch of these shapes (each at most its capacity)."""
        flat, lay = self.flat[slot], self.layout
        out = []
        for off, dtype, shape in zip(lay.offsets, lay.dtypes, shapes):
            n = _numel(shape) * torch.empty((), dtype=dtype).element_size()
            out.append(flat[off:off + n].view(dtype).view(shape))
        return out

    def close(self) -> None:
        """Unpin what was registered (the caller has made sure no copy into it is still running)."""
        cudart = torch.cuda.cudart() if self.registered else None
        for flat in self.registered:
            cudart.cudaHostUnregister(flat.data_ptr())
        self.registered = []


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_room(path: str, need: int, n: int, advice: str) -> None:
    try:
        st = os.statvfs(path)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise HostBufferError(f"{n} output buffers of {need / n / 2**30:.2f} GiB need {need / 2**30:.1f} GiB in {path}, "
                              f"which has {free / 2**30:.1f} GiB free: {advice}")
