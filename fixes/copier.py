"""The device half of an output pipeline: copy a batch's outputs into a host slot without stalling the compute stream,
and take their checksums on the device before they leave.

On a GPU the copy runs on its own stream, ordered after the work that made the outputs, with non_blocking=True into
pinned memory; record_stream keeps the caching allocator from handing the outputs' memory to the next batch while
the copy still reads it; an event per slot says when the slot is full. Without a GPU the copy is a plain one."""
from __future__ import annotations

import torch

from .checksums import MASK64, checksum_tensor


def part_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    """Row ranges of `parts` slices of a batch of `rows` rows (as even as can be)."""
    return [(rows * k // parts, rows * (k + 1) // parts) for k in range(parts)]


def part_checksums(leaves, bounds) -> list:
    """One checksum per slice: the sum of each tensor's rows lo:hi checksummed from their own first byte (the
    worker sums the same way, so the two agree whatever the row size)."""
    out = []
    for lo, hi in bounds:
        total = None
        for t in leaves:
            c = checksum_tensor(t[lo:hi] if len(bounds) > 1 else t)
            total = c if total is None else total + c
        out.append(total)
    return out


class CudaCopier:
    """Copies on a side stream into pinned slots; one event and one pinned checksum row per slot."""

    def __init__(self, device: torch.device, n_slots: int, max_parts: int):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.events = [torch.cuda.Event() for _ in range(n_slots)]
        with torch.inference_mode(False):  # a normal tensor: written to in and out of inference mode alike
            self.sums = torch.zeros((n_slots, max_parts), dtype=torch.int64, pin_memory=True)
        self.unsafe = False  # test hook: hand a slot over before its copy finished (the checksums must catch it)
        self.copied = False

    def copy(self, slot: int, leaves, views, bounds, verify: bool) -> None:
        """Queue the copy of `leaves` into `views` (slot `slot`) and its checksums; returns at once."""
        self.copied = True
        compute = torch.cuda.current_stream(self.device)
        sums = torch.stack(part_checksums(leaves, bounds)) if verify else None
        self.stream.wait_stream(compute)
        with torch.cuda.stream(self.stream):
            for t, v in zip(leaves, views):
                v.copy_(t, non_blocking=True)
                t.record_stream(self.stream)
            if sums is not None:
                self.sums[slot, :len(bounds)].copy_(sums, non_blocking=True)
                sums.record_stream(self.stream)
            self.events[slot].record(self.stream)

    def wait(self, slot: int) -> None:
        """Block this thread (not the GPU) until slot `slot`'s copy has landed."""
        if not self.unsafe:
            self.events[slot].synchronize()

    def expected(self, slot: int, parts: int) -> int:
        """The batch's checksum as the device saw it (call after wait())."""
        return sum(int(x) for x in self.sums[slot, :parts].tolist()) & MASK64

    def finish(self) -> None:
        """Wait until no copy is in flight (before the slots are unpinned); nothing to wait for before the first (a
        copier made at __enter__: a sticky CUDA error raised here would hide the program's own)."""
        if self.copied:
            self.stream.synchronize()


class CpuCopier:
    """The same steps without a GPU: the copy is synchronous, the checksums are taken on the CPU."""

    def __init__(self, n_slots: int):
        self.sums = [0] * n_slots
        self.unsafe = False

    def copy(self, slot: int, leaves, views, bounds, verify: bool) -> None:
        """Copy `leaves` into `views` now, and keep their checksum."""
        if verify:
            self.sums[slot] = sum(int(c) for c in part_checksums(leaves, bounds)) & MASK64
        for t, v in zip(leaves, views):
            v.copy_(t)

    def wait(self, slot: int) -> None:
        """Nothing to wait for."""

    def expected(self, slot: int, parts: int) -> int:
        """The batch's checksum taken before the copy."""
        return self.sums[slot]

    def finish(self) -> None:
        """Nothing in flight."""
