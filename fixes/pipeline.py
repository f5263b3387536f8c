"""OutputPipeline: model outputs to CPU post-processing without stalling the GPU (see docs/fixes.md)."""
from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Callable

import torch

from ..nsys_core.contracts import COPY_TO_CPU, PIPELINE_CLOSE, PIPELINE_DRAIN, PIPELINE_PACE, QUEUE_OUTPUT

from .copier import CpuCopier, CudaCopier, part_bounds
from .delivery import Delivery
from .errors import LayoutError, PipelineError, TerminatedBySignal, no_gpu
from .checksums import IntegrityReport, MASK64, compare
from .lifetime import StopSignals, each_then_raise
from .pace import Pace
from .ranges import nvtx_range
from .slots import HostSlots, Layout
from .tree import flatten
from .workers import WorkerPool


# worker processes forked with the buffers, then one more per batch up to `workers` (auto: while batches wait): a
# fork of a CUDA program took 15-33 ms on the H200, and eight at the first submit took 147 ms of the loop's thread
FIRST_WORKERS = 2


def _indexed(device: torch.device) -> torch.device:
    """cuda -> cuda:N (the current device): a tensor's device always has its index."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _has_numpy_dtype(dtype: torch.dtype) -> bool:
    try:
        torch.empty(0, dtype=dtype).numpy()
    except (TypeError, RuntimeError):
        return False
    return True


def spare_cores() -> int:
    """The cores this process may use, less two: the launching thread's and the copies' monitor's."""
    return max(1, len(os.sched_getaffinity(0)) - 2)


VERIFY_ENV = "NSYS_TRANSFER_VERIFY"  # =1: every pipeline verifies and says at its end whether all arrived intact


