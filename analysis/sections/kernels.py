"""The `kernels` section: kernel count, time and median, the top kernels by time (named by their demangled names,
with precision and library: sections/kernel_names.py), and how much GPU work ran inside CUDA graphs."""
from __future__ import annotations

from ..load.kernel_digest import KernelDigest
from ..common.schema import Part, rows_as
from . import kernel_names
from ..load.trace import Trace
from . import gpu
from .base import OPTS, TRACE, Options, declare
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class KernelsPart:
    """The `kernels` section: kernel count, time and median, CUDA graphs, the top kernels."""
    count: int
    total_ns: int
    median_ns: float | None
    graphs: KernelGraphs | None
    top: tuple[KernelRow, ...]


@dataclass(frozen=True, kw_only=True)
class KernelRow:
    """One kernel name's time, with its shown name, precision and library."""
    name: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    pct: float
    shown_name: str
    precision: str | None
    library: str | None


@dataclass(frozen=True, kw_only=True)
class KernelGraphs:
    """How much GPU work ran inside CUDA graphs and how it was traced."""
    traced_as: str
    launches: int
    gpu_ns: int
    kernels_inside: int | None
    share_of_kernel_time: float | None


def part(digest: KernelDigest, top: int, full_names, graph_kernels) -> Part:
    """full_names(names) -> {short: demangled}; graph_kernels() -> (kernels, GPU ns, launches) traced inside graphs
    node by node (load.device.DeviceTables' methods: read only when needed)."""
    tk = digest.top(top)
    full = full_names([str(n) for n in tk["name"]]) if len(tk) else {}
    tk["shown_name"] = [kernel_names.shown(str(n), full.get(str(n))) for n in tk["name"]]
    tk["precision"] = [kernel_names.precision(full.get(str(n), str(n))) for n in tk["name"]]
    tk["library"] = [kernel_names.library(full.get(str(n), str(n))) for n in tk["name"]]
    return Part(KernelsPart(count=digest.count - digest.graph_runs, total_ns=digest.total_ns,
                            median_ns=digest.median_ns, graphs=_graphs(digest, graph_kernels), top=rows_as(KernelRow, tk)),
                {"kernels_top": tk})


def _graphs(digest: KernelDigest, graph_kernels) -> KernelGraphs | None:
    """How much GPU work ran inside CUDA graphs and how it was traced: 'graph' (one row a launch, nsys's default:
    the kernels inside are not in the trace) or 'node' (the kernels themselves); None without graphs."""
    if digest.graph_runs:
        names = digest.by_name["name"].astype(str)
        gpu_ns = int(digest.by_name.loc[names.str.match(r"^CUDA graph( \d+)?$").to_numpy(), "total_ns"].sum())
        launches, traced, inside = digest.graph_runs, "graph", None
    else:
        inside, gpu_ns, launches = graph_kernels()
        traced = "node"
        if not inside:
            return None
    return KernelGraphs(traced_as=traced, launches=int(launches), gpu_ns=gpu_ns, kernels_inside=inside,
                        share_of_kernel_time=round(gpu_ns / digest.total_ns, 4) if digest.total_ns else None)


def kernels_part(digest: KernelDigest, opts: Options, trace: Trace) -> Part:
    """The `kernels` section (part())."""
    return part(digest, opts.top, trace.device.full_kernel_names, trace.device.graph_kernels)


declare(kernels_part, needs=lambda: (gpu.PassedOver.digest, OPTS, TRACE), part="kernels", json_at=70, tables_at=50)
