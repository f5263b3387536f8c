"""The stops (SIGINT, SIGTERM), for both sides: held back from one thread for a block (the output pipeline forking
its workers, the analysis starting its worker processes), and SIGTERM made an exception while a block must clean up
after itself (a worker pool to end, a half-written file to delete)."""
from __future__ import annotations

import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

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


_OWNER = os.getpid()  # the process that installed terminated(); a child forked from it inherits the handler


def terminated(signum, frame):
    """SIGTERM's handler while sigterm_raises() holds: SystemExit(143), so that `finally` blocks run."""
    if os.getpid() != _OWNER:  # a forked child signalled before it set its own handler: end it quietly
        os._exit(128 + signum)  # (SystemExit there would print from inside threading's after-fork hook)
    raise SystemExit(128 + signum)


def sigterm_raises() -> dict:
    """SIGTERM raises SystemExit(143) in the main thread from now on, where it has its default; {signal: the handler
    it had}, for restore(). Elsewhere (another thread, a handler of the program's own) nothing changes."""
    global _OWNER
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return {}
    _OWNER = os.getpid()
    return {signal.SIGTERM: signal.signal(signal.SIGTERM, terminated)}


_DOOMED: set[str] = set()  # files a SIGTERM deletes on the way out of a worker process (exit_on_sigterm)
_EXIT_OWNER = 0  # the process that installed exit_on_sigterm(); a child forked from it leaves its files alone


def exit_on_sigterm() -> None:
    """In a worker process (a pool's, which would send SystemExit back as an item's result and go on): SIGTERM
    deletes the files of scratch_file() blocks under way and ends the process at once, with 143."""
    global _EXIT_OWNER
    _EXIT_OWNER = os.getpid()
    signal.signal(signal.SIGTERM, _exit_now)


def _exit_now(signum, frame):
    if os.getpid() == _EXIT_OWNER:
        for name in list(_DOOMED):
            try:
                os.unlink(name)
            except OSError:
                pass
    os._exit(128 + signum)


@contextmanager
def scratch_file(folder, prefix: str, suffix: str):
    """A new empty file in folder (mode 0600), deleted when the block ends however it ends: an exception, Ctrl-C,
    sigterm_raising()'s SIGTERM, or exit_on_sigterm()'s in a worker. Made with the stops blocked, so that none lands
    between its creation and its being known."""
    with stops_blocked():
        fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
        os.close(fd)
        _DOOMED.add(name)
    try:
        yield Path(name)
    finally:
        _DOOMED.discard(name)
        Path(name).unlink(missing_ok=True)


def restore(previous: dict) -> None:
    """The handlers sigterm_raises() replaced, back."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextmanager
def sigterm_raising():
    """sigterm_raises() for the block."""
    previous = sigterm_raises()
    try:
        yield
    finally:
        restore(previous)
