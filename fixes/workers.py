"""Workers (processes or threads) that run one function on every batch handed to them, and the queues between them
and the caller.

Unlike multiprocessing's JoinableQueue.join(), every hand-over and every wait checks the workers' liveness, so a
worker that dies (even one of several, while the others keep up) ends the run within a poll with a message naming
it, instead of hanging it or finishing short-handed. Process workers die with the process that started them.
"""
from __future__ import annotations

import heapq
import os
import queue
import signal
import threading
import time
from typing import Callable

import torch
import torch.multiprocessing as mp

from . import segments
from .errors import ProcessFailed, WorkerDied, describe
from .lifetime import raise_held, stops_held, worker_started

POLL_S = 0.2
DONE, FAILED = "done", "failed"  # what a worker posts: a slice's result, or its last words (any batch id is the user's)
SIGTERM_GRACE_S = 0.2  # a worker killed by SIGTERM: time for the same signal to reach this process, if it was sent


class _Counters:
    """Slices still to be done per slot: shared memory for processes, a list under a lock for threads."""

    def __init__(self, n: int, ctx):
        self.values = ctx.Array("i", max(1, n)) if ctx else [0] * max(1, n)
        self.lock = self.values.get_lock() if ctx else threading.Lock()

    def set(self, slot: int, n: int) -> None:
        with self.lock:
            self.values[slot] = n

    def done_one(self, slot: int) -> bool:
        """One slice of the slot done; True when it was the last."""
        with self.lock:
            self.values[slot] -= 1
            return self.values[slot] <= 0


def _worker_loop(index: int, name: str, parent_pid: int | None, handle: Callable, in_q, free_q, result_q, counters):
    if parent_pid is not None:
        worker_started(parent_pid, f"{name}-{index}")
        # torch's intra-op thread pool does not survive fork: the first parallel op in the child would hang (as torch's
        # own DataLoader workers do, each worker runs torch on one thread)
        torch.set_num_threads(1)
    batch_id = None
    try:
        while (item := in_q.get()) is not None:
            batch_id, payload, part, parts, extra = item
            started = time.perf_counter()
            result = handle(batch_id, payload, part, parts, extra)
            result_q.put((DONE, batch_id, part, result, time.perf_counter() - started))
            if isinstance(payload, int) and counters.done_one(payload):
                free_q.put(payload)  # the slot's last slice is done: it can be filled again
    except BaseException as e:  # told to the caller in one line (a traceback here would interleave with its output)
        where = f" on batch {batch_id}" if batch_id is not None else ""
        label = name.replace("-", " ")
        result_q.put((FAILED, index, f"{label} {index} (pid {os.getpid()}) failed{where}: {describe(e)}"))
        if parent_pid is not None:
            result_q.close()
            result_q.join_thread()
            os._exit(1)


