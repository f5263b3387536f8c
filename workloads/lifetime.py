"""The workloads' stop handling: SIGTERM stops a run as Ctrl-C does (the workers' lifetime is fixes.lifetime's)."""
from __future__ import annotations

import signal

from nsys_transfer.fixes.lifetime import die_with_parent, quiet_children, quiet_resource_sharer

__all__ = ["Terminated", "die_with_parent", "quiet_resource_sharer", "raise_if_stopped", "sigterm_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwound like Ctrl-C (workers stopped, shared memory freed), reported as termination."""


_STOPS: list[BaseException] = []  # the stop signals' exceptions, kept: one raised inside a destructor is lost


def sigterm_as_interrupt() -> None:
    """SIGTERM (kill, torchrun stopping its ranks, a batch system's time limit) raises Terminated in the main thread,
    so the run stops through the same cleanup as Ctrl-C. Children forked later inherit it. Both signals' exceptions
    are also kept for raise_if_stopped()."""
    def stop(signum, frame):
        if signum == signal.SIGTERM:
            quiet_children()  # torch's DataLoader would report its workers' deaths by the same signal
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
