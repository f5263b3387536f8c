"""Rules about the capture itself: did the program finish (FailedRun), is it whole (IncompleteTrace), does it hold
enough of the loop to judge it (TooLittleToJudge), does it hold warm-up (WarmupInCapture), is it long enough
(ShortCapture), does it hold NVTX ranges (NvtxMissing)."""
from __future__ import annotations

import re

from ...nsys_core.nsys_messages import CPU_SAMPLES

from .base import Finding, Context, Rule, ms
from .facts import ProgramEnd
from .terms import TORCH, terms


class FailedRun(Rule[Context]):
    """The program failed (a non-zero exit status in its run record, or a traceback that ended its stderr in the
    trace): its steps, throughput and findings are those of a run that did not finish, so this comes first."""
    id = "failed-run"
    fires_when = ("`trace.program_end.failed`: the program exited with a non-zero status (run record) or died of an "
                  "exception (its stderr in the trace) (0, high, first)")
    suggests = "fix the program's error and trace it again"
    first = True

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        end = ctx.facts.program_end
        if end is None or not end.failed:
            return []
        return [ctx.finding(self.id, 0, "the program", failed_run_evidence(end),
                            "fix the program's error, then trace it again: the figures of a failed run are not its "
                            "steady state (its last step may be the one it failed in)", severity="high")]


def failed_run_evidence(end: ProgramEnd) -> str:
    """How the program ended, in words: its status and error, and where that was read."""
    status = f"exited with status {end.exit_code}" if end.exit_code is not None else "failed"
    error = f" ({end.error})" if end.error else ""
    where = "its run record" if end.source == "run record" else "its error output, stored in the trace"
    return f"the program {status}{error}, says {where}"


class IncompleteTrace(Rule[Context]):
    """The capture lost a large part of its CUDA events, or nsys itself says it may have (verdict doubtful): every
    other figure is then in question, so this comes first."""
    id = "incomplete-trace"
    fires_when = ("`trace.integrity.verdict` is `lossy`: the capture lost CUDA events, or `doubtful`: nsys says it "
                  "may have (0, high, first)")
    suggests = ("re-capture with an nsys that supports the driver; a torch.profiler trace: fewer steps a trace "
                "(schedule's active, repeat=1), the profiler stopped normally")
    first = True

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        integ = ctx.facts.integrity
        if integ.verdict not in ("lossy", "doubtful"):
            return []
        said = terms(ctx.facts.profiler)
        if integ.verdict == "doubtful" and integ.doubted == (CPU_SAMPLES,):
            # only CPU samples lost, many of them: the lines and the gaps' CPU work are approximate, the rest stands
            return [ctx.finding(self.id, 0, "the capture", integ.evidence,
                                "read the program's lines and the CPU work in the gaps as approximate: nsys could not "
                                "keep up with its CPU sampling on this machine; capture again with fewer samples "
                                "(`--sample none` keeps the Python stacks, which name the lines) or on a less busy "
                                "machine", severity="medium")]
        if integ.verdict == "doubtful" and ctx.facts.cpu_only:  # no GPU: the CUDA profiler's range means nothing
            fix = ("do not trust the figures of this trace as whole: capture it again so that nsys records every "
                   "process to its end (let each traced process exit normally inside the capture, not by a kill or "
                   "os._exit); `analyze-trace --check` then says whether nsys still doubts it")
        elif integ.verdict == "doubtful":
            fix = ("do not trust the figures of this trace as whole: capture it again so that nsys records every "
                   "process to its end (let each traced process exit normally inside the capture, not by a kill or "
                   "os._exit; bound the capture with torch.cuda.profiler.start()/stop() and --capture-range="
                   "cudaProfilerApi rather than --duration), with an Nsight Systems that traces this driver "
                   "(`python -m nsys_transfer.profiling where`); `analyze-trace --check` then says whether nsys "
                   "still doubts it")
        elif integ.cut:
            fix = ("do not trust the figures near the edges: analyse the whole capture this slice was cut from, or "
                   "pass a --window (or --steps) well inside this one")
        else:
            fix = f"do not trust the GPU figures of this trace: {said.lost_events}"
        return [ctx.finding(self.id, 0, "the capture", integ.evidence, fix,
                            severity="high")]


PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")  # torch.profiler's mark of each step (prof.step())


class TooLittleToJudge(Rule[Context]):
    """The capture holds too little of the loop to judge it: a handful of short GPU operations (one kernel of 1.76 us in
    a 355 ms capture reads as "100% busy" over its window of 1.76 us), or one or two steps (no steady state to tell from
    the warm-up). It says so and how to record a useful one, in the recording profiler's terms; with too little GPU
    work it is the verdict and no other rule speaks (exclusive), with too few steps the other findings stay but get
    no compute advice (gpu-bound does not fire)."""
    id = "too-little-to-judge"
    first = True
    fires_when = ("fewer than {rule.min_gpu_ops} GPU operations busy less than {rule.min_busy_ns:,} ns in all in the "
                  "window (exclusive: no other finding), or 1-2 steps (steps found, or torch.profiler's ProfilerStep#N "
                  "ranges) (0, high, first)")
    suggests = ("record more of the loop: 5 steps or more past the warm-up (torch.profiler: schedule(wait=1, "
                "warmup=1, active=5, repeat=1) with prof.step())")
    min_gpu_ops = 20   # kernels and copies: fewer say nothing of a loop (capture_checks.MIN_EXPECTED_OPS likewise)
    min_busy_ns = 1_000_000  # ... unless they are long: a link probe's few big copies are the work to judge
    min_steps = 3      # steps needed to tell warm-up from the steady state (sections/steady.MIN_STEPS)

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        if ctx.facts.gpu is None or ctx.facts.cpu_only:
            return []
        ops, steps = gpu_ops(ctx), step_count(ctx)
        enough = terms(ctx.facts.profiler).enough
        if ops < self.min_gpu_ops and (ctx.facts.gpu.busy_ns or 0) < self.min_busy_ns:
            ev = (f"the window holds {ops} GPU operation{'s' if ops != 1 else ''} "
                  f"({_n(ctx.facts.kernels.count, 'kernel')}, {_n(len(ctx.copies), 'copy', 'copies')}) in "
                  f"{ms(ctx.window_ns())}: too "
                  "little GPU work to say what limits the loop (its busy share is that of a few operations)")
            return [ctx.finding(self.id, 0, GPU_WORK, ev, enough, severity="high")]
        if 0 < steps < self.min_steps:
            ev = (f"the capture holds {steps} step{'s' if steps != 1 else ''}: too few to tell the warm-up from the "
                  "steady state, so its figures may be the first steps' (no compute advice is given on them)")
            return [ctx.finding(self.id, 0, "steps", ev, enough, severity="high")]
        return []

    def excludes_rest(self, found: list[Finding]) -> bool:
        """With too little GPU work no other rule speaks; with too few steps the others still do."""
        return any(f.subject == GPU_WORK for f in found)


GPU_WORK = "GPU work"