class WorkerPool:
    """n workers running handle(batch_id, payload, part, parts, extra) -> result.

    payload is a slot index (an int: the slot comes back on get_free() once all `parts` slices of it are done; the
    lowest free one first, so that a pool with slots to spare keeps touching the same few) or any object to hand
    over (pickled for processes). `completed` lists (batch id, [result of each part]) of every batch whose parts are
    all done; `busy_s` the seconds the workers spent in handle for them. Processes are forked: handle needs no
    pickling, and must not use CUDA. grow=m: start with n workers; grow() adds one, up to m, while more slices wait
    than there are workers (the backlog sizes the pool), or at every call. Call grow() from the thread that made the pool: a worker
    forked from another thread is tied to that thread's life (Linux's parent-death signal follows the thread), and
    on the H200 such workers held every close for its 5 s grace."""

    def __init__(self, handle: Callable, n: int, slots: int = 0, threads: bool = False, name: str = "output-worker",
                 in_maxsize: int = 0, grow: int | None = None):
        self._ctx = None if threads else mp.get_context("fork")
        make = queue.Queue if threads else self._ctx.Queue
        self.in_q, self.free_q, self.result_q = make(maxsize=in_maxsize), make(), make()
        self.counters, self.name, self.threads = _Counters(slots, self._ctx), name, threads
        self.label = name.replace("-", " ")  # in messages: "output worker 3 (pid N) was killed by SIGKILL"
        self.completed: list[tuple[int, list]] = []
        self.busy_s = 0.0
        self.most = max(n, grow or n)
        self._parts: dict[int, dict[int, object]] = {}
        self._expect_parts: dict[int, int] = {}
        self._free: list[int] = list(range(slots))  # a heap
        self._handed = self._done = 0  # slices handed to the workers, and finished
        self._handle = handle
        self.workers: list = []
        self.closed = False
        self._asked: bool | None = None  # ask_to_stop(): None until it ran, then whether the workers were told to end
        try:
            for _ in range(n):
                self._add_worker()
        except BaseException:  # a stop or a failed fork: the caller never gets the pool, so stop what it forked
            self.close(graceful=False)
            raise

    def _add_worker(self) -> None:
        i, name = len(self.workers), self.name
        args = (i, name, None if self.threads else os.getpid(), self._handle, self.in_q, self.free_q, self.result_q,
                self.counters)
        if self.threads:
            w = threading.Thread(target=_worker_loop, args=args, name=f"{name}-{i}", daemon=True)
            w.start()
            self.workers.append(w)
            return
        w = self._ctx.Process(target=_worker_loop, args=args, name=f"{name}-{i}", daemon=True)
        with stops_held():  # until it is recorded: close() and abort() stop only the workers they know
            w.start()
            self.workers.append(w)
        raise_held()

    def check_alive(self) -> None:
        """WorkerDied or ProcessFailed naming the first worker that is gone (a waitpid per worker, no blocking)."""
        for i, w in enumerate(self.workers):
            if not w.is_alive():
                self.collect()  # a worker that failed said why on the result queue: that becomes the message
                code = None if self.threads else w.exitcode
                if code == -signal.SIGTERM:
                    time.sleep(SIGTERM_GRACE_S)  # sent to the whole group? then this process's own stop comes first
                raise WorkerDied(f"{self.label} {i}{'' if self.threads else f' (pid {w.pid})'} "
                                 f"{_how_it_ended(code)} while batches were pending")

    def put(self, batch_id: int, payload, parts: int = 1, extra=None) -> None:
        """Hand a batch to the workers in `parts` slices."""
        self.check_alive()  # every batch: a worker that died while the others keep up must not go unnoticed
        if isinstance(payload, int):
            self.counters.set(payload, parts)
        self._expect_parts[batch_id] = parts
        for k in range(parts):
            self._wait(lambda: self.in_q.put((batch_id, payload, k, parts, extra), timeout=POLL_S), queue.Full)  # noqa: B023
        self._handed += parts

    def grow(self, backlog_only: bool = True) -> bool:
        """One more worker, up to `most`: when more slices wait than there are workers, or (backlog_only=False) at
        every call (a pool of a known size, forked a worker at a time so that no one fork holds the caller long).
        Whether it added one."""
        self.collect()
        waiting = self._handed - self._done > len(self.workers)
        if len(self.workers) < self.most and (waiting or not backlog_only):
            self._add_worker()
            return True
        return False

    def get_free(self, check: Callable = lambda: None, timeout_s: float = 600.0) -> int:
        """The lowest free slot's index, waiting for one; `check` runs every poll (the caller's own failures);
        WorkerDied when none came free in timeout_s (every worker stuck in its batch)."""
        while True:
            try:
                heapq.heappush(self._free, self.free_q.get_nowait())
            except queue.Empty:
                break
        if self._free:
            return heapq.heappop(self._free)
        deadline = time.monotonic() + timeout_s

        def stuck():
            check()
            if time.monotonic() > deadline:
                raise WorkerDied(f"{self.label}s freed no buffer in {timeout_s:.0f} s ({len(self.completed)} batches "
                                 "processed); they are stuck")
        return self._wait(lambda: self.free_q.get(timeout=POLL_S), queue.Empty, stuck)

    def _wait(self, attempt: Callable, retry_on, check: Callable = lambda: None):
        while True:
            self.check_alive()
            check()
            try:
                return attempt()
            except retry_on:
                self.collect()

    def collect(self) -> None:
        """Take every result the workers have posted, without waiting; ProcessFailed when one reported a failure."""
        while True:
            try:
                posted = self.result_q.get_nowait()
            except queue.Empty:
                return
            self._add(*posted)

    def _add(self, kind: str, *posted) -> None:
        if kind == FAILED:  # a worker's last words (see _worker_loop)
            raise ProcessFailed(str(posted[1]))
        batch_id, part, result, seconds = posted
        self.busy_s += seconds
        self._done += 1
        got = self._parts.setdefault(batch_id, {})
        got[part] = result
        if len(got) == self._expect_parts.get(batch_id, 1):
            del self._parts[batch_id]
            self._expect_parts.pop(batch_id, None)
            self.completed.append((batch_id, [got[k] for k in sorted(got)]))

    def wait(self, n_batches: int, timeout_s: float = 600.0, check: Callable = lambda: None) -> None:
        """Block until n_batches batches are completed; fail fast on a dead worker or on `check`; WorkerDied when no
        slice was finished in timeout_s (a long drain that progresses is waited out)."""
        deadline, done = time.monotonic() + timeout_s, self._done
        while len(self.completed) < n_batches:
            self.check_alive()
            check()  # it may collect the last results: then waiting on the queue would only add a poll
            if len(self.completed) >= n_batches:
                break
            try:
                self._add(*self.result_q.get(timeout=POLL_S))
            except queue.Empty:
                if self._done != done:
                    deadline, done = time.monotonic() + timeout_s, self._done
                elif time.monotonic() > deadline:
                    raise WorkerDied(f"{self.label}s finished nothing in {timeout_s:g} s ({len(self.completed)} of "
                                     f"{n_batches} batches processed); they are stuck") from None

    def ask_to_stop(self, graceful: bool = True) -> bool:
        """Tell the workers to end once the batches handed to them are done (graceful, and all alive), without
        waiting for them: the caller can free its own side meanwhile. Whether they were told."""
        if self.closed or self._asked is not None:
            return bool(self._asked)
        # one dead: the others may be stuck on a lock it held, so they are stopped, not asked
        self._asked = graceful and all(w.is_alive() for w in self.workers)
        for _ in self.workers if self._asked else []:
            try:
                self.in_q.put(None, timeout=1)
            except queue.Full:
                break
        return self._asked

    def close(self, graceful: bool = True) -> None:
        """Stop the workers: let them finish when told so and all are alive, else stop them now."""
        if self.closed:
            return
        graceful = self.ask_to_stop(graceful)
        self.closed = True
        deadline = time.monotonic() + (5 if graceful else 0)
        try:
            for w in self.workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:  # a second Ctrl-C in the wait: the workers are still stopped (closed is set: nobody would retry)
            if not self.threads:
                self._stop_processes()

    def _stop_processes(self) -> None:
        for w in self.workers:
            if w.is_alive():
                w.terminate()
                w.join(timeout=2)
            if w.is_alive():
                os.kill(w.pid, signal.SIGKILL)
                w.join(timeout=2)
        # a worker killed (SIGKILL) while it created a shared-memory segment left its name: this process outlives it
        segments.sweep([w.pid for w in self.workers if not w.is_alive()])
        try:
            self.collect()
        except ProcessFailed:
            pass  # the run is over; what a worker said then no longer changes it
        for q in (self.in_q, self.free_q, self.result_q):
            q.cancel_join_thread()
            q.close()


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}" + ("; its last lines are above" if exitcode not in (0, 1) else "")
