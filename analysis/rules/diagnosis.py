"""Diagnosis rules: each reads the computed analysis and, when it fires, says what it costs and the next fix.

The findings contract (docs/json-schema.md): every finding has `rule` (a stable id), `severity`, `impact_ns` (the time
it costs: GPU idle time it explains, host time blocked, or copy time a fix would save), `impact_fraction` (impact over
the GPUs' time in the analysis window: the window times the GPUs that ran work in it, so never above 1), `subject` (the NVTX range, API call or copy direction it is about; None if none), `evidence`
(numbers from this trace) and `suggestion` (the fix, in the program's own terms). Severity follows from the impact:
high >= 10% of the window, medium >= 2%, low below; `info` only for notes on the capture that cost no time. The list
is ordered by impact, largest first, after the notes that say the trace itself cannot be trusted.

Idle time is attributed once (analysis/sections/idle.py), so the idle rules never count the same nanosecond twice; the copy
rules count copy time, which is GPU time spent copying, not idle time.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import pandas as pd

from nsys_transfer.nsys_core.contracts import (COPY_TO_CPU, DRAIN_OUTPUTS, GET_BATCH, PIPELINE_DRAIN, PROCESS_OUTPUT,
                                              QUEUE_OUTPUT, gbps)

from nsys_transfer.analysis.sections.copies import big_copies
from nsys_transfer.analysis.sections.machine import MIN_PROBE_BYTES
from nsys_transfer.analysis.sections.program import is_operator_range

HIGH_SHARE, MEDIUM_SHARE = 0.10, 0.02
NOISE_SHARE = 0.001
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
# the fixes of this toolkit's own workloads, by the NVTX range where the GPU waited (named only for its own traces)
RANGE_FIXES = {
    PROCESS_OUTPUT: ("move post-processing off the launching thread into worker processes fed by a queue",
                       "multiproc"),
    COPY_TO_CPU: ("stop allocating a fresh output per batch: copy into a pool of pre-allocated shared-memory buffers "
                    "recycled through a queue", "bufpool"),
    QUEUE_OUTPUT: ("send a buffer index through the queue, not the tensor (which is copied into new shared memory on "
                     "every put): pre-allocated shared buffers", "bufpool"),
    GET_BATCH: ("load input in DataLoader workers with pin_memory=True and copy the next batch on a side stream while "
                  "this one computes (the prefetcher)", "baseline"),
    DRAIN_OUTPUTS: ("the output workers were still behind when the GPU finished: in steady state the buffers run out "
                      "and the GPU waits; add output workers if the host has idle cores (the run record's host_cpu), "
                      "else give the job more cores or less CPU work per output (argmax or bf16 on the GPU)", None),
}
# ranges the fixes library emits in any program that uses it, and what the GPU's wait inside them means
LIBRARY_RANGE_FIXES = {
    PIPELINE_DRAIN: "the OutputPipeline's workers were still behind when the GPU had finished: its post-processing, "
                    "not the GPU, sets the pace; give it more workers if the host has idle cores, or less CPU work "
                    "per output (argmax, a reduction or bf16 on the GPU before submit())",
}

# the toolkit's drop-in fixes (docs/fixes.md), named in the suggestion of each transfer finding of a PyTorch program
FIXES = {
    "output": "in a few lines: nsys_transfer.fixes.OutputPipeline does all of it (`with OutputPipeline(process, "
              "workers=8) as outputs:` ... `outputs.submit(i, model(batch))`; docs/fixes.md)",
    "input": "in one line: `for batch in nsys_transfer.fixes.prefetch(loader, device):` pins, copies ahead on a side "
             "stream and orders the compute after it (docs/fixes.md)",
    "scalars": "in a few lines: nsys_transfer.fixes.GpuScalars (`scalars.add(loss=loss)` instead of `loss.item()`, "
               "read every N steps without a sync; docs/fixes.md)",
}

# what the GPU waits for inside some PyTorch ops (emit_nvtx names them)
OPERATOR_FIXES = {
    "aten::cudnn_convolution": "cuDNN chooses an algorithm the first time it meets each convolution shape (and "
                               "benchmarks them with torch.backends.cudnn.benchmark=True): this is warm-up; run a few "
                               "batches of every shape before the part that must be fast, and keep shapes fixed",
}


@dataclass
class Finding:
    """One rule's verdict: what it costs (impact over the window), what it is about, the evidence and the fix."""
    rule: str
    severity: str
    impact_ns: int
    impact_fraction: float
    subject: str | None
    evidence: str
    suggestion: str

    def as_dict(self) -> dict:
        """The finding as a JSON-able dict."""
        return asdict(self)


def severity_of(share: float) -> str:
    """high, medium or low for an impact's share of its window (HIGH_SHARE, MEDIUM_SHARE)."""
    return "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"


def make_finding(rule: str, impact_ns, window_ns: int, subject, evidence: str, suggestion: str,
                 severity: str | None = None) -> Finding:
    """A finding whose share of the window and severity follow from its impact (a given severity wins)."""
    impact = int(max(impact_ns, 0))
    share = impact / window_ns if window_ns else 0.0
    return Finding(rule, severity or severity_of(share), impact, round(share, 4), subject, evidence, suggestion)


