"""Process lifetime: worker processes die with the process that started them, and SIGTERM stops a run as Ctrl-C does.

Daemonic multiprocessing children are only reaped by the parent's normal exit; a parent killed by SIGKILL (or by
SIGTERM's default action) leaves them running for ever. Linux's parent-death signal closes that hole.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwound like Ctrl-C (workers stopped, shared memory freed), reported as termination."""


def die_with_parent(parent_pid: int, name: str | None = None) -> None:
    """In a freshly started child: SIGTERM's default action back, SIGKILL when the parent dies, exit now if the parent
    already has (the fork raced it), and `name` as the process name (`ps`, /proc/PID/comm) to tell workers apart.

    PR_SET_PDEATHSIG fires when the thread that forked this process exits, so workers must be started from the
    main thread (stage.setup() and the DataLoader's first iteration run there)."""
    # a worker stopped with SIGTERM (close(), the DataLoader's shutdown) just ends: the main process's
    # Terminated handler, inherited through fork, would unwind it with a traceback from any of its threads
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    quiet_resource_sharer()
    prctl = _prctl()
    if prctl is None:  # not Linux: the parent's own cleanup is all there is
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if name:
        prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_STOPS: list[BaseException] = []  # the stop signals' exceptions, kept: one raised inside a destructor is lost


def sigterm_as_interrupt() -> None:
    """SIGTERM (kill, torchrun stopping its ranks, a batch system's time limit) raises Terminated in the main thread,
    so the run stops through the same cleanup as Ctrl-C. Children forked later inherit it. Both signals' exceptions
    are also kept for raise_if_stopped()."""
    def stop(signum, frame):
        _STOPS.append(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())
        raise _STOPS[-1]
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    quiet_resource_sharer()


def raise_if_stopped() -> None:
    """Raise again a stop signal's exception that was lost: Python prints and drops an exception raised inside a
    destructor (__del__, a weakref finalizer), and a signal can land there (a tensor or a shared buffer freed), so a
    Ctrl-C could let the run go on to the end (seen once in a test run: exit 0 after SIGINT)."""
    if _STOPS:
        raise _STOPS[0]


def quiet_resource_sharer() -> None:
    """multiprocessing's resource sharer (the thread that hands file descriptors to other processes) prints a
    traceback through sys.excepthook when the process at the other end dies mid-handshake: a worker or the main
    process being stopped. That death is reported by the run itself (WorkerDied, Terminated), so the sharer's
    connection error is not printed; every other error is."""
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
