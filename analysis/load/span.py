"""The capture's recorded span: its first and last event (GPU operation or NVTX range), in trace ns; and the origin
that times "from the capture's start" (`--window 1.5s:`, the header's ms) count from."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

SESSION_START = "session start"
FIRST_EVENT = "first GPU operation or NVTX range"


def origin(trace, first_event: Callable[[], int | None] | None = None) -> tuple[int | None, str]:
    """(trace ns, name) of the capture's start, the one origin of every time "from the capture's start": the session
    start where the export records one (TARGET_INFO_SESSION_START_TIME: the UTC instant of trace time 0, from which
    nsys counts every timestamp; the set-up before the first GPU operation, 1.4 s and more, then counts), else its
    first GPU operation or NVTX range (capture_start: exports of nsys 2020, which record no session start); None
    without either. first_event: that first event where the caller has read it already (the window section reads it
    before the device pass may write over the kernel times); capture_start(trace) without it."""
    if trace.session_start_utc_ns is not None:
        return 0, SESSION_START
    return (first_event or (lambda: capture_start(trace)))(), FIRST_EVENT


def capture_start(trace) -> int | None:
    """The capture's first recorded event (GPU operation or NVTX range), in trace ns; None without either."""
    frames = _recorded(trace)
    return min(int(df["start_ns"].min()) for df in frames) if frames else None


def capture_end(trace) -> int | None:
    """The capture's last recorded end (GPU operation or NVTX range), in trace ns."""
    frames = _recorded(trace)
    return max(int(df["end_ns"].max()) for df in frames) if frames else None


def _recorded(trace) -> list:
    """The trace's timed tables that hold rows: its kernels (and graph launches), copies, memsets, NVTX ranges. The
    kernels from their digest where it is read; else (the steady state's analysis reads only its own kernels) from
    the kernel tables' first and last rows, not a second pass over them."""
    kernels = trace.device.kernel_digest.ops if "kernel_digest" in vars(trace.device) else _kernel_ends(trace)
    tables = (kernels, trace.device.memcpys, trace.device.memsets, trace.host.nvtx)
    return [df for df in tables if len(df)]


def _kernel_ends(trace) -> pd.DataFrame:
    spans = _row_ends(trace)
    return pd.DataFrame({"start_ns": [min(s for s, _ in spans)] if spans else [],
                         "end_ns": [max(e for _, e in spans)] if spans else []}, dtype="int64")


def _row_ends(trace) -> list[tuple[int, int]]:
    """(first row's start, the last rows' latest end) of the kernel and graph tables (nsys writes them in start
    order)."""
    spans = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if trace.has(table):
            first = trace.one_row(f'SELECT start FROM {table} ORDER BY rowid LIMIT 1')
            last = trace.one_row(f'SELECT MAX("end") FROM (SELECT "end" FROM {table} ORDER BY rowid DESC LIMIT 4096)')
            if first and first[0] is not None and last and last[0] is not None:
                spans.append((int(first[0]), int(last[0])))
    return spans


def gpu_span_estimate(trace) -> tuple[int, int] | None:
    """About the first to the last GPU operation, from the first and last rows of the kernel and graph tables and the
    copies (nsys writes GPU rows in start order): cheap on any capture, for judging the set-up's share before the
    kernels are read; None without GPU rows."""
    spans = _row_ends(trace)
    copies = trace.device.memcpys
    if len(copies):
        spans.append((int(copies["start_ns"].min()), int(copies["end_ns"].max())))
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None
