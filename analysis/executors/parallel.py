"""Where the per-trace work of several traces runs: here, one trace after the other; in worker processes on this
machine; or on a Dask distributed cluster. One interface for the three:

    with executor(jobs=4, dask=None) as run:      # Sequential, Processes or Dask
        parts = run.map(part_of_path, [(path, label, opts), ...], say)

map() calls fn(*args) for each item and returns the results in the items' order, whatever order they finish in; the
first failing item (in that order) raises its own exception (a TraceError stays a TraceError). Each worker holds one
trace's analysis at a time, so N workers need N x the memory of one trace's. A stop (Ctrl-C, SIGTERM to the process
or its group) ends the worker processes, or the local cluster, before the process ends.

Dask is an optional extra (`pip install 'nsys-transfer[dask]'`), imported only by Dask.__enter__. Its own
configuration applies (TLS through the dask config or DASK_* environment variables); `local:N` starts a cluster of N
single-threaded worker processes that listens on 127.0.0.1 alone. Dask workers import nsys_transfer (the same
version) and read each trace at the path given, so the paths must be ones the workers see (a shared filesystem).
A script run by path that uses `local:N` (or Processes where they are not forked) needs the usual multiprocessing
guard, `if __name__ == "__main__":`: the workers start by importing it (the console scripts and `python -m` have it).
"""
from __future__ import annotations

import asyncio
import importlib.util
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..common.errors import TraceError
from ...nsys_core.signals import (exit_on_sigterm, let_stops_in, restore, sigterm_raises, stops_blocked,
                                  terminated)

DASK_EXTRA = "--dask needs the dask extra: pip install 'nsys-transfer[dask]'"
LOCAL = "local"  # --dask local[:N]: a cluster on this machine


def cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform says, else the machine's)."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _quiet(msg: str) -> None:
    pass


class Sequential:
    """In this process, one item after the other: no pickling, the first failure stops the rest."""
    workers = 1
    where = "in this process"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def map(self, fn: Callable, items: Sequence[tuple], say: Callable[[str], None] = _quiet) -> list:
        """fn(*args) for each item, in order."""
        out = []
        for i, args in enumerate(items, 1):
            out.append(fn(*args))
            say(f"[{i}/{len(items)}] done")
        return out


class Processes:
    """In `jobs` worker processes on this machine (concurrent.futures), each running one item at a time."""

    def __init__(self, jobs: int):
        self.workers = jobs
        self.where = f"in {jobs} worker processes"
        self._pool: ProcessPoolExecutor | None = None
        self._previous: dict = {}

    def __enter__(self):
        self._previous = sigterm_raises()
        try:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=_start_method(),
                                             initializer=_worker_setup)
        except BaseException:
            restore(self._previous)
            raise
        return self

    def __exit__(self, *exc):
        try:
            with _stops_kept():  # a stop meanwhile waits for the close
                if exc and exc[0] is not None:  # abandoned (a stop, a failure): the items still running are lost
                    _end_workers(self._pool)
                self._pool.shutdown(wait=True, cancel_futures=True)
        finally:
            restore(self._previous)
            self._previous = {}
        return None

    def map(self, fn: Callable, items: Sequence[tuple], say: Callable[[str], None] = _quiet) -> list:
        """fn(*args) for each item in the worker processes; the results in the items' order."""
        # the workers fork at the first submit, with the stops blocked: one that comes meanwhile waits for
        # _worker_setup (which drops a Ctrl-C) instead of raising in a half-started worker
        with stops_blocked() if _can_hold() else nullcontext():
            futures = [self._pool.submit(fn, *args) for args in items]
        try:
            for i, _ in enumerate(as_completed(futures), 1):
                say(f"[{i}/{len(items)}] done")
            return [f.result() for f in futures]
        except BrokenProcessPool:
            raise TraceError("a worker process died (out of memory?): each one holds a trace's analysis; give fewer "
                             "--jobs") from None


# A stop of worker processes: SIGTERM to this process alone would end it and leave its workers running, orphans that
# nothing stops. So while the pool is open SIGTERM raises SystemExit(143) here (as SIGINT raises KeyboardInterrupt),
# and leaving the pool on it ends the workers: the pool sees them die, as it sees one killed for memory, and joins
# them. The workers ignore Ctrl-C (a signal to the group reaches them too) and keep SIGTERM's default (_worker_setup).


def _can_hold() -> bool:
    return hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()


def _worker_setup() -> None:
    """Each worker process's initializer: Ctrl-C is left to the main process, which ends the workers; SIGTERM ends
    the worker at once, deleting a cache file it was writing (forked, it would have inherited the main process's
    handler, and SystemExit in an item is only sent back as its result: the worker went on to the next trace)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_on_sigterm()
    let_stops_in()  # forked with both blocked (Processes.map): a Ctrl-C that came is dropped


END_GRACE_S = 1.0  # a worker's SIGTERM handler runs once its C call returns (one sqlite query can take seconds)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """The pool's worker processes terminated (SIGTERM: each deletes the cache file it was writing), and killed if
    still running after END_GRACE_S; the pool's shutdown then cancels the pending items and joins them.
    ProcessPoolExecutor.terminate_workers where Python has it (3.14), else what it does."""
    processes = list((pool._processes or {}).values())
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
    else:
        for process in processes:
            process.terminate()
    deadline = time.monotonic() + END_GRACE_S
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.is_alive():  # a half-written cache file it leaves is trimmed after a day
            process.kill()


def _start_method():
    """fork where it is safe and cheap (Linux, this process has no other thread: the workers start with the
    toolkit already imported); else the platform's default (spawn or forkserver)."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


