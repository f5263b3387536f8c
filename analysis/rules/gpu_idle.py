"""Rules about GPU idle time, one per cause the idle attribution (sections/idle.py) gives it (common/idle_causes.py
declares the causes: a cause without a rule of its own here gets the generic one, IdleRule.generic), and the GPU-bound
verdict when little idle time is left."""
from __future__ import annotations

import re

import pandas as pd

from nsys_transfer.analysis.common import cuda_api, idle_causes
from nsys_transfer.analysis.common.idle_causes import (COMM_WAIT, CPU, CPU_RANGE, HOST_SYNC, INPUT, LAUNCH, MAPPING,
                                                       SETUP, SLEEP, IdleCause)
from nsys_transfer.analysis.sections.program import is_operator_range
from nsys_transfer.analysis.rules.advice import (LIBRARY_RANGE_FIXES, OPERATOR_FIXES, OUTPUT_WORK, RANGE_FIXES,
                                                 WORK_FIXES)
from nsys_transfer.analysis.sections.cpu_work import PROFILER
from nsys_transfer.analysis.rules.base import (NOISE_SHARE, Context, Finding, Rule, calls_text, idle_by_subject,
                                               idle_figures, idle_of, ms, us)
from nsys_transfer.analysis.rules.capture import too_little
from nsys_transfer.analysis.rules.terms import terms
from nsys_transfer.analysis.rules.facts import CpuSamples, DataLoaderWorkers, KernelRow, SampledFunction
from nsys_transfer.analysis.rules.role_fixes import graph_fix
from nsys_transfer.analysis.replay import fixes, work
from nsys_transfer.analysis.replay.fixes import Fix, NoFigure
from nsys_transfer.analysis.rules.output import pipeline_waits


class IdleRule(Rule[Context]):
    """A rule about the idle time of its causes (the first one's rule is its id): check() hands their attribution's
    rows, where there are any, and the idle time they hold to findings()."""
    causes: tuple[IdleCause, ...]

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "causes" in vars(cls):
            cls.id = cls.causes[0].rule

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = self.rows(ctx)
        return [] if rows.empty else self.findings(ctx, rows, int(rows["idle_ns"].sum()))

    def rows(self, ctx: Context) -> pd.DataFrame:
        """The idle attribution's rows this rule judges: its causes'."""
        parts = [idle_of(ctx, c) for c in self.causes]
        return parts[0] if len(parts) == 1 else pd.concat(parts)

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The findings on these rows (not empty), which hold `impact` ns of idle time."""
        raise NotImplementedError

    @staticmethod
    def generic(cause: IdleCause) -> "IdleRule":
        """The rule of a cause without one of its own: the idle time, where the launching thread was, and the cause's
        fix."""
        said = {"fires_when": f"idle cause `{cause.name}`: {cause.doc}", "suggests": cause.fix}
        return type(f"Idle_{cause.name}", (GenericIdleRule,), {"causes": (cause,), "__doc__": cause.doc,
                                                               **{k: v.replace("{", "{{").replace("}", "}}")
                                                                  for k, v in said.items()}})()


class GenericIdleRule(IdleRule):
    """The finding of a declared cause that has no rule of its own (common/idle_causes.py): its time and its fix."""

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """One finding: the cause's idle time, its subject the range holding most of it."""
        cause = self.causes[0]
        by = idle_by_subject(rows)
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) with {cause.doc}")
        return [ctx.finding(self.id, impact, by.index[0] or None, ev, cause.fix)]


def generic_rules(taken: set[str]) -> list[IdleRule]:
    """The generic rule of each declared cause whose rule id no rule in `taken` has, in the causes' order."""
    return [IdleRule.generic(c) for c in idle_causes.CAUSES if c.rule not in taken]


