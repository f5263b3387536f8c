"""The launching thread's own work holding the GPU back: CPU work in the long idle gaps (gpu-idle-cpu-bound,
named by its NVTX range, the PyTorch op it ran in, or the CPU samples of the thread) and launches too many and too
short to keep it busy (launch-bound). The idle rules' base and the other causes are gpu_idle.py's."""
from __future__ import annotations

import re

import pandas as pd

from ..common.idle_causes import CPU, CPU_RANGE, LAUNCH
from ..sections.program import is_operator_range
from .advice import (LIBRARY_RANGE_FIXES, OPERATOR_FIXES, OUTPUT_WORK, RANGE_FIXES,
                     WORK_FIXES)
from ..sections.cpu_work import PROFILER
from .base import Context, Finding, idle_figures, ms, us
from .facts import CpuSamples, SampledFunction
from .gpu_idle import IdleRule
from .role_fixes import graph_fix
from ..replay import fixes, work
from ..replay.fixes import Fix, NoFigure


class GpuIdleCpuBound(IdleRule):
    """Long GPU idle gaps while the launching thread was busy on the CPU: inside the deepest user NVTX range (one
    finding per range), or outside any range."""
    causes = (CPU_RANGE, CPU)
    fires_when = ("idle causes `cpu-range` (one finding per range family) and `cpu` (subject null), each >= "
                  "{rule.min_share:.1%} of the window")
    suggests = ("move that work off the launching thread or queue GPU work before it; toolkit ranges: `process "
                "output` (multiproc), `copy to CPU`/`queue output` (bufpool), `get batch` (baseline); unlabelled: add"
                " NVTX ranges or CPU sampling")
    min_share = 0.005  # of the window: below this a range is noise

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """One finding per range family that holds at least min_share of the window, and one for the time outside
        ranges."""
        out, win = [], ctx.gpu_time_ns()
        if not win:
            return []
        for subject, g in rows.groupby(rows["subject"].fillna(""), sort=False):
            ns = int(g["idle_ns"].sum())
            if ns < self.min_share * win:
                continue
            if subject and is_operator_range(subject):
                ev = (f"the GPU sat idle {ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{ms(ctx.min_gap_ns)} while the launching thread was inside the PyTorch op "
                      f"'{subject}' (outside any range of the program's own)")
                out.append(ctx.finding(self.id, ns, subject, ev, OPERATOR_FIXES.get(subject, (
                    f"the op '{subject}' keeps the CPU busy while the GPU waits: look for host-side work in it "
                    "(CPU tensors, data-dependent shapes) or move it off the step's path"))))
            elif subject:
                sampled = sampled_owner(ctx, in_ranges=True) if not any(f.subject for f in out) else None
                ev = (f"the GPU sat idle {ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{ms(ctx.min_gap_ns)} while the launching thread ran '{subject}'" +
                      (f"; {samples_text(sampled)}" if sampled else ""))
                out.append(ctx.finding(self.id, ns, subject, ev, self._range_fix(ctx, subject)))
            elif (samples := sampled_owner(ctx, in_ranges=False)) is not None:
                out.append(self._sampled(ctx, ns, samples))
            elif ctx.facts.profiler == "torch.profiler":
                out.append(self._unknown_work(ctx, ns))
            else:
                ev = (f"the GPU sat idle {ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{ms(ctx.min_gap_ns)} while the launching thread was busy outside any NVTX "
                      "range and not waiting for a CUDA call" + after_sync_text(ctx))
                out.append(ctx.finding(self.id, ns, None, ev, serialised_fix(ctx, ns, ctx.advice(
                    "mark the loop's phases with NVTX ranges (torch.cuda.nvtx.range) to see which CPU work the GPU "
                    "waits for, or sample the CPU (nsys --sample=process-tree, nsys-transfer run's default); then move "
                    "that work off the launching thread or overlap it with GPU work",
                    "mark the loop's phases with NVTX ranges (nvtxRangePush/Pop) to see which CPU work the GPU waits "
                    "for, or sample the CPU (nsys --sample=process-tree); then move that work off the launching thread "
                    "or overlap it with GPU work"))))
        return out

    def _unknown_work(self, ctx: Context, ns: int) -> Finding:
        """A torch.profiler trace's idle time outside any range and any CUDA call: it holds no OS runtime calls, so
        whether the thread computed or waited in the OS is unknown, and said so (never guessed)."""
        ev = (f"the GPU sat idle {ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
              f"{ms(ctx.min_gap_ns)} while the launching thread was outside any record_function "
              "range and any CUDA call: computing or waiting in the OS, which a torch.profiler trace cannot tell "
              "(it records no OS runtime calls)" + after_sync_text(ctx))
        return ctx.finding(self.id, ns, None, ev, serialised_fix(ctx, ns, (
            "wrap the loop's phases in torch.profiler.record_function ranges to see which one the GPU waits for "
            "(with_stack=True names its line), or trace the program with nsys-transfer run, which records the OS "
            "calls; then move that work off the launching thread or overlap it with GPU work")))

    def _sampled(self, ctx: Context, ns: int, s: CpuSamples) -> Finding:
        """The finding for CPU work outside any range that the CPU samples name (s): its owner is the subject."""
        kind = next(iter(s.kinds))
        top = next((f for f in s.functions if f.kind == kind), s.functions[0])
        # a PyTorch op's entry (torch.argmax) names the work better than the allocator or iterator inside it
        top = next((f for f in s.functions if f.kind == kind and f.share >= 0.5 * top.share and
                    (f.function.startswith("torch.") or "at::native::" in f.function)), top)
        ev = (f"the GPU sat idle {ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
              f"{ms(ctx.min_gap_ns)} while the launching thread computed outside any NVTX range; "
              + samples_text(s) + after_sync_text(ctx))
        fix = WORK_FIXES.get(kind)
        if fix is None:
            fix = (f"move the work in {_function(top)} ({top.library}) off the launching thread or queue the next "
                   "GPU work before it")
        elif kind in OUTPUT_WORK:
            fix = ctx.advice(fix, fix, fix="output")
        # the profiler's own cost is no finding to act on: low, whatever its share
        return ctx.finding(self.id, ns, f"{kind}: {_function(top)}", ev, serialised_fix(ctx, ns, fix, first=False),
                           severity="low" if kind == PROFILER else None)

    @staticmethod
    def _range_fix(ctx: Context, name: str) -> str:
        if name in LIBRARY_RANGE_FIXES:
            return LIBRARY_RANGE_FIXES[name]
        if ctx.program.toolkit and name in RANGE_FIXES:
            text, stage = RANGE_FIXES[name]
            return ctx.advice(text, text, stage)
        return ctx.advice(f"move the work in '{name}' off the launching thread (a worker process or thread fed by a "
                          "queue) or queue the next step's GPU work before it, so the GPU has work while it runs",
                          f"move the work in '{name}' off the launching thread or issue the next GPU work (async, on "
                          "a stream) before it, so the GPU has work while it runs")

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """That CPU work leaves the launching thread for worker processes: the work in its range, or (no range) the
        thread's own work in the long gaps outside ranges."""
        t = ctx.timeline
        if t is None:
            return NoFigure("no timeline to replay")
        s = finding.subject
        if s and is_operator_range(s):
            return NoFigure(f"the work inside the op '{s}' cannot be moved off the thread as it stands")
        ranged = bool(s) and len(t.ranges) > 0 and s in set(t.ranges["name"])
        w = work.in_range(t, s) if ranged else work.unranged_long(t, ctx.min_gap_ns)
        if not w.any():
            return NoFigure("the replayed iterations hold none of that work")
        data = float(t.op_bytes[work.copies(t, "DtoH") | work.copies(t, "HtoD")].sum())
        return fixes.move_off_thread(t, w, "worker processes", data_bytes=data)