class Dask:
    """On a Dask distributed cluster: the scheduler at `address` (tcp://host:8786, tls://...), or `local:N`, a
    cluster of N worker processes started here on 127.0.0.1 and stopped again on leaving."""

    def __init__(self, address: str):
        self.address = address
        self.local = address.split(":")[0] == LOCAL
        self.where = f"on the Dask cluster at {address}"
        self.workers = None
        self._client = self._cluster = self._distributed = None
        self._previous: dict = {}
        self._tracker_was_running = True

    def __enter__(self):
        try:
            import distributed  # noqa: PLC0415 - the optional extra: only here
        except ImportError:
            raise TraceError(DASK_EXTRA) from None
        self._distributed = distributed
        self._previous = sigterm_raises()
        self._tracker_was_running = _resource_tracker_running()
        try:
            with _stops_kept(self.local), _stops_held(self.local):
                if self.local:
                    n = local_workers(self.address)
                    self._cluster = distributed.LocalCluster(**local_cluster_options(n))
                    self.where = f"on a local Dask cluster of {n} workers"
                self._client = distributed.Client(self._cluster or self.address, set_as_default=False)
        except (OSError, TimeoutError) as e:
            self.__exit__()
            raise TraceError(f"--dask {self.address}: cannot reach the Dask scheduler ({e})") from None
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        self.workers = len(self._client.scheduler_info().get("workers", {})) or None
        return self

    def __exit__(self, *exc):
        try:
            with _stops_kept(self.local):  # a stop meanwhile waits for the close
                self._close(abandoned=bool(exc) and exc[0] is not None)
        finally:
            restore(self._previous)
            self._previous = {}
        return None

    def _close(self, abandoned: bool) -> None:
        """The client and the local cluster closed; when their work is abandoned (a stop, a failure), the tasks still
        running are cancelled and their workers killed after STOP_S rather than waited for."""
        if abandoned and self._client is not None:
            self._client.close()
        if abandoned and self._cluster is not None:
            _kill_workers(self._cluster)
        for part in (self._client, self._cluster):
            if part is not None:
                part.close()
        self._client = self._cluster = None
        if self.local and not self._tracker_was_running:
            _end_resource_tracker()

    def map(self, fn: Callable, items: Sequence[tuple], say: Callable[[str], None] = _quiet) -> list:
        """fn(*args) for each item on the cluster's workers (client.map, client.gather); the results in order."""
        columns = [list(c) for c in zip(*items)]  # client.map(fn, a's, b's, ...) calls fn(a, b, ...)
        futures = self._client.map(fn, *columns, pure=False) if items else []
        for i, _ in enumerate(self._distributed.as_completed(futures, loop=self._client.loop), 1):
            say(f"[{i}/{len(items)}] done")
        failed = next((f for f in futures if f.status == "error"), None)
        if failed is not None:
            raise failed.exception()
        return self._client.gather(futures)


# A stop (Ctrl-C or SIGTERM, to this process or to its whole group) ends a local cluster through distributed's own
# close, in this process: its nannies stop their worker processes and join them, and the semaphores they share are
# freed before the process ends (else multiprocessing's resource tracker reports them leaked). So while the executor
# is open SIGTERM raises SystemExit(143), as SIGINT raises KeyboardInterrupt, and leaving it closes the cluster; the
# workers ignore both (dask_worker.dask_setup, their preload; until then they hold them, _stops_held), so that a
# Ctrl-C to the group prints none of their tracebacks, and exit by themselves should this process be killed outright
# (distributed's parent-alive pipe).

STOP_S = 1.0  # a stop kills a local worker (SIGKILL) that has not stopped this soon: the trace it analyses is lost


def _kill_workers(cluster) -> None:
    """A stop's short way to close a local cluster: the nannies ask their worker processes to stop, kill those that
    are still running after STOP_S (without the nanny's warning that it had to) and join them."""
    nanny_log = logging.getLogger("distributed.nanny")
    level = nanny_log.level
    nanny_log.setLevel(logging.ERROR)
    # a worker's heartbeat in flight when the scheduler dropped it ("Received heartbeat from unregistered worker",
    # seen once in a CI run) is the stop's own race, not news: this process ends after the stop, so never restored
    logging.getLogger("distributed.scheduler").setLevel(logging.ERROR)
    try:
        cluster.sync(_close_nannies, list(cluster.workers.values()))
    finally:
        nanny_log.setLevel(level)