@dataclass
class Context:
    """What the rules read: the summary, its tables and the pipeline depth of this toolkit's workloads."""
    summary: dict
    tables: dict
    pipeline_depth: int = 10

    @property
    def copies(self) -> pd.DataFrame:
        """The memcpy table (empty when the trace has none)."""
        return self.tables.get("memcpy", pd.DataFrame())

    @property
    def idle(self) -> pd.DataFrame:
        """The idle-attribution table: cause, subject, idle_ns and device per row."""
        return self.tables.get("idle", pd.DataFrame(columns=["cause", "subject", "idle_ns", "device"]))

    @property
    def link_gbps(self) -> float | None:
        """The host link's GB/s from the summary; None when it is unknown."""
        return self.summary["trace"].get("link", {}).get("gbps")

    @property
    def program(self) -> dict:
        """What the traced program is: its framework and whether it is this toolkit's workload."""
        return self.summary["trace"].get("program") or {"framework": "cuda", "toolkit": False}

    @property
    def pytorch(self) -> bool:
        """Whether the traced program is a PyTorch program."""
        return self.program.get("framework") == "pytorch"

    def window_ns(self) -> int:
        """The analysed window's duration (ns); 0 without a window."""
        return int(self.summary.get("window", {}).get("duration_ns") or 0)

    def gpus(self) -> int:
        """How many GPUs ran work in the window (at least 1)."""
        return max(1, len((self.summary.get("gpu") or {}).get("devices") or []))

    def gpu_time_ns(self) -> int:
        """The GPUs' time in the window (window x GPUs): what impacts are shares of, so that the idle time of several
        GPUs never counts for more than all of it."""
        return self.window_ns() * self.gpus()

    def steps(self) -> int:
        """How many steps the trace holds; 0 without steps."""
        return int(self.summary["steps"]["count"] or 0)

    def finding(self, rule: str, impact_ns, subject, evidence: str, suggestion: str, severity: str | None = None):
        """A finding with its severity and share of the window derived from its impact."""
        return make_finding(rule, impact_ns, self.gpu_time_ns(), subject, evidence, suggestion, severity)

    def advice(self, pytorch: str, cuda: str, stage: str | None = None, fix: str | None = None) -> str:
        """The fix in the program's terms, and for a PyTorch program the drop-in fix (FIXES) that applies it; this
        toolkit's stage that applies it only for its own traces."""
        text = pytorch if self.pytorch else cuda
        if fix and self.pytorch:
            text = f"{text}; {FIXES[fix]}"
        return f"{text} (see stage {stage})" if stage and self.program.get("toolkit") else text

    def share_of_window(self, ns) -> str:
        """ns as a percentage of the window, in words."""
        win = self.gpu_time_ns()
        if not win:
            return "the whole capture"
        return f"{100 * ns / win:.0f}% of the window" if self.gpus() == 1 else \
            f"{100 * ns / win:.0f}% of the {self.gpus()} GPUs' time in the window"

    def per_step(self, ns) -> str:
        """', X ms per step' for ns spread over the steps; empty without steps."""
        n = self.steps()
        return f", {_ms(ns / n)} per step" if n else ""

    def link_pct(self, gbps: float) -> str:
        """' (N% of the X GB/s link)' for gbps; empty when the link speed is unknown."""
        link = self.link_gbps
        return f" ({100 * gbps / link:.0f}% of the {link:.0f} GB/s link)" if link else ""


def _ms(ns) -> str:
    return f"{ns / 1e6:,.1f} ms"


def _us(ns) -> str:
    return f"{ns / 1e3:,.1f} us"


def _gb(b) -> str:
    return f"{b / 1e9:.2f} GB"


def _size(b) -> str:
    """Bytes in the unit that reads best: 64 KB, 1.0 MB, 2.15 GB."""
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.0f} KB"


def _left_out(ctx: Context, kind: str, considered: pd.DataFrame) -> str:
    """What a copy rule leaves out of the summary's count of this direction: the small copies (scalar reads), so
    that the two counts never seem to disagree."""
    every = ctx.copies[ctx.copies["copy_kind"] == kind] if len(ctx.copies) else ctx.copies
    rest = len(every) - len(considered)
    if rest <= 0:
        return ""
    small = every[~every.index.isin(considered.index)]
    return f"; {rest:,} smaller {kind} copies ({_size(int(small['bytes'].sum()))} in all) are not counted here"


def _api(name: str) -> str:
    """cudaStreamSynchronize_v3020 -> cudaStreamSynchronize."""
    return re.sub(r"(_v\d+|_ptsz|_ptds)+$", "", str(name))


def _calls_text(calls: dict, n: int = 3) -> str:
    return ", ".join(f"{k} {_ms(v)}" for k, v in list(calls.items())[:n])


