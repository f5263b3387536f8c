"""Reads that run beside the analysis, on a thread pool (concurrent.futures): SQLite scans without the GIL, so on two
cores they overlap with the GPU analysis. Two kinds: a call, whose Future the caller keeps (`submit`), and typed
tables loaded in order (`load`), which a reader waits for by name (`wait`) before reading them."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for

from ..common.errors import TraceError

WORKERS = 16  # more than the analysis ever starts at once: a task that waits for another never waits for a worker


class Background:
    """The background work of one trace. tables(name) -> the value a dotted table name ("device.kernels") reads."""

    def __init__(self, tables):
        self._tables = tables
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="trace-read")
        self._futures: dict[str, Future] = {}

    def submit(self, fn, *args, also: tuple[str, ...] = ()) -> Future:
        """Run fn(*args) in the background: its Future. `wait()` for a name in `also` (a table fn fills) waits for
        it too."""
        future = self._pool.submit(fn, *args)
        self._futures.update({n: future for n in also})
        return future

    def load(self, *names: str) -> None:
        """Load the named tables in this order in the background. A table that fails with a TraceError fails again,
        on the reader's thread, when it is read."""
        done = {n: Future() for n in names}  # wait(n) waits for n alone, not for the names after it
        self._futures.update(done)

        def work():
            try:
                for n in names:
                    try:
                        self._tables(n)
                    except TraceError:
                        pass
                    finally:
                        done[n].set_result(None)
            finally:
                for f in done.values():
                    if not f.done():
                        f.set_result(None)
        self._pool.submit(work)

    def wait(self, *names: str) -> None:
        """Wait for the background work of these names (a cached_property has no lock from Python 3.12 on)."""
        wait_for([self._futures[n] for n in names if n in self._futures])

    def close(self) -> None:
        """Wait for the work in flight and stop the pool."""
        self._pool.shutdown(wait=True)