class SetupInWindow(IdleRule):
    """The GPU idles while the launching thread is in one-time CUDA set-up inside the analysed window (no steps to
    leave it out by, or a range named `warmup` that is not the capture's start): the context, module loading (a
    first launch that loads its module), the caching allocator's cudaMalloc/cudaFree, streams. Set-up is counted and
    listed, never given the loop's advice; only where it recurs in most steps is it the loop's own (allocator churn)."""
    causes = (SETUP,)
    fires_when = ("idle cause `setup` (info: set-up, never the verdict); costed, with the allocator's advice, where "
                  "the calls recur in at least half of {rule.min_steps}+ steps")
    suggests = ("keep the set-up out of the capture (the schedule's wait/warmup, a capture started after the "
                "warm-up); recurring: no torch.cuda.empty_cache() in the loop, fixed shapes")
    min_steps = 3

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """One finding: the set-up calls the GPU waited through, by time (none below the noise floor: a note of
        0.0 ms says nothing)."""
        if impact < NOISE_SHARE * ctx.gpu_time_ns():
            return []
        calls = idle_figures(ctx).setup_calls()
        named = calls_text(calls, 4)
        steps, with_calls = ctx.steps(), idle_figures(ctx).setup_call_steps
        if steps >= self.min_steps and with_calls >= 0.5 * steps:  # the loop's own: the allocator churns every step
            ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) while the "
                  f"launching thread was in CUDA allocation and set-up calls ({named}), in {with_calls} of the "
                  f"{steps} steps: not a one-time set-up, the loop frees and allocates memory as it runs")
            return [ctx.finding(self.id, impact, next(iter(calls), None), ev, ctx.advice(
                "the caching allocator returns memory to CUDA and takes it again every step: remove "
                "torch.cuda.empty_cache() from the loop, keep tensor shapes fixed (pad variable batches), or set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                "allocate device memory once, before the loop, and reuse it (a memory pool: cudaMallocAsync with a "
                "pool, or your own buffers)"))]
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}) while the launching thread was in "
              f"one-time CUDA set-up ({named}): set-up, not the loop's work, so no finding above counts it")
        return [ctx.finding(self.id, impact, next(iter(calls), None), ev,
                            f"nothing to fix in the loop; to see the loop alone, {_setup_out(ctx)}",
                            severity="info")]


def _setup_out(ctx: Context) -> str:
    """How to keep the set-up out of the next capture, in the recording profiler's words."""
    if ctx.facts.profiler == "torch.profiler":
        return terms(ctx.facts.profiler).after_warmup_cpu
    return "start the capture after the warm-up (torch.cuda.profiler.start() with nsys --capture-range=cudaProfilerApi)"


class InputBound(IdleRule):
    """The GPU idles while the launching thread is blocked waiting for other threads or processes to hand it data, or
    while the DataLoader's pin-memory thread waits for batches its workers are still making."""
    causes = (INPUT,)
    fires_when = ("idle cause `input` (that idle time); names the enclosing range and the DataLoader workers "
                  "(`pt_data_worker`)")
    suggests = ("DataLoader `num_workers`, `persistent_workers`, `prefetch_factor`, cheaper samples (GPU decode); "
                "CUDA: produce ahead, double buffering")

    def rows(self, ctx: Context) -> pd.DataFrame:
        """The input cause's rows but the output side's waits (output-bound's)."""
        rows = idle_of(ctx, INPUT)
        return rows[~rows.index.isin(pipeline_waits(ctx).index)]

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding: the idle time, what the thread waited in, and the producers."""
        by_subject = idle_by_subject(rows)
        idle = idle_figures(ctx)
        calls = idle.input_calls()
        starved = sum(d.loader_starved_ns for d in idle.devices)
        workers = ctx.program.loader_workers
        parts = []
        if calls:
            parts.append(f"the launching thread was blocked waiting ({calls_text(calls)})")
        if starved:
            parts.append(f"for {ms(starved)} the DataLoader's pin-memory thread waited for batches its worker "
                         "processes were still making (the launching thread's own wait is a lock nsys does not record)")
        ranged = [(k, v) for k, v in by_subject.items() if k and k != "DataLoader"]
        if ranged:
            parts.append("the thread was inside " + ", ".join(f"'{k}' ({ms(v)})" for k, v in ranged[:2]))
        producers = (f"; producers in the trace: {workers.threads} DataLoader worker threads (pt_data_worker) in "
                     f"{workers.processes} processes" if workers and workers.threads else "")
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) waiting for input: "
              + "; ".join(parts) + producers)
        subject = by_subject.index[0] or next(iter(calls), None)
        return [ctx.finding(self.id, impact, subject, ev, self._fix(ctx, subject, workers))]

    @staticmethod
    def _fix(ctx: Context, subject, workers: DataLoaderWorkers | None) -> str:
        if subject in LIBRARY_RANGE_FIXES:
            return LIBRARY_RANGE_FIXES[subject]
        if ctx.program.toolkit and subject in RANGE_FIXES:
            text, stage = RANGE_FIXES[subject]
            return ctx.advice(text, text, stage)
        if workers and workers.threads:
            return (f"the DataLoader's worker processes ({workers.processes}) do not produce batches as fast as the GPU "
                    "consumes them: raise num_workers (up to the idle cores), keep persistent_workers=True and "
                    "prefetch_factor >= 2, and make each sample cheaper (decode and resize on the GPU, e.g. "
                    "torchvision.io.decode_jpeg(..., device='cuda') or NVIDIA DALI, or pre-resized data)")
        return ctx.advice("load input in DataLoader worker processes (num_workers > 0, pin_memory=True) so the next batch "
                          "is ready while the GPU computes, or produce it ahead on more threads with a deeper queue",
                          "the thread waits for another thread or process to hand it data: produce input ahead (more "
                          "producers, a deeper queue) and overlap loading with GPU work (double-buffered "
                          "cudaMemcpyAsync on a second stream)")

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The producers keep up: the launching thread's waits for them go (half of them at the low end: twice the
        workers halve a producer-bound wait where the cores allow)."""
        t = ctx.timeline
        if t is None or not t.wait_ns.any():
            return NoFigure("the replayed iterations hold none of the launching thread's waits")
        return fixes.remove(t.wait_ns, "the input's producers keep up: the loop's waits for them go (half of them "
                                       "at the low end)", low_share=0.5)


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


