"""The host buffers an output pipeline copies into: `n` slots, each one flat block of bytes holding every output
tensor of a batch at a fixed offset, sized from the first batch (or from `like`).

Shared between processes, a slot is an anonymous shared mapping (forked workers inherit it), pinned in place with
cudaHostRegister: pin_memory=True followed by share_memory_() moves the bytes to a new, unpinned mapping, and every
copy into it is then pageable. Within one process (threads) a slot is plain pinned memory. Without a GPU nothing is
pinned.

Set-up is kept off the loop's critical path: a mapping costs nothing until it is touched (no file in /dev/shm to
fill with posix_fallocate: 0.6 s for 10 x 352 MB on the H200), and the slots are pinned one ahead of their first use
on a thread of their own, not all of them before the first copy (with slots to spare, as with workers="auto", only
those used and the one after them are ever pinned). Made at the first submit, only slot 0 is pinned then: slot 1's
pin, started with it, held the set-up's own CUDA calls 48 ms (a pin holds the driver's lock for its length) while
the GPU, done with the first batch, idled; it starts at the second fill instead. Made ahead of the loop (eager),
slots 0 and 1 are pinned at once."""
from __future__ import annotations

import mmap
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .errors import HostBufferError, LayoutError

HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable
PIN_AHEAD = 1  # slots pinned ahead of the one about to be filled
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

    def __init__(self, layout: Layout, n: int, shared: bool, pin: bool, device=None, eager: bool = False):
        self.layout, self.registered = layout, []
        self._size, self._pin_private = max(layout.nbytes, ALIGN), pin
        if shared:
            _check_memory(n * self._size, n)
        # shared: made now (forked workers must inherit them), untouched until used; private: made on first use
        self.flat = [self._one(self._size, shared, pin) if shared else None for _ in range(n)]
        # pinned by a thread of its own, one slot ahead of its first use, with the outputs' device current (a new
        # thread's is GPU 0: a context there for every rank of a job)
        self._pinning: dict[int, Future] = {}
        self._pinner = (ThreadPoolExecutor(1, thread_name_prefix="pin-buffers", initializer=_use_device,
                                           initargs=(device,)) if pin and shared else None)
        self._fills = 0
        for slot in range(PIN_AHEAD + 1 if eager else 1):
            self._pin(slot)

    def _one(self, size: int, shared: bool, pin: bool) -> torch.Tensor:
        try:
            if not shared:
                return torch.empty(size, dtype=torch.uint8, pin_memory=pin)
            # anonymous and shared: forked workers see the same pages; nothing is allocated until first touched
            return torch.frombuffer(mmap.mmap(-1, size, mmap.MAP_SHARED), dtype=torch.uint8)
        except (RuntimeError, OSError) as e:
            self.close()
            raise HostBufferError(f"cannot allocate a {size >> 20} MiB output buffer ({e}); pass fewer buffers=") from e

    def _pin(self, slot: int) -> None:
        if self._pinner is not None and slot < len(self.flat) and slot not in self._pinning:
            self._pinning[slot] = self._pinner.submit(self._register, self.flat[slot])

    def ready(self, slot: int) -> None:
        """Slot `slot` made (a private one, on its first use) and pinned before its first copy (waiting for its
        pinning if it is still under way), and from the second fill on the next slot's pinning started.
        HostBufferError where pinning was refused."""
        if self.flat[slot] is None:
            self.flat[slot] = self._one(self._size, False, self._pin_private)
        if self._pinner is None:
            return
        self._pin(slot)
        if self._fills:  # not at the first: its set-up would wait for that pin (the module's docstring)
            self._pin(slot + PIN_AHEAD)
        self._fills += 1
        self._pinning[slot].result()

    def _register(self, flat: torch.Tensor) -> None:
        # portable: pinned for every context of the process, not only the pinner thread's device's
        rc = torch.cuda.cudart().cudaHostRegister(flat.data_ptr(), flat.numel(), HOST_REGISTER_PORTABLE)
        if int(rc) != 0:  # the pipeline's abort unpins the rest, once no copy runs (a close here would race them)
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
        if getattr(self, "_pinner", None) is not None:
            self._pinner.shutdown(wait=True, cancel_futures=True)
        cudart = torch.cuda.cudart() if self.registered else None
        for flat in self.registered:
            cudart.cudaHostUnregister(flat.data_ptr())
        self.registered = []
        self.flat = []  # the mappings go with the last reference: a pipeline kept for its report() holds none


def _use_device(device) -> None:
    """The pinner thread's CUDA device: the outputs' one."""
    if device is not None:
        torch.cuda.set_device(device)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_memory(need: int, n: int) -> None:
    """HostBufferError when the buffers cannot fit in the memory the machine has available (MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return
    if need > free:
        raise HostBufferError(f"{n} output buffers of {need / n / 2**30:.2f} GiB need {need / 2**30:.1f} GiB of host "
                              f"memory, and {free / 2**30:.1f} GiB is available: pass fewer buffers= or workers=")