class OutputPipeline:
    """Hands each batch's outputs to process(batch_id, outputs) in worker processes, copying them off the GPU on a
    side stream into pinned, recycled buffers, so the loop launches the next batch at once.

        with OutputPipeline(process, workers=8) as outputs:
            for i, batch in enumerate(loader):
                outputs.submit(i, model(batch))
        # here every batch was processed; a failed worker or process() raised PipelineError

    outputs: a tensor or a tuple / list / dict of tensors (any dtype; other values pass through unchanged), on a GPU
    or on the CPU. The buffers are sized from the first batch (or from `like`); later batches may be smaller.
    process gets NumPy views of the buffers (tensors=True: torch tensors; bfloat16 needs it) valid only during the
    call: copy what it keeps. buffers: how many batches may be in flight (default workers + 2); submit() waits for a
    free one (back-pressure). split=k: each batch's rows (dimension 0) are cut into k slices that k workers process at
    once, called as process(batch_id, outputs, rows) (a batch whose tensors differ in dimension 0 goes whole, with
    rows=None). Each batch in flight needs its own batch_id. threads=True: workers are threads of this process (light
    post-processing, nothing shared). verify=True: every batch's bytes are checksummed on the device and again in
    the worker; report() says whether each batch arrived exactly once, intact (NSYS_TRANSFER_VERIFY=1 turns it on
    for every pipeline without a code change, and each then prints its verdict when it closes), and its `pace`: the
    loop's rate, the outputs' and what the workers can take. workers="auto": two workers first (split=k: k), then one more
    whenever batches wait for a worker, up to the cores this process may use less two (buffers: that many + 2,
    of which only those in use are ever touched).
    Worker processes are forked from the loop's thread: two at the first submit (split=k: k), then one per submitted
    batch up to `workers`; all of them at __enter__ with like= (the set-up done before the loop). process needs no
    pickling, and must not use CUDA. like= takes tensors on the outputs' device or meta tensors with device=. The copy stream is made
    at __enter__ where the device is known (like=, device=, or CUDA already in use): made later, while the GPU
    computes, it waits for the GPU to go idle."""

    def __init__(self, process: Callable, workers: int | str = 8, *, buffers: int | None = None, split: int = 1,
                 threads: bool = False, tensors: bool = False, verify: bool = False, like=None, device=None,
                 timeout_s: float = 600.0, name: str = "output-worker"):
        self.auto = workers == "auto"
        if not self.auto and (not isinstance(workers, int) or isinstance(workers, bool)):
            raise ValueError(f"workers must be a number or 'auto', not {workers!r}")
        most = spare_cores() if self.auto else int(workers)
        if most < 1 or split < 1 or (buffers is not None and buffers < 1):
            raise ValueError("workers, split and buffers must be at least 1")
        # auto: a few workers first, one more whenever batches wait for one, up to the spare cores
        self.process, self.n_workers, self.split, self.threads = process, most, split, threads
        self.n_buffers = buffers or most + 2
        self.announce = os.environ.get(VERIFY_ENV) == "1"
        verify = verify or self.announce
        self.tensors, self.verify, self.like, self.timeout_s, self.name = tensors, verify, like, timeout_s, name
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and (e := no_gpu(type(self).__name__, self.device, torch.cuda.is_available())):
            raise e from None
        self.submitted = 0
        self.pace = Pace()  # which side set the pace (fixes/pace.py): the loop's waits on the workers
        self.expected: list[tuple] = []  # (batch id, checksum on the GPU) per submission: an id may be reused
        self._slots = self._pool = self._copier = self._monitor = None
        self._pending: queue.Queue = queue.Queue()
        self._failure: BaseException | None = None
        self._stops = StopSignals()
        self._closed = self._entered = self._said_stop = False
        self._open_ids: set = set()  # submitted, not yet processed (_check_new_id)
        self._seen = 0  # of the pool's completed batches, how many were taken off _open_ids

    # -- the loop's side ---------------------------------------------------------------------------------------
    def __enter__(self) -> "OutputPipeline":
        self._check_open()
        if self._entered:
            raise PipelineError(f"this {type(self).__name__} is already open: one `with` block at a time")
        self._entered = True
        self._stops.install()
        try:
            if self.like is not None:
                self._start(*flatten(self.like), eager=True)
            else:
                self._copier = self._early_copier()
        except BaseException as e:  # __exit__ will not run: stop what was started, unpin what was pinned
            self.abort()
            self._say_if_stopped(e)
            raise
        return self

    def _check_open(self) -> None:
        if self._closed:
            raise PipelineError(f"this {type(self).__name__} is closed: it serves one `with` block; make a new one")

    def _early_copier(self) -> CudaCopier | None:
        """The copier for the device the outputs will likely be on, made before the first batch runs: torch makes its
        stream pool with the first stream, and at the first submit that took 128 stream creations, 120 ms in a capture
        on the H200, one of them waiting for the batch to finish. None where CUDA is not in use yet."""
        device = self.device
        if device is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            current = torch.cuda.current_device()
            has_context = getattr(torch._C, "_cuda_hasPrimaryContext", lambda index: False)
            if has_context(current):  # never a new CUDA context on a GPU the program does not use
                device = torch.device("cuda", current)
        if device is None or device.type != "cuda":
            return None
        return CudaCopier(_indexed(device), self.n_buffers, self.split)

    def _cuda_device(self, leaves) -> torch.device | None:
        """The one GPU the outputs (or device=) are on, with its index; None on the CPU. LayoutError for two."""
        devices = {_indexed(t.device) for t in leaves if t.device.type != "meta"}
        devices |= {_indexed(self.device)} if self.device else set()
        cuda = {d for d in devices if d.type == "cuda"}
        if len(cuda) > 1:
            raise LayoutError(f"the outputs are on {len(cuda)} GPUs ({', '.join(sorted(map(str, cuda)))}): one "
                              "pipeline copies from one; move them to one device, or use a pipeline per device")
        return cuda.pop() if cuda else None

    def _copier_for(self, cuda: torch.device | None):
        """The copier made at __enter__ when it is for this device, else a new one."""
        if cuda is None:
            return CpuCopier(self.n_buffers)
        if isinstance(self._copier, CudaCopier) and self._copier.device == cuda:
            return self._copier
        return CudaCopier(cuda, self.n_buffers, self.split)

    def submit(self, batch_id: int, outputs) -> None:
        """Hand one batch's outputs over; returns once their copy is queued (after a free buffer, if all are full)."""
        self._check_open()
        self._raise_failure()
        self._check_new_id(batch_id)
        leaves, tree = flatten(outputs)
        if self._slots is None:
            self._start(leaves, tree)
        if tree.signature() != self._tree.signature():
            raise LayoutError("this batch's outputs are not structured as the first batch's")
        self._slots.layout.check(leaves)
        leaves = [t if t.is_contiguous() else t.contiguous() for t in leaves]
        with nvtx_range(COPY_TO_CPU):
            since = self.pace.started()
            slot = self._pool.get_free(check=self._raise_failure, timeout_s=self.timeout_s)
            self.pace.waited(since)
            shapes = tuple(tuple(t.shape) for t in leaves)
            bounds = self._bounds(leaves)
            self._slots.ready(slot)
            self._copier.copy(slot, leaves, self._slots.views(slot, shapes), bounds, self.verify)
        with nvtx_range(QUEUE_OUTPUT):
            self._pending.put((batch_id, slot, shapes, bounds, tree.values()))
        self._open_ids.add(batch_id)
        self.submitted += 1
        if self.auto or self.submitted > 1:  # the first submit forked the first workers; on the loop's thread (grow says why)
            if self._pool.grow(backlog_only=self.auto):
                self.pace.add_workers(1)
        self.pace.batches = self.submitted

    def _check_new_id(self, batch_id) -> None:
        """ValueError for an id still in flight: the workers' results, the slices of a split batch and the checksums
        are all told apart by it."""
        done = self._pool.completed if self._pool is not None else []
        seen = len(done)  # appended to meanwhile by the pool: read up to here
        for finished, _ in done[self._seen:seen]:
            self._open_ids.discard(finished)
        self._seen = seen
        if batch_id in self._open_ids:
            raise ValueError(f"batch id {batch_id!r} was submitted before and is still being processed: give each "
                             "batch its own id")

    def _bounds(self, leaves) -> list[tuple[int, int]]:
        rows = {t.shape[0] if t.dim() else None for t in leaves}
        if self.split == 1 or len(rows) != 1 or None in rows:
            return [(0, 0)]  # one part: the whole batch
        n = rows.pop()
        return [b for b in part_bounds(n, min(self.split, n)) if b[1] > b[0]] or [(0, 0)]

    def _start(self, leaves, tree, eager: bool = False) -> None:
        """The buffers, the copier, the workers and the monitor thread, sized for these outputs. eager (like=, at
        __enter__, before the loop: nothing to overlap): every worker forked and two slots pinned now."""
        if not leaves:
            raise LayoutError("the outputs hold no tensor")
        odd = [t for t in leaves if t.layout != torch.strided or t.is_quantized]
        if odd:
            what = "quantized" if odd[0].is_quantized else str(odd[0].layout).replace("torch.", "")
            raise LayoutError(f"{what} outputs have no plain bytes to copy: pass dense tensors (.to_dense(), "
                              ".dequantize())")
        no_numpy = sorted({str(t.dtype).replace("torch.", "") for t in leaves
                           if not self.tensors and not _has_numpy_dtype(t.dtype)})
        if no_numpy:
            raise LayoutError(f"{', '.join(no_numpy)} outputs have no NumPy dtype: pass tensors=True (process gets "
                              "torch tensors)")
        cuda = self._cuda_device(leaves)
        self._tree = tree
        self._slots = HostSlots(Layout.of(leaves), self.n_buffers, shared=not self.threads, pin=cuda is not None,
                                device=cuda, eager=eager)
        self._copier = self._copier_for(cuda)
        delivery = Delivery(self.process, self._slots, tree, self.tensors, self.verify, split=self.split > 1)
        first = self.n_workers if not self.auto and (eager or self.threads) else \
            min(self.n_workers, max(FIRST_WORKERS, self.split))
        self._pool = WorkerPool(delivery, first, self.n_buffers, self.threads, self.name, grow=self.n_workers)
        self.pace.add_workers(first)
        self._monitor = threading.Thread(target=self._watch, name=f"{self.name}-monitor", daemon=True)
        self._monitor.start()

    # -- the monitor thread ------------------------------------------------------------------------------------
    def _watch(self) -> None:
        """Hand each slot to the workers once its copy has landed (events complete in submission order)."""
        try:
            while (item := self._pending.get()) is not None:
                batch_id, slot, shapes, bounds, values = item
                self._copier.wait(slot)
                if self.verify:
                    self.expected.append((batch_id, self._copier.expected(slot, len(bounds))))
                rows = None if bounds == [(0, 0)] else bounds
                self._pool.put(batch_id, slot, len(bounds), (shapes, rows, values))
        except BaseException as e:  # raised in the loop's thread by the next submit() or close()
            self._failure = e

    def _raise_failure(self) -> None:
        self._stops.raise_if_stopped()
        if self._failure is not None:
            raise self._failure
        if self._pool is not None:
            self._pool.collect()

    # -- the end -----------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until every batch submitted so far was processed (the pipeline stays open)."""
        if self._pool is not None:
            with nvtx_range(PIPELINE_DRAIN):
                since = time.monotonic()
                self._pool.wait(self.submitted, self.timeout_s, check=self._raise_failure)
                self.pace.drained(since)
                self.pace.worked(len(self._pool.completed), self._pool.busy_s)
                self._mark_pace()

    def _mark_pace(self) -> None:
        """The workers' pace in the trace (an empty NVTX range inside the drain): the analysis reads it."""
        per = self.pace.work_s_per_batch
        if per is not None:
            with nvtx_range(PIPELINE_PACE.format(workers=self.pace.workers, ms_per_batch=1000 * per)):
                pass

    def close(self) -> None:
        """Wait until every submitted batch was processed, then stop the workers and free the buffers."""
        if self._closed:
            return
        with nvtx_range(PIPELINE_CLOSE):  # the teardown is on the user's clock: the trace shows it
            try:
                try:
                    self.flush()
                except BaseException:
                    self._shutdown(graceful=False)
                    raise
                self._shutdown(graceful=True)
            except BaseException as e:
                self._say_if_stopped(e)
                raise
        if self.announce:
            print(f"{self.name.replace('-', ' ')}s: {self.report().verdict()}; {self.pace.line()}", file=sys.stderr)

    def abort(self) -> None:
        """Stop now: workers stopped, buffers freed, pending batches dropped."""
        self._shutdown(graceful=False)

    def _shutdown(self, graceful: bool) -> None:
        if self._closed:
            return
        self._closed = True
        # each step even if one before raised (a sticky CUDA error, a second Ctrl-C); the copies end before the
        # buffers they write into are unpinned; the workers exit (each unmapping its own view of the buffers) while
        # this process unpins and unmaps its own: on the H200 the two were 0.11 and 0.29 s of a 0.40 s close one
        # after the other (seg_logits_fixed)
        each_then_raise(lambda: self._stop_monitor(graceful),
                        lambda: self._pool is not None and self._pool.ask_to_stop(graceful=graceful),
                        lambda: self._copier is not None and self._copier.finish(),
                        lambda: self._slots is not None and self._slots.close(),
                        lambda: self._pool is not None and self._pool.close(graceful=graceful),
                        self._stops.restore)

    def _stop_monitor(self, graceful: bool) -> None:
        if self._monitor is not None:
            self._pending.put(None)
            if self._monitor.is_alive():  # a stop can land while it starts: then there is none to join
                self._monitor.join(timeout=2 if graceful else 0.5)

    def _say_if_stopped(self, e: BaseException) -> None:
        if isinstance(e, TerminatedBySignal) and not self._said_stop:  # once: close() inside the block, then __exit__
            self._said_stop = True
            print(f"{self.name.replace('-', ' ')}s: stopped by SIGTERM after {self.processed} of {self.submitted} "
                  "batches were processed; workers stopped, buffers freed", file=sys.stderr)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
            return False
        self.abort()
        self._say_if_stopped(exc)
        return False

    # -- what arrived ------------------------------------------------------------------------------------------
    @property
    def processed(self) -> int:
        """Batches every part of which process() has returned from."""
        return len(self._pool.completed) if self._pool is not None else 0

    def received(self) -> list[tuple[int, int | None]]:
        """(batch id, checksum of the bytes the workers received) per processed batch (None without verify)."""
        done = self._pool.completed if self._pool is not None else []
        return [(b, None if None in parts else sum(parts) & MASK64) for b, parts in done]

    def report(self) -> IntegrityReport:
        """Which batches reached process() exactly once and intact (checked=False without verify), and the pace:
        the loop's rate, the outputs', what the workers can take and which side set it (fixes/pace.py)."""
        if not self.verify:
            out = IntegrityReport(expected_batches=self.submitted, processed=self.processed, checked=False)
        else:
            out = compare(list(self.expected), [(b, c) for b, c in self.received()])
        out.pace = self.pace.as_dict()
        return out