STEADY_CAUSES = ("host-sync", "launch", "mapping")  # costs of each step: counted inside the steps (summary.setup)


def _idle_of(ctx: Context, cause: str) -> pd.DataFrame:
    """The idle attribution's rows of one cause; for the per-step causes, those inside the steps where the set-up
    before them is reported apart."""
    t = ctx.tables.get("idle_steps") if cause in STEADY_CAUSES and "idle_steps" in ctx.tables else ctx.idle
    return t[t["cause"] == cause] if len(t) else t


def _devices(ctx: Context) -> dict:
    return (ctx.summary.get("idle") or {}).get("devices", {})


def _calls_of(ctx: Context, key: str) -> dict[str, int]:
    """Idle time inside each OS call, summed over the devices, largest first."""
    calls: dict[str, int] = {}
    for d in _devices(ctx).values():
        for k, v in d.get(key, {}).items():
            calls[k] = calls.get(k, 0) + v
    return dict(sorted(calls.items(), key=lambda kv: -kv[1]))


class IncompleteTrace:
    """The capture lost a large part of its CUDA events: every other figure is then wrong, so this comes first."""
    id = "incomplete-trace"
    first = True

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        integ = ctx.summary["trace"].get("integrity") or {}
        if integ.get("verdict") != "lossy":
            return []
        if (integ.get("figures") or {}).get("cut"):
            fix = ("do not trust the figures near the edges: analyse the whole capture this slice was cut from, or "
                   "pass a --window (or --steps) well inside this one")
        else:
            fix = ("do not trust the GPU figures of this trace: capture it again with an Nsight Systems that records "
                   "this driver's events (`make nsys` installs 2024.2, which does on CUDA 13; `python -m nsys_transfer.profiling "
                   "where` compares yours with the driver; NSYS=/path/to/nsys selects one)")
        return [ctx.finding(self.id, 0, "the capture", integ.get("evidence", "the capture lost CUDA events"), fix,
                            severity="high")]


class InputBound:
    """The GPU idles while the launching thread is blocked waiting for other threads or processes to hand it data, or
    while the DataLoader's pin-memory thread waits for batches its workers are still making."""
    id = "input-bound"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "input")
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        by_subject = rows.groupby(rows["subject"].fillna(""))["idle_ns"].sum().sort_values(ascending=False)
        calls = _calls_of(ctx, "input_calls")
        starved = sum(d.get("loader_starved_ns", 0) for d in _devices(ctx).values())
        workers = ctx.program.get("dataloader_workers") or {}
        parts = []
        if calls:
            parts.append(f"the launching thread was blocked waiting ({_calls_text(calls)})")
        if starved:
            parts.append(f"for {_ms(starved)} the DataLoader's pin-memory thread waited for batches its worker "
                         "processes were still making (the launching thread's own wait is a lock nsys does not record)")
        ranged = [(k, v) for k, v in by_subject.items() if k and k != "DataLoader"]
        if ranged:
            parts.append("the thread was inside " + ", ".join(f"'{k}' ({_ms(v)})" for k, v in ranged[:2]))
        producers = (f"; producers in the trace: {workers['threads']} DataLoader worker threads (pt_data_worker) in "
                     f"{workers['processes']} processes" if workers.get("threads") else "")
        ev = (f"the GPU sat idle {_ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) waiting for input: "
              + "; ".join(parts) + producers)
        subject = by_subject.index[0] or next(iter(calls), None)
        return [ctx.finding(self.id, impact, subject, ev, self._fix(ctx, subject, workers))]

    @staticmethod
    def _fix(ctx: Context, subject, workers) -> str:
        if subject in LIBRARY_RANGE_FIXES:
            return LIBRARY_RANGE_FIXES[subject]
        if ctx.program.get("toolkit") and subject in RANGE_FIXES:
            text, stage = RANGE_FIXES[subject]
            return ctx.advice(text, text, stage)
        if workers.get("threads"):
            return (f"the DataLoader's worker processes ({workers['processes']}) do not produce batches as fast as the GPU "
                    "consumes them: raise num_workers (up to the idle cores), keep persistent_workers=True and "
                    "prefetch_factor >= 2, and make each sample cheaper (decode and resize on the GPU, e.g. "
                    "torchvision.io.decode_jpeg(..., device='cuda') or NVIDIA DALI, or pre-resized data)")
        return ctx.advice("load input in DataLoader worker processes (num_workers > 0, pin_memory=True) so the next batch "
                          "is ready while the GPU computes, or produce it ahead on more threads with a deeper queue",
                          "the thread waits for another thread or process to hand it data: produce input ahead (more "
                          "producers, a deeper queue) and overlap loading with GPU work (double-buffered "
                          "cudaMemcpyAsync on a second stream)")


