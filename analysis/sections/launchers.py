"""Which thread launched the work on each GPU: from the runtime calls behind the largest idle gaps' next operations,
else the thread that issued the most kernel launches. The idle attribution and the gap context read what it was
doing."""
from __future__ import annotations

from concurrent.futures import Future

import pandas as pd

from ..load.trace import Trace
from . import copies, gpu
from .base import TRACE, declare


def launch_threads(passed, launch: pd.DataFrame | None, launches_by_thread) -> dict:
    """{(pid, correlation id): launching thread} of the gaps' next operations (launch: their runtime calls), and the
    launching threads per device: those of the gaps, else the thread that issued the most kernel launches
    (launches_by_thread(): the kernel launches per thread, read only then)."""
    by_pid = passed is not None and len(passed.gaps) > 0 and bool((passed.gaps["next_pid"] >= 0).any())
    tid_of = ({(int(p) if by_pid else -1, int(c)): t for p, c, t in
               zip(launch["pid"], launch["correlation_id"], launch["global_tid"])}
              if launch is not None and len(launch) else {})
    per_device: dict[int, set] = {}
    if passed is not None and len(passed.gaps):
        g = passed.gaps
        for dev, p, c in zip(g["device"], g["next_pid"], g["next_correlation_id"]):
            t = tid_of.get((int(p) if by_pid else -1, int(c)))
            if t is not None:
                per_device.setdefault(int(dev), set()).add(int(t))
    devices = [int(d) for d in passed.util["device"]] if passed is not None else []
    # the thread with the most launches, for devices whose gaps name none (a grouped runtime scan: only then)
    needed = not tid_of or any(not per_device.get(d) for d in devices)
    fallback = _busiest_launcher(launches_by_thread()) if needed else set()
    return {"by_gap": tid_of, "by_pid": by_pid, "devices": {int(d): per_device.get(int(d)) or fallback for d in devices},
            "all": set(tid_of.values()) or fallback}


def _busiest_launcher(api_by_thread: pd.DataFrame) -> set:
    """The thread that issued the most kernel launches (empty without CUDA API rows)."""
    if api_by_thread.empty:
        return set()
    busiest = api_by_thread.groupby("global_tid")["count"].sum().sort_values(ascending=False)
    return {int(busiest.index[0])} if len(busiest) else set()


def _launching(trace: Trace, passed: gpu.DevicePass | None, gaps_table: pd.DataFrame) -> Future[dict]:
    """launch_threads() on a background thread (a runtime scan, beside the copies)."""
    return trace.background.submit(_launchers, trace, passed, gaps_table)


declare(_launching, needs=lambda: (TRACE, gpu.PassedOver.passed, gpu.gaps_table), background=True)


def _launchers(trace, passed, gaps: pd.DataFrame) -> dict:
    """The launching threads, from the runtime calls behind the largest gaps' next operations."""
    launch = trace.calls.launch_threads(gaps.nlargest(900, "duration_ns")["next_correlation_id"]) if len(gaps) else None
    return launch_threads(passed, launch, lambda: trace.calls.api_by_thread)


def tids(launching: Future[dict]) -> dict:
    """The launching threads, once the copies are joined (the scan ran beside them)."""
    return launching.result()


declare(tids, needs=(_launching,), after=lambda: (copies.memcpy_part,))


def launch_stats(trace: Trace, tids: dict) -> Future[tuple[int, int]]:
    """The launching threads' kernel launch calls' cost (calls, total_ns), read in the background."""
    return trace.background.submit(trace.calls.launch_stats, tids["all"])


declare(launch_stats, needs=(TRACE, tids), background=True)
