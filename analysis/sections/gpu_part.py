"""The `gpu` section: the GPUs' busy and compute utilisation over the window, summed and per device (from the device
pass, sections/gpu.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from ..common.schema import Part, rows_as
from ..load.trace import Trace
from . import gpu
from .base import TRACE, declare


@dataclass(frozen=True, kw_only=True)
class GpuPart:
    """The `gpu` section: the GPUs' utilisation over the window, summed and per device."""
    utilization: float
    compute_utilization: float | None
    busy_ns: int
    compute_ns: int | None
    devices: tuple[GpuDevice, ...]


@dataclass(frozen=True, kw_only=True)
class GpuDevice:
    """One device's busy and compute time and utilisation over its window."""
    device: int
    busy_ns: int
    compute_ns: int | None
    window_ns: int
    utilization: float
    compute_utilization: float | None
    name: str | None


def part(util: pd.DataFrame, gpus: pd.DataFrame, kernels_recorded: bool) -> Part:
    """The `gpu` section: utilisation per device (named after the export's GPUs) and over all; compute is unknown
    (None) where the capture recorded no kernels."""
    names = dict(zip(gpus["device"], gpus["name"])) if len(gpus) else {}
    util["name"] = util["device"].map(names)
    out = GpuPart(utilization=float(util["utilization"].mean()),
                  compute_utilization=float(util["compute_utilization"].mean()),
                  busy_ns=int(util["busy_ns"].sum()), compute_ns=int(util["compute_ns"].sum()),
                  devices=rows_as(GpuDevice, util))
    if not kernels_recorded:  # no kernels recorded: nothing gives compute
        out = replace(out, compute_utilization=None, compute_ns=None,
                      devices=tuple(replace(d, compute_utilization=None, compute_ns=None) for d in out.devices))
    return Part(out, {"utilization": util})

def gpu_part(trace: Trace, passed: gpu.DevicePass | None, kernels_recorded: bool) -> Part:
    """The `gpu` section (part())."""
    return part(passed.util, trace.device.gpus, kernels_recorded) if passed else Part(None, {})


declare(gpu_part, needs=lambda: (TRACE, gpu.PassedOver.passed, gpu.PassedOver.kernels_recorded), part="gpu",
        json_at=20, tables_at=20)