class GpuIdleCpuBound:
    """Long GPU idle gaps while the launching thread was busy on the CPU: inside the deepest user NVTX range (one
    finding per range), or outside any range."""
    id = "gpu-idle-cpu-bound"
    min_share = 0.005  # of the window: below this a range is noise

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        out, win = [], ctx.gpu_time_ns()
        rows = pd.concat([_idle_of(ctx, "cpu-range"), _idle_of(ctx, "cpu")])
        if rows.empty or not win:
            return []
        for subject, g in rows.groupby(rows["subject"].fillna(""), sort=False):
            ns = int(g["idle_ns"].sum())
            if ns < self.min_share * win:
                continue
            if subject and is_operator_range(subject):
                ev = (f"the GPU sat idle {_ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{_ms(ctx.summary['gaps']['threshold_ns'])} while the launching thread was inside the PyTorch op "
                      f"'{subject}' (outside any range of the program's own)")
                out.append(ctx.finding(self.id, ns, subject, ev, OPERATOR_FIXES.get(subject, (
                    f"the op '{subject}' keeps the CPU busy while the GPU waits: look for host-side work in it "
                    "(CPU tensors, data-dependent shapes) or move it off the step's path"))))
            elif subject:
                ev = (f"the GPU sat idle {_ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{_ms(ctx.summary['gaps']['threshold_ns'])} while the launching thread ran '{subject}'")
                out.append(ctx.finding(self.id, ns, subject, ev, self._range_fix(ctx, subject)))
            else:
                ev = (f"the GPU sat idle {_ms(ns)} ({ctx.share_of_window(ns)}{ctx.per_step(ns)}) in gaps of at least "
                      f"{_ms(ctx.summary['gaps']['threshold_ns'])} while the launching thread was busy outside any NVTX "
                      "range and not waiting for a CUDA call")
                out.append(ctx.finding(self.id, ns, None, ev, ctx.advice(
                    "mark the loop's phases with NVTX ranges (torch.cuda.nvtx.range) to see which CPU work the GPU "
                    "waits for, or sample the CPU (nsys --sample=cpu); then move that work off the launching thread or "
                    "overlap it with GPU work",
                    "mark the loop's phases with NVTX ranges (nvtxRangePush/Pop) to see which CPU work the GPU waits "
                    "for, or sample the CPU (nsys --sample=cpu); then move that work off the launching thread or "
                    "overlap it with GPU work")))
        return out

    @staticmethod
    def _range_fix(ctx: Context, name: str) -> str:
        if name in LIBRARY_RANGE_FIXES:
            return LIBRARY_RANGE_FIXES[name]
        if ctx.program.get("toolkit") and name in RANGE_FIXES:
            text, stage = RANGE_FIXES[name]
            return ctx.advice(text, text, stage)
        return ctx.advice(f"move the work in '{name}' off the launching thread (a worker process or thread fed by a "
                          "queue) or queue the next step's GPU work before it, so the GPU has work while it runs",
                          f"move the work in '{name}' off the launching thread or issue the next GPU work (async, on "
                          "a stream) before it, so the GPU has work while it runs")


class MemoryMappingInGaps:
    """mmap/munmap/fallocate (fresh allocations, shared-memory segments) while the GPU was idle."""
    id = "memory-mapping-in-gaps"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "mapping")
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        calls = _calls_of(ctx, "mapping_calls")
        ev = (f"while the GPU was idle the launching process spent {_ms(impact)} ({ctx.share_of_window(impact)}) in "
              f"memory-mapping calls ({_calls_text(calls, 4)})")
        return [ctx.finding(self.id, impact, next(iter(calls), None), ev, ctx.advice(
            "allocate output buffers once and reuse them instead of creating a tensor per step (a tensor sent through "
            "a torch.multiprocessing queue gets a new shared-memory segment each time: send an index into buffers "
            "shared once)",
            "allocate host buffers once and reuse them instead of allocating (and mapping) memory per iteration",
            "bufpool"))]


class HostSync:
    """The launching thread waits in a synchronising CUDA call; the GPU drains and then idles until the thread has
    issued the next work."""
    id = "host-sync"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "host-sync")
        info = ctx.summary.get("idle") or {}
        if rows.empty or not info.get("sync_calls"):
            return []
        setup = ctx.summary["steps"].get("setup") or {}
        impact, n = int(rows["idle_ns"].sum()), int(setup.get("sync_calls_in_steps", info["sync_calls"]))
        names = ctx.tables.get("sync_names", pd.Series(dtype="int64"))
        top = ", ".join(f"{_api(k)} x{v}" for k, v in names.head(3).items()) if len(names) else f"{n} calls"
        steps = ctx.steps()
        per = f" ({n / steps:.0f} per step)" if steps else ""
        where = " inside the steps" if setup else ""
        before = (f" ({setup['sync_calls']:,} more before the first step are set-up: model.to(device), warm-up)"
                  if setup.get("sync_calls") else "")
        ev = (f"{n} synchronising calls on the launching thread{where}{per}: {top}{before}; blocked "
              f"{_ms(info['sync_blocked_ns'])} in them, and the GPU then sat idle {_ms(impact)} "
              f"({ctx.share_of_window(impact)}) until the next work arrived")
        subject = _api(names.index[0]) if len(names) else None
        return [ctx.finding(self.id, impact, subject, ev, ctx.advice(
            "each sync drains the GPU's queue, then the GPU waits while Python issues the next work: remove per-step "
            "reads of GPU values (.item(), .cpu(), .tolist(), print or `if` on a tensor, torch.nonzero / boolean "
            "indexing); keep them on the GPU and read them every N steps, or copy with non_blocking=True into pinned "
            "memory and wait on a CUDA event only when the value is needed",
            "each sync drains the GPU's queue, then the GPU waits while the host issues the next work: drop "
            "cudaDeviceSynchronize/cudaStreamSynchronize and synchronous cudaMemcpy from the loop; use cudaMemcpyAsync "
            "into pinned memory and wait on an event only when the data is needed", "async", fix="scalars")
            if ctx.program.get("framework") != "openacc" else
            "each compute region waits for the GPU before the host launches the next: add async(n) clauses to the "
            "parallel/kernels regions and data updates, and one `!$acc wait` (or #pragma acc wait) where the host needs "
            "the results, e.g. once per time step")]


