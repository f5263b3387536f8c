"""Process lifetime: workers die with the process that started them, stay quiet when a stop reaches their whole
process group, and SIGTERM unwinds the main process through its cleanup instead of killing it where it stands.

Daemonic multiprocessing children are only reaped by the parent's normal exit; a parent killed by SIGKILL (or by
SIGTERM's default action) leaves them running for ever. Linux's parent-death signal closes that hole.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading

from . import segments
from .errors import TerminatedBySignal
from ..nsys_core.signals import let_stops_in, stops_blocked

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


def die_with_parent(parent_pid: int, name: str | None = None) -> None:
    """In a freshly started child: SIGTERM ends it (at its next Python instruction), SIGTERM too when the parent dies,
    exit now if the parent already has (the fork raced it), and `name` as the process name (`ps`, /proc/PID/comm) to
    tell workers apart.

    PR_SET_PDEATHSIG fires when the thread that forked this process exits, so workers must be started from a thread
    that lives as long as they do (the main thread)."""
    # a worker stopped with SIGTERM (close(), the DataLoader's shutdown, the whole group's stop, its parent's death)
    # just ends: the main process's handler, inherited through fork, would unwind it with a traceback from any of its
    # threads. It ends from a Python handler, not the signal's default action: that runs between two Python
    # instructions, never inside the C call that creates a shared-memory segment and unlinks its name, so no death
    # leaves the name behind (fixes/segments.py); a worker stuck in one C call is killed by its pool after 2 s
    signal.signal(signal.SIGTERM, functools.partial(_end_worker, parent_pid))
    quiet_resource_sharer()
    prctl = _prctl()
    if prctl is None:  # not Linux: the parent's own cleanup is all there is
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if name:
        prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _end_worker(parent_pid: int, signum, frame) -> None:
    """A worker's SIGTERM: where its parent has died (the parent-death signal, a SIGKILL of the main process), the
    shared-memory names the parent may have been creating when it died are removed first (nobody else outlives it);
    then the worker ends by the signal itself, as SIGTERM's default action would (its exit status says SIGTERM)."""
    if os.getppid() != parent_pid:
        segments.sweep([parent_pid])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


class _Held:
    """Stops that StopSignals took while a worker was being forked and recorded: raised after (raise_held)."""
    depth = 0
    stops: list = []


@contextlib.contextmanager
def stops_held():
    """SIGINT and SIGTERM held back from this thread while it forks a worker and records it: a stop landing in the
    child before worker_started() would run the parent's handler there and print the worker's traceback, and one
    raised in the parent between the fork and the record would leave a worker nobody stops. The child lets them in
    at worker_started(); the parent's StopSignals keeps a stop taken meanwhile (on another thread's delivery) for
    raise_held() after the block."""
    mine = int(threading.current_thread() is threading.main_thread())  # handlers run there: only its forks defer
    _Held.depth += mine
    try:
        with stops_blocked():
            yield
    finally:  # also when a handler other than StopSignals' raises as the stops are let in
        _Held.depth -= mine


def raise_held() -> None:
    """Raise the first stop taken during stops_held(), once its block has ended."""
    if _Held.depth == 0 and _Held.stops:
        stop = _Held.stops[0]
        _Held.stops.clear()
        raise stop