MIN_SAMPLES = 10  # CPU samples of the launching thread in the gaps before they name its work (about 10 ms at 1 kHz)


def sampled_owner(ctx: Context, in_ranges: bool) -> CpuSamples | None:
    """The CPU samples in the gaps inside ranges (or outside them) of the device with the most of them; None below
    MIN_SAMPLES."""
    per_device = (d.range_samples if in_ranges else d.cpu_samples for d in idle_figures(ctx).devices)
    best = max((s or CpuSamples() for s in per_device), key=lambda s: s.samples, default=CpuSamples())
    return best if best.samples >= MIN_SAMPLES else None


def samples_text(s: CpuSamples) -> str:
    """'CPU samples of the launching thread in those gaps (412): PyTorch CPU ops 81%, ...; top: f (lib) 60%'."""
    kinds = ", ".join(f"{k} {v:.0%}" for k, v in list(s.kinds.items())[:3])
    fns = ", ".join(f"{f.function} ({f.library}) {f.share:.0%}" for f in s.functions)
    return f"CPU samples of the launching thread in those gaps ({s.samples:,}): {kinds}; functions: {fns}"


def cpu_after_sync_ns(ctx: Context) -> int:
    """The CPU-work idle time that came right after a sync returned, over the devices (sections/idle.py)."""
    return sum(d.cpu_after_sync_ns for d in idle_figures(ctx).devices)


def after_sync_text(ctx: Context) -> str:
    """How much of the CPU work came right after a synchronising call returned (the sync serialises it)."""
    ns = cpu_after_sync_ns(ctx)
    if ns < 0.5 * ctx.min_gap_ns:
        return ""
    return (f"; {ms(ns)} of it right after a synchronising call returned (the sync emptied the GPU's queue before "
            "this work: it serialises it, the work itself holds the GPU)")


