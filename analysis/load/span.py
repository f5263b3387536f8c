"""The capture's recorded span: its first and last event (GPU operation or NVTX range), in trace ns."""
from __future__ import annotations


def capture_start(trace) -> int | None:
    """The capture's first recorded event (GPU operation or NVTX range), in trace ns; None without either."""
    frames = _recorded(trace)
    return min(int(df["start_ns"].min()) for df in frames) if frames else None


def capture_end(trace) -> int | None:
    """The capture's last recorded end (GPU operation or NVTX range), in trace ns."""
    frames = _recorded(trace)
    return max(int(df["end_ns"].max()) for df in frames) if frames else None


def _recorded(trace) -> list:
    """The trace's timed tables that hold rows: its kernels (and graph launches), copies, memsets, NVTX ranges."""
    tables = (trace.device.kernel_digest.ops, trace.device.memcpys, trace.device.memsets, trace.host.nvtx)
    return [df for df in tables if len(df)]