async def _close_nannies(nannies) -> None:
    done = await asyncio.gather(*(nanny.close(timeout=STOP_S, reason="stopped") for nanny in nannies),
                                return_exceptions=True)
    for result in done:  # a TimeoutError: a killed worker not joined in time (a loaded machine), still joined later
        if isinstance(result, BaseException) and not isinstance(result, TimeoutError):
            raise result


def _resource_tracker_running() -> bool:
    from multiprocessing import resource_tracker  # noqa: PLC0415
    return getattr(resource_tracker._resource_tracker, "_pid", None) is not None


def _end_resource_tracker() -> None:
    """multiprocessing's resource tracker, started for the nannies' queues, ended and joined once they are closed:
    it would otherwise end only after this process, an orphan (a zombie until init reaps it)."""
    from multiprocessing import resource_tracker  # noqa: PLC0415
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


@contextmanager
def _stops_kept(keep: bool = True):
    """A stop that arrives while a local cluster starts or closes is kept and raised at the end of the block:
    interrupted half-way, LocalCluster leaves a cluster that nothing closes but distributed's atexit hook (slowly, with
    a traceback). Not for a remote scheduler's client, which may wait long for one that does not answer."""
    if not keep or threading.current_thread() is not threading.main_thread():
        yield
        return
    kept: list[int] = []
    ours = {signal.SIGINT: (signal.default_int_handler,), signal.SIGTERM: (signal.SIG_DFL, terminated)}
    previous = {sig: signal.signal(sig, lambda signum, frame: kept.append(signum))
                for sig, defaults in ours.items() if signal.getsignal(sig) in defaults}
    try:
        yield
    finally:
        restore(previous)
        if kept:
            raise KeyboardInterrupt if kept[0] == signal.SIGINT else SystemExit(128 + kept[0])


@contextmanager
def _stops_held(keep: bool = True):
    """SIGINT and SIGTERM blocked in this thread while a local cluster starts. A worker process takes a second or more
    to start (Python, distributed, its preload) before dask_setup makes it ignore them; a Ctrl-C to the group in that
    time raised KeyboardInterrupt in its imports (a traceback from each worker, then the nanny's and the worker's own
    for the half-started worker). The threads the start creates (the cluster's event loop, each nanny's process
    starter) inherit the mask, and so do the worker processes they spawn (fork and exec keep it): a stop sent to the
    group meanwhile waits in a starting worker until dask_setup ignores it, which discards it. Here it waits for the
    end of the block, and _stops_kept keeps it. Multiprocessing spawns its resource tracker so (bpo-33613)."""
    if not keep or not _can_hold():
        yield
        return
    from multiprocessing import resource_tracker  # noqa: PLC0415
    resource_tracker.ensure_running()  # first, here: started from the event loop, it would unblock them there
    with stops_blocked():
        yield


WORKER_PRELOAD = str(Path(__file__).with_name("dask_worker.py"))  # by its path: imported without the toolkit


def local_cluster_options(workers: int) -> dict:
    """distributed.LocalCluster's options for `local:N`: N single-threaded worker processes, every port on 127.0.0.1
    (the scheduler's, the workers' and the scheduler's HTTP routes, on a free port), no dashboard, and the workers'
    preload (dask_worker.dask_setup)."""
    return {"n_workers": workers, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1",
            "dashboard_address": None, "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
            "preload": [WORKER_PRELOAD]}


def local_workers(address: str) -> int:
    """N of `local:N` (the cores when N is left out); a TraceError for anything else."""
    _, _, n = address.partition(":")
    if not n:
        return cores()
    if not n.isdigit() or int(n) < 1:
        raise TraceError(f"--dask {address}: give local:N with N at least 1 worker, or a scheduler address "
                         "(tcp://host:8786)")
    return int(n)


def _has_distributed() -> bool:
    try:
        return importlib.util.find_spec("distributed") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules (blocked): not installed for us
        return False


def _check_address(address: str) -> None:
    """TraceError for a scheduler address Dask cannot parse (its client would wait a minute, then fail twice)."""
    from distributed.comm.addressing import parse_address, parse_host_port  # noqa: PLC0415 - the optional extra

    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as e:
        raise TraceError(f"--dask {address}: not a scheduler address ({e}); give tcp://HOST:PORT, tls://HOST:PORT "
                         "or local:N") from None


def executor(jobs: int | None = None, dask: str | None = None, items: int | None = None):
    """The executor for `items` pieces of work: Dask when an address is given, else `jobs` worker processes (default:
    the cores; never more than the items), else (one job or one item) this process."""
    if dask:
        if dask.split(":")[0] == LOCAL:
            local_workers(dask)  # its mistakes before any work
        if not _has_distributed():  # the missing extra too, before any work is announced
            raise TraceError(DASK_EXTRA)
        if dask.split(":")[0] != LOCAL:
            _check_address(dask)
        return Dask(dask)
    if jobs is not None and jobs < 1:
        raise TraceError(f"--jobs {jobs}: give at least 1 (1: one trace after the other in this process)")
    n = jobs or cores()
    if items is not None:
        n = min(n, items)
    return Processes(n) if n > 1 else Sequential()
