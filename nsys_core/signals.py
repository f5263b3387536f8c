"""The stops (SIGINT, SIGTERM) held back from one thread for a block, for both sides: the output pipeline forking its
workers and the analysis starting its worker processes."""
from __future__ import annotations

import signal
from contextlib import contextmanager

STOPS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stops_blocked():
    """SIGINT and SIGTERM blocked in this thread for the block, the thread's mask as it was after (children forked
    meanwhile inherit the block). Where the platform has no pthread_sigmask, nothing is blocked."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # read only: a stop handled right after a real block
    try:  # here, before the try, would leave the stops blocked for good
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def let_stops_in() -> None:
    """In a child forked inside stops_blocked(), once its own handlers are set: the stops it was sent meanwhile
    arrive now."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
