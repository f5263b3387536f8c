"""Shared-memory segments a process leaves behind when it dies at the wrong instant. torch (`torch_<pid>_<n>_<k>`) and
multiprocessing's heap (`pym-<pid>-<random>`) create each segment in /dev/shm under a name that holds the creator's
pid, map it, and unlink the name at once; a process killed between the two (SIGKILL, SIGTERM's default action, a
parent-death signal) leaves the name there until the machine restarts, holding its memory. On a busy machine that
instant is wide enough to be hit (issue 57: 1 run in 25 of the fault checks beside two other jobs). Whoever outlives
the process removes what its pid names: the pool for a worker it reaped, a worker for the parent that died."""
from __future__ import annotations

import os

SHM = "/dev/shm"


def prefixes(pid: int) -> tuple[str, ...]:
    """The names a process's transient segments start with (torch's file-descriptor sharing, multiprocessing's heap)."""
    return f"torch_{pid}_", f"pym-{pid}-"


def sweep(pids) -> int:
    """Remove the /dev/shm names of these processes (which must be gone: a live one may be between creating and
    unlinking one); how many were removed. Never raises: it runs on the way out of a stop."""
    starts = tuple(p for pid in pids if pid for p in prefixes(int(pid)))
    if not starts:
        return 0
    try:
        names = os.listdir(SHM)
    except OSError:  # no /dev/shm (not Linux): nothing is left there either
        return 0
    removed = 0
    for name in names:
        if name.startswith(starts):
            try:
                os.unlink(os.path.join(SHM, name))
                removed += 1
            except OSError:  # another's, or gone meanwhile
                pass
    return removed
