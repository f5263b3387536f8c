"""Rules about GPU idle time, one per cause the idle attribution (sections/idle.py) gives it (common/idle_causes.py
declares the causes: a cause without a rule of its own here or in host_work.py gets the generic one,
IdleRule.generic), and the GPU-bound verdict when little idle time is left. The launching thread's own work (CPU work
in the gaps, launches) is host_work.py's, on IdleRule."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..common import cuda_api, idle_causes
from ..common.idle_causes import COMM_WAIT, HOST_SYNC, INPUT, MAPPING, SETUP, SLEEP, IdleCause
from .advice import LIBRARY_RANGE_FIXES, RANGE_FIXES
from .base import (NOISE_SHARE, Context, Finding, Rule, calls_text, idle_by_subject,
                   idle_figures, idle_of, ms)
from .capture import too_little
from .terms import terms
from .facts import DataLoaderWorkers, KernelRow
from ..replay import fixes, work
from ..replay.fixes import Fix, NoFigure
from .output import pipeline_waits


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
        workers halve a producer-bound wait where the cores allow). Its time inside the input's range (the
        DataLoader's __next__) is a wait too where workers produce the batches: a lock nsys does not record, so it
        reads as the thread's own time; with no workers that time is the loading itself, moved to workers."""
        t = ctx.timeline
        if t is None:
            return NoFigure("the replayed iterations hold none of the launching thread's waits")
        ranged = work.in_range(t, finding.subject) if finding.subject else np.zeros(t.gap_start.size, np.int64)
        loader = ctx.program.loader_workers
        if ranged.any() and not (loader and loader.threads):
            return fixes.move_off_thread(t, ranged, "DataLoader worker processes")
        starved = sum(d.loader_starved_ns for d in idle_figures(ctx).devices)
        if not ranged.any() and starved > 0.5 * finding.impact_ns:
            return NoFigure("the launching thread's wait for the DataLoader is a lock nsys does not record, outside "
                            "any range, so the replay cannot tell it from its own work: the idle share is the guide")
        waits = t.wait_ns + ranged
        if not waits.any():
            return NoFigure("the replayed iterations hold none of the launching thread's waits")
        return fixes.remove(waits, "the input's producers keep up: the loop's waits for them go, inside the input's "
                                   "range too (half of them at the low end)", low_share=0.5)


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