class LaunchBound:
    """The GPU mostly idle in short gaps between many short kernels while the launching thread issues them."""
    id = "launch-bound"
    # a launch costs the host 5-50 us (PyTorch eager: its op dispatch too): a median kernel longer than this keeps
    # the queue ahead of the host, and short gaps between such kernels are not a launch problem. Launch-bound traces
    # here: median 1.4-25 us (hf generate, Lightning, cuDF, CloverLeaf); the rest 200 us to 136 ms.
    short_kernel_ns = 50_000

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "launch")
        k = ctx.summary["kernels"]
        if rows.empty or not k["count"] or (k["median_ns"] or 0) > self.short_kernel_ns:
            return []
        impact = int(rows["idle_ns"].sum())
        info = ctx.summary.get("idle") or {}
        gaps = sum(d.get("short_idle_intervals", 0) for d in _devices(ctx).values())
        steps = ctx.steps()
        per = f" ({k['count'] / steps:,.0f} per step)" if steps else ""
        calls = info.get("launch_calls") or 0
        launch = (f"; the launching thread made {calls:,} launch calls ({_us(info['launch_api_ns'] / calls)} each)"
                  if calls else "")
        ev = (f"the GPU sat idle {_ms(impact)} ({ctx.share_of_window(impact)}) in {gaps:,} gaps shorter than "
              f"{_ms(ctx.summary['gaps']['threshold_ns'])} between kernels: {k['count']:,} kernels{per}, median "
              f"{_us(k['median_ns'] or 0)}{launch}")
        return [ctx.finding(self.id, impact, "kernel launches", ev, ctx.advice(
            "the kernels are too short for the CPU to keep the GPU fed: capture the step in a CUDA graph "
            "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), fuse ops with torch.compile, or give each "
            "kernel more work (a larger batch)",
            "the kernels are too short for the host to keep the GPU fed: launch the loop as a CUDA graph "
            "(stream capture + cudaGraphLaunch), fuse kernels, or give each kernel more work (larger batches)"))]


class HostSleep:
    """GPU idle while the launching thread sleeps (time.sleep, nanosleep): it waits by choice or polls, it is not
    computing, so moving CPU work is not the fix; not sleeping is (or having what it waits for ready)."""
    id = "host-sleep"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "sleep")
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        by = rows.groupby(rows["subject"].fillna(""))["idle_ns"].sum().sort_values(ascending=False)
        where = f" inside '{by.index[0]}'" if by.index[0] else ""
        ev = (f"the GPU sat idle {_ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) while the launching "
              f"thread slept{where} (off the CPU: in a sleep call, or switched out by the scheduler outside any call "
              "that says why; not computing)")
        return [ctx.finding(self.id, impact, by.index[0] or None, ev, ctx.advice(
            "the thread waits instead of issuing GPU work: if it sleeps to wait for something (weights loaded from "
            "disk, a file, another process), keep that resident or prefetch it on a background thread before it is "
            "needed; if it polls, wait on an event or a queue instead; queue the next GPU work before any wait",
            "the thread waits instead of issuing GPU work: prefetch what it waits for on another thread, replace "
            "sleep-polling with an event or condition variable, and queue the next GPU work before any wait"))]


class CommWait:
    """GPU idle while the launching thread waits in communication (MPI calls, ranges named after them or after
    collectives): a rank blocked on its peers is not busy, and the fix is overlap, not moving CPU work."""
    id = "comm-wait"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = _idle_of(ctx, "comm-wait")
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        by = rows.groupby(rows["subject"].fillna("?"))["idle_ns"].sum().sort_values(ascending=False)
        inside = ", ".join(f"{name} {_ms(ns)}" for name, ns in by.head(4).items())
        ev = (f"the GPU sat idle {_ms(impact)} ({ctx.share_of_window(impact)}{ctx.per_step(impact)}) while the launching "
              f"thread waited in communication ({inside})")
        return [ctx.finding(self.id, impact, str(by.index[0]), ev, ctx.advice(
            "overlap communication with compute: start the collective asynchronously (torch.distributed with "
            "async_op=True, NCCL on its own stream) and wait on it only when its result is needed; with MPI, post "
            "MPI_Isend/MPI_Irecv before the next GPU work and MPI_Wait after it, and pass device buffers to a CUDA-aware "
            "MPI instead of staging them through the host",
            "overlap communication with compute: post MPI_Isend/MPI_Irecv (or start the NCCL collective on its own "
            "stream) before the next GPU work and wait after it; pass device buffers to a CUDA-aware MPI instead of "
            "staging them through host copies"))]