def worker_started(parent_pid: int, name: str) -> None:
    """die_with_parent, and Ctrl-C ignored: it reaches the whole foreground group, and the main process stops its
    workers itself (a KeyboardInterrupt here would print a worker's traceback). Then the stops the fork held back
    (stops_held) are let in: SIGTERM ends the worker, SIGINT is ignored."""
    die_with_parent(parent_pid, name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _Held.depth = 0  # forked inside the parent's stops_held()
    let_stops_in()


def _prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def quiet_children() -> None:
    """Stop torch's DataLoader SIGCHLD handler from raising 'DataLoader worker (pid N) is killed by signal:
    Terminated' once a stop is under way: the stop that reached the whole group killed those workers too, and the
    run reports the stop itself."""
    if threading.current_thread() is threading.main_thread():
        # a Python no-op, not SIG_DFL: a SIGCHLD already pending would then raise "Signal 17 ignored due to race
        # condition" from the interpreter
        signal.signal(signal.SIGCHLD, _ignore)


def _ignore(signum, frame) -> None:
    pass


class StopSignals:
    """While installed, SIGTERM raises TerminatedBySignal and SIGINT KeyboardInterrupt in the main thread, so `with`
    blocks and `finally` clauses run (workers stopped, pinned memory unregistered); the process then exits with 143
    as SIGTERM's default would. Each stop is also kept: Python drops an exception raised inside a destructor (a tensor
    or a queue freed), and a Ctrl-C landing there would let the loop run on, so raise_if_stopped() raises it again.
    A handler is installed only where the signal still has its default (a program's own is left alone), unless
    `always` (a program that owns its signals: the workloads); `on_term` makes SIGTERM's exception."""

    def __init__(self, on_term=lambda signum: TerminatedBySignal(128 + signum), always: bool = False):
        self.previous: dict = {}
        self.stops: list[BaseException] = []
        self.on_term, self.always = on_term, always

    def install(self) -> "StopSignals":
        """Take SIGTERM and SIGINT over where they have their defaults (or another pipeline's, which it then hands
        back to) and this is the main thread."""
        if threading.current_thread() is not threading.main_thread() or self in _INSTALLED:
            return self  # installed twice, its handler would be what it hands back to: a stop would never end
        for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
            current = signal.getsignal(sig)
            if self.always or current in (default, None) or _yields(current):
                self.previous[sig] = signal.signal(sig, self._raise)
        if self.previous:
            _INSTALLED.append(self)
        return self

    def _raise(self, signum, frame):
        quiet_children()  # torch's DataLoader would report its workers' deaths by the same signal
        self.stops.append(self._stop(signum))
        below = self.previous.get(signum)
        while _yields(below):  # the pipelines still open beneath this one keep it too (raise_if_stopped)
            below.__self__.stops.append(below.__self__._stop(signum))
            below = below.__self__.previous.get(signum)
        if _Held.depth:  # a worker being forked: raised once it is recorded (raise_held)
            _Held.stops.append(self.stops[-1])
            return
        raise self.stops[-1]

    def _stop(self, signum) -> BaseException:
        return self.on_term(signum) if signum == signal.SIGTERM else KeyboardInterrupt()

    def raise_if_stopped(self) -> None:
        """Raise again a stop whose exception was lost."""
        if self.stops:
            raise self.stops[0]

    def restore(self) -> None:
        """What each handler replaced, back: where another pipeline's handler was installed over this one since, the
        handler it replaced becomes what that one restores; where the program installed its own, it stays."""
        for sig, previous in self.previous.items():
            if signal.getsignal(sig) == self._raise:
                signal.signal(sig, previous)
            for other in _INSTALLED:
                if other.previous.get(sig) == self._raise:
                    other.previous[sig] = previous
        self.previous = {}
        if self in _INSTALLED:
            _INSTALLED.remove(self)


_INSTALLED: list[StopSignals] = []  # those whose handlers are in place, to hand what they replaced to each other


def _yields(handler) -> bool:
    """Whether a handler is another StopSignals' that a new one may take over (not a program's own, `always`)."""
    owner = getattr(handler, "__self__", None)
    return isinstance(owner, StopSignals) and not owner.always and owner in _INSTALLED


def each_then_raise(*steps) -> None:
    """Run every step, even after one raised (a sticky CUDA error, a second Ctrl-C), then raise the first error."""
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as e:
            first = first or e
    if first is not None:
        raise first


def quiet_resource_sharer() -> None:
    """multiprocessing's resource sharer (the thread that hands file descriptors to other processes) prints a
    traceback through sys.excepthook when the process at the other end dies mid-handshake: a worker or the main
    process being stopped. That death is reported by the run itself, so the sharer's connection error is not printed;
    every other error is."""
    if getattr(sys.excepthook, "quiet_resource_sharer", False):
        return
    original = sys.excepthook

    def hook(exc_type, value, tb):
        if issubclass(exc_type, (ConnectionError, EOFError)) and _raised_in_resource_sharer(tb):
            return
        original(exc_type, value, tb)
    hook.quiet_resource_sharer = True
    sys.excepthook = hook


def _raised_in_resource_sharer(tb) -> bool:
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "resource_sharer.py")):
            return True
        tb = tb.tb_next
    return False
