"""The fix a line's role calls for (rules/code_advice.py gives its advice), as the replay makes it: where a finding
has its line, what that line's work is for says what the fix changes, as surely as it says the advice.

    input, output, host compute   the work at the line moves to worker processes (or onto the GPU: up to all of it)
    disk output                   the writes move to a pool of threads
    weights                       the copies at the line are gone (the model stays on the GPU), with their host work
    per-element read              the CUDA calls of the loop's per-element reads are gone (one copy a batch instead)
    accumulation                  the copying of the grown array is gone (its first visits' cost stays)
    timing sync                   the syncs at the line are gone
    allocation churn              the allocations and frees at the line are gone
    model                         the launches replayed as a CUDA graph (launch-bound); several threads: no figure
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..replay import fixes, work
from ..replay.fixes import Fix, NoFigure
from .base import Context, Finding
from ..sections import roles
from ..sections.code_lines import CodeSite
from ..sections.timeline import Timeline

MOVED = (roles.INPUT, roles.OUTPUT, roles.COMPUTE)


def role_fix(f: Finding, ctx: Context) -> Fix | NoFigure | None:
    """The fix of the finding's line's role; None where the rule's own fix stands (no line, or a role with none)."""
    site, t = f.line, ctx.timeline
    if site is None or t is None or t.samples is None:
        return None
    if site.role in MOVED:
        return _moved(t, site)
    return {roles.DISK: _disk, roles.WEIGHTS: _weights, roles.PER_ELEMENT: _per_element,
            roles.ACCUMULATION: _accumulation, roles.TIMING_SYNC: _timing, roles.CACHE_CHURN: _churn,
            roles.MODEL: lambda t, s: _model(t, s, ctx.min_gap_ns)}.get(site.role, lambda t, s: None)(t, site)


def _moved(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    """The work of the line's role in worker processes (DataLoader workers for the input, output workers for the
    output): the thread's own work next to the batch's copy of that direction (before the input's copy: its
    preparation; after the output's: its handling), else the work under the loop's statement that holds the line.
    The output's hand-off through a queue copies it once more (low end); DataLoader workers hand their batches over in
    shared memory. The other route the advice names, the work on the GPU: that work gone, and the output's big copies
    with it (only the small result comes back)."""
    direction = "HtoD" if site.role == roles.INPUT else "DtoH"
    w = work.beside_copies(t, direction) if site.role != roles.COMPUTE else np.zeros(t.gap_start.size, np.int64)
    if not w.any():
        w = work.sampled_work(t, work.at_statement(t, site.place))
    if not w.any():
        return NoFigure(f"the replayed iterations hold no samples at {site.place}")
    data = float(t.op_bytes[work.copies(t, direction)].sum())
    where = "DataLoader worker processes" if site.role == roles.INPUT else "worker processes"
    fix = fixes.move_off_thread(t, w, where, data_bytes=data, handoff=site.role == roles.OUTPUT)
    if site.role == roles.OUTPUT:
        big = work.copies(t, "DtoH") & (t.op_bytes >= work.SIDE_BYTES)
        fix = replace(fix, on_gpu=replace(fix.on_gpu, dropped=work.calls_of(t, big)))
    return fix


def _disk(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    w = work.sampled_work(t, work.at_statement(t, site.place))
    if not w.any():
        return NoFigure(f"the replayed iterations hold no samples at {site.place}")
    return fixes.move_off_thread(t, w, "writer threads", processes=False)


def _weights(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    at = work.of_role(t, (roles.WEIGHTS,))
    calls = work.sampled_calls(t, at)
    if not calls.any():
        return NoFigure("the replayed iterations hold no weight copies")
    return fixes.drop(calls, "the weights stay on the GPU: their copies and the host work moving them are gone"
                      ).combine(fixes.remove(work.sampled_work(t, at)))


def _per_element(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    calls = work.sampled_calls(t, work.of_role(t, (roles.PER_ELEMENT,)))
    if not calls.any():
        return NoFigure("the replayed iterations hold no per-element reads")
    return fixes.drop(calls, "the per-element reads' CUDA calls are gone (one copy a batch); the Python around them "
                             "stays")


def _accumulation(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    at = work.at_line(t, site.place)
    w = work.sampled_work(t, at)
    if not w.any():
        return NoFigure(f"the replayed iterations hold no samples at {site.place}")
    if site.growth and site.growth[1] > 0:  # the first visits' cost stays: only the growth is copying
        keep = min(site.growth[0] / ((site.growth[0] + site.growth[1]) / 2), 1.0)
        return fixes.remove(w * (1 - keep), f"the array is built once: its growth ({site.growth[0]:.1f} ms a visit "
                                            f"at the start, {site.growth[1]:.1f} at the end) is gone")
    return fixes.remove(w, "the array is built once: the copying at the line goes (half of it at the low end)", 0.5)


def _timing(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    calls = work.sampled_calls(t, work.at_line(t, site.place)) & (t.call_kind == "sync")
    if not calls.any():
        return NoFigure(f"the replayed iterations hold no syncs at {site.place}")
    return fixes.drop(calls, "the timing syncs are gone (CUDA events read after the loop)")


def _churn(t: Timeline, site: CodeSite) -> Fix | NoFigure:
    at = work.at_line(t, site.place)
    calls = work.sampled_calls(t, at) & (t.call_kind == "other")
    return fixes.drop(calls, "the allocations and frees at the line are gone").combine(
        fixes.remove(work.sampled_work(t, at)))


def _model(t: Timeline, site: CodeSite, min_gap_ns: int) -> Fix | NoFigure:
    if site.threads > 1:
        return NoFigure("batching the requests changes the GPU's own work, which the trace cannot replay")
    return graph_fix(t, min_gap_ns)


def graph_fix(t: Timeline, min_gap_ns: int) -> Fix:
    """The launches replayed as a CUDA graph; at the high end the host work between them (gaps shorter than
    min_gap_ns: the Python that issues the kernels) goes too."""
    return fixes.graph(t, t.call_kind == "launch", np.where(t.gap_ns < min_gap_ns, t.cpu_ns, 0))