class UnifiedMemory:
    """Managed memory moved on demand: every page fault stalls a kernel (or the host thread) while the driver moves
    the page. Impact: the GPU time the on-demand migrations span; prefetched migrations cost nothing here."""
    id = "unified-memory"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        u = ctx.summary["memcpy"].get("unified")
        od = (u or {}).get("on_demand") or {}
        if not od.get("count"):
            return []
        dirs = ", ".join(f"{label} {u[k]['on_demand']:,}" for k, label in (("htod", "to the GPU"), ("dtoh", "to the host"),
                                                                          ("dtod", "between GPUs"))
                         if u.get(k, {}).get("on_demand"))
        ev = (f"{od['count']:,} unified-memory migrations ({dirs}) moved {_gb(od['bytes'])} on demand, "
              f"{_size(od['median_bytes'])} at a time (the median), over {_ms(od['gpu_ns'])} of GPU time "
              f"({ctx.share_of_window(od['gpu_ns'])}); kernels ran during {_ms(od['kernel_overlap_ns'])} of it, "
              "stalled on each page fault" + ("" if u["cause_recorded"] else " (the export records no causes: "
                                               "every migration is taken as on demand)"))
        return [ctx.finding(self.id, od["gpu_ns"], "managed memory", ev, ctx.advice(
            "managed tensors migrate page by page on first touch: keep the model's tensors in device memory "
            "(.to('cuda')) and bring results back with .to('cpu', non_blocking=True) into pinned buffers; where managed "
            "memory stays, prefetch it ahead of use (cudaMemPrefetchAsync to the GPU before the step, to the host before "
            "the CPU reads it) and set cudaMemAdviseSetPreferredLocation / SetReadMostly",
            "prefetch managed memory ahead of use (cudaMemPrefetchAsync to the GPU before the kernels, to the host "
            "(cudaCpuDeviceId) before the CPU reads it) and advise it (cudaMemAdviseSetPreferredLocation, "
            "SetReadMostly for inputs), or use explicit cudaMemcpyAsync between device memory and pinned host "
            "buffers"))]


class PageableMemcpy:
    """Large copies to or from pageable host memory: staged through a driver buffer, slower, never truly async."""
    id = "pageable-memcpy"
    fresh_gbps = 4.0        # below this a DtoH copy into pageable memory is paying page faults on fresh pages
    pageable_share = 0.25   # reused pageable memory runs at about a quarter of the link (H200: 13.8 of 55 GB/s)

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        out = []
        for kind, host_col in (("DtoH", "dst_kind"), ("HtoD", "src_kind")):
            d = big_copies(ctx.copies, kind)
            d = d[d["bytes"] >= MIN_PROBE_BYTES] if len(d) else d
            pg = d[d[host_col] == "Pageable"] if len(d) else d
            if len(pg) and pg["duration_ns"].sum() > 0:  # zero-length copies (an odd export) have no speed
                out.append(self._finding(ctx, kind, d, pg))
        return out

    def _finding(self, ctx: Context, kind: str, d: pd.DataFrame, pg: pd.DataFrame) -> Finding:
        dur, nbytes = int(pg["duration_ns"].sum()), int(pg["bytes"].sum())
        speed = gbps(nbytes, dur) if dur else 0.0
        link = ctx.link_gbps or speed
        ev = (f"{len(pg)} of {len(d)} {kind} copies ({_gb(pg['bytes'].mean())} each) "
              f"{'into' if kind == 'DtoH' else 'from'} pageable host memory at {speed:.1f} GB/s{ctx.link_pct(speed)}"
              f"{_left_out(ctx, kind, d)}")
        if kind == "HtoD":
            return ctx.finding(self.id, dur - nbytes / link, kind, ev, ctx.advice(
                "pin the input (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy it with "
                ".to(device, non_blocking=True), ideally on a side stream while the previous batch computes",
                "allocate the host buffers with cudaMallocHost (or cudaHostRegister them) and copy with "
                "cudaMemcpyAsync on a second stream", "baseline", fix="input"))
        if speed < self.fresh_gbps:
            ev += "; that rate means every copy lands in freshly allocated memory and pays its page faults"
            return ctx.finding(self.id, dur - nbytes / (self.pageable_share * link), kind, ev, ctx.advice(
                "copy into output buffers allocated once and reused (out.copy_(t) instead of a fresh t.cpu() per step), "
                "then pin them", "reuse host buffers allocated once (cudaMallocHost) instead of new memory per copy",
                "bufpool", fix="output"))
        n_async = int((pg["sync"] == False).sum())  # noqa: E712
        compute = ctx.summary.get("memcpy", {}).get("compute_stream")  # KernelDigest.compute_stream of every kernel
        side = compute is not None and bool((pg["stream"] != compute).all())
        if n_async:
            ev += (f"; {n_async} were issued asynchronously yet {int((pg['blocking'] == True).sum())} held the calling "  # noqa: E712
                   f"thread until they finished{' although they run on a side stream' if side else ''}: the code asked "
                   "for pinned memory it does not have")
            fix = ctx.advice("a pin_memory=True tensor moved by share_memory_() (or any copy of it) is no longer pinned; "
                             "pin the shared buffers in place with torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0), "
                             "check tensor.is_pinned()",
                             "register the host buffers with cudaHostRegister (or allocate them with cudaMallocHost)",
                             "pinned", fix="output")
        else:
            fix = ctx.advice("pin the destination buffers (torch.empty(..., pin_memory=True), or cudaHostRegister for "
                             "shared memory) and copy with non_blocking=True, then wait on a CUDA event per buffer",
                             "allocate the host buffers with cudaMallocHost and copy with cudaMemcpyAsync, then wait on "
                             "an event", "async", fix="output")
        # pinned, an async copy on a side stream hides under compute; on the compute stream it only gets faster
        saving = dur - int(pg["overlap_ns"].sum()) if side and n_async else dur - nbytes / link
        return ctx.finding(self.id, saving, kind, ev, fix)


