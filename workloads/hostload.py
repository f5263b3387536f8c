"""How busy the host's CPUs were during a run: the CPUs this process may use (its affinity), from /proc/stat.

The ranks of a multi-GPU job share these cores with their loader and output workers; when they are saturated,
adding GPUs stops adding throughput however fast each GPU's own pipeline is.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

# /proc/stat per-CPU fields: user nice system idle iowait irq softirq steal guest guest_nice (guest time is already
# inside user/nice, so it is left out of the total)
_IDLE_FIELDS = (3, 4)


@dataclass(frozen=True)
class CpuTimes:
    """Busy and total CPU time (jiffies) of the CPUs this process may use."""
    busy: int        # jiffies, summed over the CPUs
    total: int
    cpus: int


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity), else all of them."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def read(cpus: set[int] | None = None, stat: str = "/proc/stat") -> CpuTimes | None:
    """Busy and total jiffies of the given CPUs (default: this process's affinity); None where /proc/stat is absent."""
    cpus = allowed_cpus() if cpus is None else cpus
    busy = total = n = 0
    try:
        with open(stat) as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                name, *vals = line.split()
                if int(name[3:]) not in cpus:
                    continue
                v = [int(x) for x in vals[:8]]
                idle = sum(v[i] for i in _IDLE_FIELDS)
                busy += sum(v) - idle
                total += sum(v)
                n += 1
    except OSError:
        return None
    return CpuTimes(busy, total, n) if n else None


def busy_fraction(before: CpuTimes | None, after: CpuTimes | None) -> dict | None:
    """{cpus, busy (share of their time), busy_cores} between two readings; None without readings."""
    if before is None or after is None or after.total <= before.total:
        return None
    frac = (after.busy - before.busy) / (after.total - before.total)
    return {"cpus": after.cpus, "busy": round(frac, 4), "busy_cores": round(frac * after.cpus, 2)}
