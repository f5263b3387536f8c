"""The workloads' stop handling: SIGTERM stops a run as Ctrl-C does (the workers' lifetime is fixes.lifetime's)."""
from __future__ import annotations

from ..fixes.lifetime import StopSignals, die_with_parent, quiet_resource_sharer

__all__ = ["Terminated", "die_with_parent", "quiet_resource_sharer", "raise_if_stopped", "sigterm_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwound like Ctrl-C (workers stopped, shared memory freed), reported as termination."""


# the stop signals' exceptions, kept: one raised inside a destructor is lost (fixes.lifetime.StopSignals)
_STOPS = StopSignals(on_term=lambda signum: Terminated(), always=True)


def sigterm_as_interrupt() -> None:
    """SIGTERM (kill, torchrun stopping its ranks, a batch system's time limit) raises Terminated in the main thread,
    so the run stops through the same cleanup as Ctrl-C. Children forked later inherit it. Both signals' exceptions
    are also kept for raise_if_stopped()."""
    _STOPS.install()
    quiet_resource_sharer()


def raise_if_stopped() -> None:
    """Raise again a stop signal's exception that was lost: Python prints and drops an exception raised inside a
    destructor (__del__, a weakref finalizer), and a signal can land there (a tensor or a shared buffer freed), so a
    Ctrl-C could let the run go on to the end (seen once in a test run: exit 0 after SIGINT)."""
    _STOPS.raise_if_stopped()