class SyncMemcpy:
    """Large DtoH copies into pinned memory that the issuing thread waited for (pageable ones block anyway and are
    pageable-memcpy's)."""
    id = "sync-memcpy"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        d = big_copies(ctx.copies, "DtoH")
        s = d[(d["sync"] == True) & (d["dst_kind"] == "Pinned") & (d["bytes"] >= MIN_PROBE_BYTES)] if len(d) else d  # noqa: E712
        if s.empty:
            return []
        wait = int((s["api_end_ns"] - s["api_start_ns"]).sum())
        ev = (f"{len(s)} of {len(d)} DtoH copies into pinned memory were waited for by the thread that issued them "
              f"({_ms(wait / len(s))} per copy inside the copy call and its synchronize){_left_out(ctx, 'DtoH', d)}")
        return [ctx.finding(self.id, wait, "DtoH", ev, ctx.advice(
            "copy with non_blocking=True, record a CUDA event per buffer and read the buffer once the event has "
            "fired (event.query() or a monitor thread), so the thread launches the next step meanwhile",
            "use cudaMemcpyAsync and cudaEventRecord, and wait on the event only when the data is needed", "async",
            fix="output"))]


class NoCopyComputeOverlap:
    """Asynchronously issued DtoH copies that never run while kernels do, because they share the compute stream."""
    id = "no-copy-compute-overlap"
    min_overlap = 0.10

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        d = big_copies(ctx.copies, "DtoH")
        d = d[(d["sync"] == False) & (d["bytes"] >= MIN_PROBE_BYTES)] if len(d) else d  # noqa: E712
        compute = ctx.summary["memcpy"].get("compute_stream")
        if d.empty or compute is None:
            return []
        overlap = d["overlap_ns"].sum() / max(d["duration_ns"].sum(), 1)
        on_compute = float((d["stream"] == compute).mean())
        if overlap >= self.min_overlap or on_compute < 0.5:
            return []
        ev = (f"{len(d)} asynchronous DtoH copies ({_ms(d['duration_ns'].sum())}) overlapped kernels for "
              f"{100 * overlap:.0f}% of their time; {100 * on_compute:.0f}% of them ran on the compute stream {compute}"
              f"{_left_out(ctx, 'DtoH', d)}")
        return [ctx.finding(self.id, int(d["duration_ns"].sum() - d["overlap_ns"].sum()), "DtoH", ev, ctx.advice(
            "issue the copy on its own stream (copy_stream.wait_stream(torch.cuda.current_stream()), then "
            "out.copy_(t, non_blocking=True) under torch.cuda.stream(copy_stream)) so it overlaps the next step's "
            "compute; keep t alive for it with t.record_stream(copy_stream)",
            "issue the copies on a second cudaStream_t, ordered after the compute by cudaStreamWaitEvent, so they "
            "overlap the next iteration's kernels", "streams", fix="output"))]


class WarmupInCapture:
    """The first step is many times slower than the others: warm-up (cuDNN algorithm choice, lazy module loading,
    allocator growth) is inside the capture and inflates every finding above."""
    id = "warmup-in-capture"
    ratio = 2.0          # first step against the median of the others
    min_share = 0.05     # of the window

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        st = ctx.tables.get("steps", pd.DataFrame())
        if len(st) < 3:
            return []
        first, rest = float(st["duration_ns"].iloc[0]), float(st["duration_ns"].iloc[1:].median())
        excess = first - rest
        if first < self.ratio * rest or excess < self.min_share * ctx.window_ns():
            return []
        return [ctx.finding(self.id, 0, str(st["name"].iloc[0]),
                            f"the first step took {_ms(first)}, {first / rest:.1f} x the median of the others "
                            f"({_ms(rest)}): warm-up is inside the capture, and {_ms(excess)} of the idle time above "
                            "belongs to it", "capture the steady state: start the capture after a few steps "
                            "(torch.cuda.profiler.start() with nsys --capture-range=cudaProfilerApi), or analyse from "
                            "the second step on: --steps 1:", severity="info")]


