"""Process lifetime: worker processes die with the process that started them, and SIGTERM stops a run as Ctrl-C does.

Daemonic multiprocessing children are only reaped by the parent's normal exit; a parent killed by SIGKILL (or by
SIGTERM's default action) leaves them running for ever. Linux's parent-death signal closes that hole.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

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


def sigterm_as_interrupt() -> None:
    """SIGTERM (kill, torchrun stopping its ranks, a batch system's time limit) raises Terminated in the main thread,
    so the run stops through the same cleanup as Ctrl-C. Children forked later inherit it. Either signal first
    quiets the background threads the stopping run leaves without a peer (quiet_threads_while_stopping)."""
    def on_term(signum, frame):
        quiet_threads_while_stopping()
        raise Terminated()

    def on_int(signum, frame):
        quiet_threads_while_stopping()
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_int)


def quiet_threads_while_stopping() -> None:
    """While the run stops, a background thread whose peer process is gone (multiprocessing's resource sharer handing
    a file descriptor to a worker just killed: it reports through sys.excepthook) prints no traceback; every other
    error still does."""
    peer_gone = (ConnectionError, EOFError)
    thread_hook, sys_hook = threading.excepthook, sys.excepthook

    def on_thread(args):
        if not issubclass(args.exc_type, peer_gone):
            thread_hook(args)

    def on_error(exc_type, value, tb):
        if not issubclass(exc_type, peer_gone):
            sys_hook(exc_type, value, tb)
    threading.excepthook, sys.excepthook = on_thread, on_error
