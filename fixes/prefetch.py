"""prefetch(): inputs on the GPU one or more batches ahead, copied on a side stream while the GPU computes."""
from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Iterable, Iterator

import torch

from .errors import no_gpu
from .tree import flatten, map_tensors

_END = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def _pin(t: torch.Tensor) -> torch.Tensor:
    return t if t.device.type != "cpu" or t.is_pinned() else t.pin_memory()


def _pinning(it: Iterator, depth: int, pin=_pin) -> Iterator:
    """The batches of `it`, pinned in a background thread up to `depth` ahead (the loop does not pay for it)."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def produce():
        try:
            for batch in it:
                item = map_tensors(batch, pin)
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        pass
                if stop.is_set():
                    return
            q.put(_END)
        except BaseException as e:  # re-raised in the loop's thread, where the user sees it
            q.put(_Failed(e))

    threading.Thread(target=produce, name="prefetch-pin", daemon=True).start()
    try:
        while (item := q.get()) is not _END:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()


def prefetch(batches: Iterable, device="cuda", depth: int = 2, pin: bool = True) -> Iterator:
    """The batches of `batches` (tensors, or tuples / lists / dicts of them) on `device`, `depth` batches ahead.

        for x, y in prefetch(loader, "cuda"):      # instead of x, y = x.to("cuda"), y.to("cuda")
            out = model(x)

    Each batch is pinned if it is not already (in a background thread), copied with non_blocking=True on a side
    stream, and the compute stream waits for that copy only (an event per batch); record_stream keeps the caching
    allocator from reusing a batch's memory before the compute stream is done with it. On a CPU device the batches
    pass through unchanged."""
    device = torch.device(device)
    if e := no_gpu("prefetch", device, torch.cuda.is_available()):
        raise e from None
    it = iter(batches)  # here, in the caller's thread: a DataLoader starts its workers from it
    if device.type != "cuda":
        yield from (map_tensors(b, lambda t: t.to(device)) for b in it)
        return
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    source = _pinning(it, depth) if pin else it
    stream = torch.cuda.Stream(device)
    ahead: deque = deque()

    def issue() -> bool:
        try:
            host = next(source)
        except StopIteration:
            return False
        with torch.cuda.stream(stream):
            moved = map_tensors(host, lambda t: t.to(device, non_blocking=True))
            event = torch.cuda.Event()
            event.record(stream)
        ahead.append((moved, event))
        return True

    try:
        for _ in range(max(1, depth)):
            if not issue():
                break
        while ahead:
            moved, event = ahead.popleft()
            compute = torch.cuda.current_stream(device)
            compute.wait_event(event)
            for t in flatten(moved)[0]:
                if t.device.type == "cuda":
                    t.record_stream(compute)
            issue()
            yield moved
    finally:
        if hasattr(source, "close"):
            source.close()