class ShortCapture:
    """Fewer captured steps than the pipeline depth: every buffer starts free, so back-pressure cannot show."""
    id = "short-capture"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        n = ctx.steps()
        if not ctx.program.get("toolkit") or n == 0 or n >= ctx.pipeline_depth or \
                ctx.summary["memcpy"]["dtoh"]["count"] == 0:
            return []
        return [ctx.finding(self.id, 0, "the capture", f"{n} steps captured, fewer than the pipeline depth of "
                            f"{ctx.pipeline_depth} (output buffers): the capture starts with every buffer free, so it "
                            "shows no back-pressure from the output workers",
                            f"capture at least {ctx.pipeline_depth + 2} steps for steady state (make profile "
                            f"STAGE=... STEPS={ctx.pipeline_depth + 2}); take throughput from `make bench`",
                            severity="info")]


class GpuBound:
    """The kernels fill the GPU: what limits the program is its GPU work itself, named by its top kernels (their
    precision and library where the names say them), whatever transfer findings stand beside it."""
    id = "gpu-bound"
    min_compute = 0.8  # of the window, on average over the GPUs: kernels running this much of the time

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        g = ctx.summary.get("gpu") or {}
        if (g.get("compute_utilization") or 0) < self.min_compute or not ctx.summary["kernels"]["top"]:
            return []
        top = ctx.summary["kernels"]["top"][:3]
        named = "; ".join(f"{r['shown_name']} {r['pct']:.0f}%" + "".join(f", {x}" for x in (r["precision"], r["library"])
                                                                        if x) for r in top)
        ev = f"kernels ran {g['compute_utilization']:.0%} of the window; by time: {named}"
        fp64 = top[0]["precision"] == "FP64"
        return [ctx.finding(self.id, g["compute_ns"], str(top[0]["shown_name"]), ev, ctx.advice(
            ("the top kernel computes in FP64: if the model allows, run it in FP32/TF32 or BF16 on the tensor cores; "
             if fp64 else "") + "less GPU work per result is the lever now: bf16/fp16 autocast "
            "(torch.autocast('cuda', torch.bfloat16)) or TF32 matmuls (torch.backends.cuda.matmul.allow_tf32), "
            "channels_last for convolutions, torch.compile to fuse the elementwise kernels, a larger batch where the "
            "GPU is not yet full",
            ("the top kernel computes in FP64: where the algorithm allows, FP32/TF32 or lower precision on the tensor "
             "cores is several times faster; " if fp64 else "") + "less GPU work per result is the lever now: lower "
            "precision, tensor-core kernels (cuBLAS/cuDNN math modes), fused kernels, fewer FLOPs"))]


class NvtxMissing:
    """No NVTX ranges: idle time cannot be tied to the program's phases."""
    id = "nvtx-missing"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        if ctx.summary["nvtx"]["count"]:
            return []
        return [ctx.finding(self.id, 0, "the capture", "the trace has no NVTX ranges, so idle GPU time cannot be tied "
                            "to the program's phases", ctx.advice(
                                "wrap each step and its phases in NVTX ranges (torch.cuda.nvtx.range(...) or "
                                "nvtx.annotate) and trace with --trace=cuda,nvtx,osrt",
                                "wrap each iteration and its phases in NVTX ranges (nvtxRangePushA/nvtxRangePop) and "
                                "trace with --trace=cuda,nvtx,osrt"), severity="info")]


RULES = [IncompleteTrace(), InputBound(), CommWait(), HostSleep(), GpuIdleCpuBound(), MemoryMappingInGaps(), HostSync(), LaunchBound(),
         UnifiedMemory(), PageableMemcpy(), SyncMemcpy(), NoCopyComputeOverlap(), GpuBound(), WarmupInCapture(),
         ShortCapture(), NvtxMissing()]


def diagnose(ctx: Context) -> list[dict]:
    """Every rule's findings: capture-trust notes first, then by impact, largest first. A finding that costs less than
    NOISE_SHARE of the window is dropped: nobody fixes 0.0 ms."""
    floor = NOISE_SHARE * ctx.gpu_time_ns()
    found = [(getattr(rule, "first", False), f) for rule in RULES for f in rule.check(ctx)
             if f.severity == "info" or getattr(rule, "first", False) or f.impact_ns >= floor]
    found.sort(key=lambda pf: (not pf[0], pf[1].severity == "info", -pf[1].impact_ns))
    return [f.as_dict() for _, f in found]