def serialised_fix(ctx: Context, ns: int, fix: str, first: bool = True) -> str:
    """The fix, where most of this CPU work follows a synchronising call, with the sync's part (before the fix, or
    after it where the samples named the work): it keeps the GPU's queue empty while the host works (OpenACC:
    compute regions without async clauses)."""
    after = cpu_after_sync_ns(ctx)
    if after < 0.5 * ns:
        return fix
    if ctx.program.framework == "openacc":
        sync = ("the host works between compute regions right after each region's wait, so the GPU has nothing "
                "queued: add async(n) clauses to the parallel/kernels regions and data updates, and one `!$acc wait` "
                "(or #pragma acc wait) where the host needs the results, so the host's work overlaps the GPU's")
    else:
        sync = ("the work follows a synchronising call, so the GPU has nothing queued while it runs: issue the next "
                "GPU work before it (read results back with non_blocking=True and an event, sync once per step at "
                "most)")
    return f"{sync}; {fix}" if first else f"{fix}; {sync}"


class LaunchBound(IdleRule):
    """The GPU mostly idle in short gaps between many short kernels while the launching thread issues them."""
    causes = (LAUNCH,)
    fires_when = ("idle cause `launch` (gaps < `--min-gap-ms` between GPU operations) and a median kernel of at most "
                  "{rule.short_kernel_ns:,} ns (longer kernels keep the queue ahead of the host); evidence: kernels "
                  "per step, median kernel, launch calls")
    suggests = "CUDA graphs / `torch.compile(mode=\"reduce-overhead\")`, fusion, larger batches"
    # a launch costs the host 5-50 us (PyTorch eager: its op dispatch too): a median kernel longer than this keeps
    # the queue ahead of the host, and short gaps between such kernels are not a launch problem. Launch-bound traces
    # here: median 1.4-25 us (hf generate, Lightning, cuDF, CloverLeaf); the rest 200 us to 136 ms.
    short_kernel_ns = 50_000

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding, where the median kernel is short: the short gaps, the kernels and the launch cost."""
        k = ctx.facts.kernels
        if not k.count or (k.median_ns or 0) > self.short_kernel_ns:
            return []
        info = idle_figures(ctx)
        gaps = sum(d.short_idle_intervals for d in info.devices)
        steps = ctx.steps()
        per = f" ({k.count / steps:,.0f} per step)" if steps else ""
        calls = info.launch_calls
        launch = (f"; each launch call costs the launching thread {us(info.launch_api_ns / calls)} (mean of the "
                  f"capture's {calls:,})" if calls else "")
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}) in {gaps:,} gaps shorter than "
              f"{ms(ctx.min_gap_ns)} between GPU operations (kernels, copies, memsets): "
              f"{k.count:,} kernels{per}, median {us(k.median_ns or 0)}{launch}")
        graphs = k.graph_share
        if graphs >= 0.5:  # the advice the trace shows is already taken: name what is left instead
            ev += f"; CUDA graphs already carry {graphs:.0%} of the GPU work"
            return [ctx.finding(self.id, impact, "host turnaround between graph replays", ev, ctx.advice(
                "the step already runs as CUDA graphs: what is left is the host's turnaround between replays: drop "
                "per-request syncs (.cpu(), .item() of each result: read results back with non_blocking=True into "
                "pinned memory and wait on an event), copy inputs from pinned buffers into the graph's static inputs "
                "with non_blocking=True, and batch requests so that each replay does more work",
                "the loop already runs as CUDA graphs: what is left is the host's turnaround between launches: drop "
                "per-launch synchronisation, stage inputs in pinned memory with cudaMemcpyAsync, and give each graph "
                "more work (larger batches)"))]
        return [ctx.finding(self.id, impact, "kernel launches", ev, ctx.advice(
            "the kernels are too short for the CPU to keep the GPU fed: capture the step in a CUDA graph "
            "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), fuse ops with torch.compile, or give each "
            "kernel more work (a larger batch)",
            "the kernels are too short for the host to keep the GPU fed: launch the loop as a CUDA graph "
            "(stream capture + cudaGraphLaunch), fuse kernels, or give each kernel more work (larger batches)"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The launches replayed as a CUDA graph (the step already in graphs: its turnaround is not replayable)."""
        t = ctx.timeline
        if t is None:
            return NoFigure("no timeline to replay")
        if finding.subject != "kernel launches":
            return NoFigure("the step already runs as CUDA graphs; what is left is the host's turnaround")
        return graph_fix(t, ctx.min_gap_ns)


UNNAMED = re.compile(r"^0x[0-9a-f]+$")  # a frame nsys could not symbolise: its address moves from run to run


def _function(f: SampledFunction) -> str:
    """A sampled function's name for a subject: an unsymbolised frame by its library (a subject must name the same
    work in two captures of one program, which an address under ASLR does not)."""
    return f"unnamed code in {f.library}" if UNNAMED.match(f.function) and f.library else \
        "unnamed code" if UNNAMED.match(f.function) else f.function