def _n(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def gpu_ops(ctx: Context) -> int:
    """The GPU operations in the window: kernels and copies."""
    return ctx.facts.kernels.count + len(ctx.copies)


def step_count(ctx: Context) -> int:
    """The steps: those the analysis found, or torch.profiler's ProfilerStep#N ranges (a single one is no series the
    step detection takes, yet it is one step)."""
    if ctx.steps():
        return ctx.steps()
    return sum(r.count for r in ctx.facts.nvtx_ranges if PROFILER_STEP.match(r.name))


def too_little(ctx: Context) -> bool:
    """Whether TooLittleToJudge fires: the capture is no ground for compute advice."""
    return bool(TooLittleToJudge().check(ctx))


class WarmupInCapture(Rule[Context]):
    """The first step is many times slower than the others: warm-up (cuDNN algorithm choice, lazy module loading,
    allocator growth) is inside the capture and inflates every finding above."""
    id = "warmup-in-capture"
    fires_when = ("the first of at least 3 steps takes >= {rule.ratio:g} x the median of the others "
                  "(`WarmupInCapture.ratio`) and its excess is >= {rule.min_share:.0%} of the window (`min_share`) "
                  "(info; subject: the first step)")
    suggests = ("start the capture after a few steps (`torch.cuda.profiler.start()` with nsys "
                "`--capture-range=cudaProfilerApi`; torch.profiler: the schedule's wait and warmup), or `--steps 1:`")
    ratio = 2.0          # first step against the median of the others
    min_share = 0.05     # of the window

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        st = ctx.facts.step_rows
        if len(st) < 3:
            return []
        first, rest = float(st["duration_ns"].iloc[0]), float(st["duration_ns"].iloc[1:].median())
        excess = first - rest
        if first < self.ratio * rest or excess < self.min_share * ctx.window_ns():
            return []
        said = (f"the first step took {ms(first)}, {first / rest:.1f} x the median of the others ({ms(rest)}): "
                "warm-up is inside the capture")
        words = terms(ctx.facts.profiler)
        if ctx.facts.gpu is None:  # no GPU work: no idle time, no --steps (a GPU window), no CUDA profiler API
            return [ctx.finding(self.id, 0, str(st["name"].iloc[0]), f"{said}, and {ms(excess)} of the steps' time "
                                f"belongs to it", f"capture the steady state: {words.after_warmup_cpu}",
                                severity="info")]
        start = ("torch.cuda.profiler.start()" if ctx.pytorch else "cudaProfilerStart()")
        return [ctx.finding(self.id, 0, str(st["name"].iloc[0]), f"{said}, and {ms(excess)} of the idle time above "
                            "belongs to it", "capture the steady state: " + words.after_warmup.format(start=start),
                            severity="info")]


class ShortCapture(Rule[Context]):
    """Fewer captured steps than the pipeline depth: every buffer starts free, so back-pressure cannot show."""
    id = "short-capture"
    fires_when = "this toolkit's trace with fewer steps than `--pipeline-depth` (info)"
    suggests = "capture more steps"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        n = ctx.steps()
        if not ctx.program.toolkit or n == 0 or n >= ctx.pipeline_depth or ctx.facts.copies.dtoh_count == 0:
            return []
        return [ctx.finding(self.id, 0, "the capture", f"{n} steps captured, fewer than the pipeline depth of "
                            f"{ctx.pipeline_depth} (output buffers): the capture starts with every buffer free, so it "
                            "shows no back-pressure from the output workers",
                            f"capture at least {ctx.pipeline_depth + 2} steps for steady state (make profile "
                            f"STAGE=... STEPS={ctx.pipeline_depth + 2}); take throughput from `make bench`",
                            severity="info")]


class NvtxMissing(Rule[Context]):
    """No NVTX ranges: idle time cannot be tied to the program's phases."""
    id = "nvtx-missing"
    fires_when = "no NVTX ranges (info)"
    suggests = "add ranges"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        if ctx.facts.nvtx_count:
            return []
        cpu_only, words = ctx.facts.cpu_only, terms(ctx.facts.profiler)
        what = "record_function ranges" if ctx.facts.profiler == TORCH else "NVTX ranges"
        if cpu_only:  # no GPU work: no idle GPU time to explain, and a Python program is marked from Python
            how = words.ranges_cpu if cpu_only.python or ctx.pytorch or ctx.facts.profiler == TORCH else \
                "mark each step and its phases with NVTX ranges (nvtxRangePushA/nvtxRangePop) and trace with " \
                "--trace=nvtx,osrt (add cuda where a GPU is used)"
            return [ctx.finding(self.id, 0, "the capture", f"the trace has no {what}, so the program's time "
                                "cannot be split into its steps and phases", how, severity="info")]
        return [ctx.finding(self.id, 0, "the capture", f"the trace has no {what}, so idle GPU time cannot be tied "
                            "to the program's phases", ctx.advice(words.ranges, words.ranges_cuda), severity="info")]