class MemoryMappingInGaps(IdleRule):
    """mmap/munmap/fallocate (fresh allocations, shared-memory segments) while the GPU was idle."""
    causes = (MAPPING,)
    fires_when = "idle cause `mapping`"
    suggests = "allocate once, reuse (bufpool)"

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding: the mapping calls and the time in them."""
        calls = idle_figures(ctx).mapping_calls()
        ev = (f"while the GPU was idle the launching process spent {ms(impact)} ({ctx.share_of_window(impact)}) in "
              f"memory-mapping calls ({calls_text(calls, 4)})")
        return [ctx.finding(self.id, impact, next(iter(calls), None), ev, ctx.advice(
            "allocate output buffers once and reuse them instead of creating a tensor per step (a tensor sent through "
            "a torch.multiprocessing queue gets a new shared-memory segment each time: send an index into buffers "
            "shared once)",
            "allocate host buffers once and reuse them instead of allocating (and mapping) memory per iteration",
            "bufpool"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """Buffers allocated once and reused: the mapping in the loop goes."""
        t = ctx.timeline
        if t is None or not t.mapping_ns.any():
            return NoFigure("the replayed iterations hold none of the launching thread's memory mapping")
        return fixes.remove(t.mapping_ns, "buffers allocated once: the loop's memory mapping goes")


class HostSync(IdleRule):
    """The launching thread waits in a synchronising CUDA call; the GPU drains and then idles until the thread has
    issued the next work."""
    causes = (HOST_SYNC,)
    fires_when = "idle cause `host-sync` (the idle after the syncs); evidence: syncs per step, time blocked"
    suggests = ("drop per-step `.item()`/`.cpu()`/`.tolist()`/`if tensor`; async copies + events; CUDA: no "
                "synchronize in the loop")

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding, where the launching thread made synchronising calls: their count, names and cost."""
        info = idle_figures(ctx)
        if not info.sync_calls:
            return []
        setup = ctx.facts.steps.setup
        n = int(setup.sync_calls_in_steps if setup else info.sync_calls)
        names = ctx.facts.sync_names
        top = ", ".join(f"{cuda_api.base_name(k)} x{v}" for k, v in names.head(3).items()) if len(names) else f"{n} calls"
        steps = ctx.steps()
        per = f" ({n / steps:.0f} per step)" if steps else ""
        where = " inside the steps" if setup else ""
        before = (f" ({setup.sync_calls:,} more before the first step are set-up: model.to(device), warm-up)"
                  if setup and setup.sync_calls else "")
        ev = (f"{n} synchronising calls on the launching thread{where}{per}: {top}{before}; blocked "
              f"{ms(info.sync_blocked_ns)} in them, and the GPU then sat idle {ms(impact)} "
              f"({ctx.share_of_window(impact)}) until the next work arrived")
        subject = cuda_api.base_name(names.index[0]) if len(names) else None
        graphs = ctx.facts.kernels.graph_share
        if graphs >= 0.5 and ctx.pytorch:  # the step is replayed as CUDA graphs: each sync ends a replay's turnaround
            return [ctx.finding(self.id, impact, subject, f"{ev}; CUDA graphs already carry {graphs:.0%} of the GPU "
                                "work", "the step already runs as CUDA graphs: what is left is the host's turnaround "
                                "around each replay, which each sync serialises: read results back with "
                                "non_blocking=True into pinned memory and wait on a CUDA event only when the reply "
                                "needs them, copy inputs from pinned buffers with non_blocking=True, and batch "
                                "requests so that each replay does more work")]
        return [ctx.finding(self.id, impact, subject, ev, ctx.advice(
            "each sync drains the GPU's queue, then the GPU waits while Python issues the next work: remove per-step "
            "reads of GPU values (.item(), .cpu(), .tolist(), print or `if` on a tensor, torch.nonzero / boolean "
            "indexing); keep them on the GPU and read them every N steps, or copy with non_blocking=True into pinned "
            "memory and wait on a CUDA event only when the value is needed",
            "each sync drains the GPU's queue, then the GPU waits while the host issues the next work: drop "
            "cudaDeviceSynchronize/cudaStreamSynchronize and synchronous cudaMemcpy from the loop; use cudaMemcpyAsync "
            "into pinned memory and wait on an event only when the data is needed", "async", fix="scalars")
            if ctx.program.framework != "openacc" else
            "each compute region waits for the GPU before the host launches the next: add async(n) clauses to the "
            "parallel/kernels regions and data updates, and one `!$acc wait` (or #pragma acc wait) where the host needs "
            "the results, e.g. once per time step")]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The syncs that waited no longer wait: the values are read every N steps or after an event."""
        t = ctx.timeline
        if t is None or not work.waiting_syncs(t).any():
            return NoFigure("the replayed iterations hold no sync that waited")
        return fixes.no_wait(work.waiting_syncs(t), "the synchronising calls no longer wait for the GPU")


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


class HostSleep(IdleRule):
    """GPU idle while the launching thread sleeps (time.sleep, nanosleep): it waits by choice or polls, it is not
    computing, so moving CPU work is not the fix; not sleeping is (or having what it waits for ready)."""
    causes = (SLEEP,)
    fires_when = ("idle cause `sleep`: the launching thread sleeps while the GPU idles; subject: the range it sleeps "
                  "in")
    suggests = ("keep what it waits for resident or prefetch it on another thread; wait on an event instead of "
                "sleep-polling")

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding: the sleep and the range it slept in."""
        by = idle_by_subject(rows)
        where = f" inside '{by.index[0]}'" if by.index[0] else ""
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) while the launching "
              f"thread slept{where} (off the CPU: in a sleep call, or switched out by the scheduler outside any call "
              "that says why; not computing)")
        return [ctx.finding(self.id, impact, by.index[0] or None, ev, ctx.advice(
            "the thread waits instead of issuing GPU work: if it sleeps to wait for something (weights loaded from "
            "disk, a file, another process), keep that resident or prefetch it on a background thread before it is "
            "needed; if it polls, wait on an event or a queue instead; queue the next GPU work before any wait",
            "the thread waits instead of issuing GPU work: prefetch what it waits for on another thread, replace "
            "sleep-polling with an event or condition variable, and queue the next GPU work before any wait"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The sleeps go."""
        t = ctx.timeline
        if t is None or not t.sleep_ns.any():
            return NoFigure("the replayed iterations hold none of the launching thread's sleeps")
        return fixes.remove(t.sleep_ns, "the loop no longer sleeps")


class CommWait(IdleRule):
    """GPU idle while the launching thread waits in communication (MPI calls, ranges named after them or after
    collectives): a rank blocked on its peers is not busy, and the fix is overlap, not moving CPU work."""
    causes = (COMM_WAIT,)
    fires_when = "idle cause `comm-wait`; subject: the MPI call or range holding most of it"
    suggests = "overlap: non-blocking MPI_Isend/MPI_Irecv or an async collective on its own stream, CUDA-aware MPI"

    def findings(self, ctx: Context, rows: pd.DataFrame, impact: int) -> list[Finding]:
        """The one finding: the calls or ranges it waited in."""
        by = idle_by_subject(rows, "?")
        inside = ", ".join(f"{name} {ms(ns)}" for name, ns in by.head(4).items())
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) while the launching "
              f"thread waited in communication ({inside})")
        return [ctx.finding(self.id, impact, str(by.index[0]), ev, ctx.advice(
            "overlap communication with compute: start the collective asynchronously (torch.distributed with "
            "async_op=True, NCCL on its own stream) and wait on it only when its result is needed; with MPI, post "
            "MPI_Isend/MPI_Irecv before the next GPU work and MPI_Wait after it, and pass device buffers to a CUDA-aware "
            "MPI instead of staging them through the host",
            "overlap communication with compute: post MPI_Isend/MPI_Irecv (or start the NCCL collective on its own "
            "stream) before the next GPU work and wait after it; pass device buffers to a CUDA-aware MPI instead of "
            "staging them through host copies"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """Not replayable: the wait is for other ranks."""
        return NoFigure("it waits for other ranks, whose work this trace does not show")


class GpuBound(Rule[Context]):
    """The kernels fill the GPU: what limits the program is its GPU work itself, named by its top kernels (their
    precision and library where the names say them), whatever transfer findings stand beside it."""
    id = "gpu-bound"
    fires_when = ("kernels run at least {rule.min_compute:.0%} of the window (on average over the GPUs); impact: the "
                  "kernel time; evidence: the top kernels with their precision and library")
    suggests = ("less GPU work per result: lower precision (autocast bf16, TF32), tensor cores, `channels_last`, "
                "fusion, larger batches; FP64 named where the top kernel is FP64")
    min_compute = 0.8  # of the window, on average over the GPUs: kernels running this much of the time
    low_precision = ("FP16", "BF16", "FP8", "INT8")

    def _levers(self, top: tuple[KernelRow, ...]) -> list[str]:
        """The PyTorch levers the top kernels do not already use: no autocast advice where they compute in 16 bits
        or less, no channels_last where they are NHWC already."""
        low = any(r.precision in self.low_precision for r in top)
        nhwc = any(x in f"{r.name} {r.shown_name}".lower() for r in top for x in ("nhwc", "channels_last"))
        levers = [] if low else ["bf16/fp16 autocast (torch.autocast('cuda', torch.bfloat16)) or TF32 matmuls "
                                 "(torch.backends.cuda.matmul.allow_tf32)"]
        levers += [] if nhwc else ["channels_last for convolutions"]
        return levers + ["torch.compile to fuse the elementwise kernels", "a larger batch where the GPU is not yet "
                         "full" + (" (the top kernels already run in reduced precision and NHWC)" if low and nhwc else
                                   " (the top kernels already run in reduced precision)" if low else "")]

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        g = ctx.facts.gpu
        if g is None or (g.compute_utilization or 0) < self.min_compute or not ctx.facts.kernels.top or \
                too_little(ctx):  # a few kernels fill their own short window: no ground for compute advice
            return []
        top = ctx.facts.kernels.top[:3]
        named = "; ".join(f"{r.shown_name} {r.pct:.0f}%" + "".join(f", {x}" for x in (r.precision, r.library) if x)
                          for r in top)
        ev = f"kernels ran {g.compute_utilization:.0%} of the window; by time: {named}"
        fp64 = top[0].precision == "FP64"
        return [ctx.finding(self.id, g.compute_ns, str(top[0].shown_name), ev, ctx.advice(
            ("the top kernel computes in FP64: if the model allows, run it in FP32/TF32 or BF16 on the tensor cores; "
             if fp64 else "") + "less GPU work per result is the lever now: " + ", ".join(self._levers(top)),
            ("the top kernel computes in FP64: where the algorithm allows, FP32/TF32 or lower precision on the tensor "
             "cores is several times faster; " if fp64 else "") + "less GPU work per result is the lever now: lower "
            "precision, tensor-core kernels (cuBLAS/cuDNN math modes), fused kernels, fewer FLOPs"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """Not replayable: what faster kernels buy is not in the trace."""
        return NoFigure("the GPU's own work sets the pace: what faster kernels (bf16, TF32, fusion) buy is not in the "
                        "trace")


UNNAMED = re.compile(r"^0x[0-9a-f]+$")  # a frame nsys could not symbolise: its address moves from run to run


def _function(f: SampledFunction) -> str:
    """A sampled function's name for a subject: an unsymbolised frame by its library (a subject must name the same
    work in two captures of one program, which an address under ASLR does not)."""
    return f"unnamed code in {f.library}" if UNNAMED.match(f.function) and f.library else \
        "unnamed code" if UNNAMED.match(f.function) else f.function
