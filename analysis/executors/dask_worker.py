"""The worker preload of the local Dask cluster (parallel.local_cluster_options): distributed imports this file by its
path, as a module of its own, in each worker process when the worker starts. It imports nothing of the toolkit, so the
worker runs dask_setup and joins the cluster before it imports pandas and the analysis (for its first task, not for
its start): the cluster's start is shorter by that import (about a second of three on a busy 2-core machine), and so
is a stop that has to wait for it (parallel's _stops_kept). The import holds the worker's event loop in its first task
instead, where a stop kills the worker after parallel.STOP_S, as it does a worker that does not stop in time."""
from __future__ import annotations

import functools
import logging
import signal

from distributed.core import Status

STOPS = (signal.SIGINT, signal.SIGTERM)


def dask_setup(worker) -> None:
    """The worker ignores Ctrl-C and SIGTERM, which reach it too when sent to the process group, and leaves its stop
    to its nanny. The two signals were blocked since the worker was spawned (parallel._stops_held), so that one sent
    meanwhile waited: ignored now, it is discarded, and they are unblocked. Its log keeps to what the command needs
    (_worth_logging)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    logging.getLogger("distributed.worker.state_machine").setLevel(logging.ERROR)  # a task cancelled by a stop
    logging.getLogger("distributed.worker").addFilter(functools.partial(_worth_logging, worker))


def _worth_logging(worker, record: logging.LogRecord) -> bool:
    """A local worker's log filter. Its "Compute Failed" block (the task's exception and traceback) is not logged: the
    client raises that exception here and the command says it in one line, as --jobs does. Nor, once the worker
    closes (the command's end, or a stop), what the close itself cuts off: a heartbeat to the scheduler in flight then
    logs an ERROR and its traceback. The worker's other errors still are."""
    if str(record.msg).startswith("Compute Failed"):
        return False
    return record.levelno >= logging.CRITICAL or worker.status not in CLOSING


CLOSING = {Status.closing, Status.closed}
