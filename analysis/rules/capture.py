"""Rules about the capture itself: did the program finish (FailedRun), is it whole (IncompleteTrace), does it hold warm-up (WarmupInCapture), is it long
enough (ShortCapture), does it hold NVTX ranges (NvtxMissing)."""
from __future__ import annotations

from nsys_transfer.nsys_core.nsys_messages import CPU_SAMPLES

from nsys_transfer.analysis.rules.base import Finding, Context, Rule, ms
from nsys_transfer.analysis.rules.facts import ProgramEnd


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
    suggests = "re-capture with an nsys that supports the driver"
    first = True

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        integ = ctx.facts.integrity
        if integ.verdict not in ("lossy", "doubtful"):
            return []
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
            fix = ("do not trust the GPU figures of this trace: capture it again with an Nsight Systems that records "
                   "this driver's events (`make nsys` installs 2024.2, which does on CUDA 13; `python -m nsys_transfer.profiling "
                   "where` compares yours with the driver; NSYS=/path/to/nsys selects one)")
        return [ctx.finding(self.id, 0, "the capture", integ.evidence, fix,
                            severity="high")]


class WarmupInCapture(Rule[Context]):
    """The first step is many times slower than the others: warm-up (cuDNN algorithm choice, lazy module loading,
    allocator growth) is inside the capture and inflates every finding above."""
    id = "warmup-in-capture"
    fires_when = ("the first of at least 3 steps takes >= {rule.ratio:g} x the median of the others "
                  "(`WarmupInCapture.ratio`) and its excess is >= {rule.min_share:.0%} of the window (`min_share`) "
                  "(info; subject: the first step)")
    suggests = ("start the capture after a few steps (`torch.cuda.profiler.start()` with nsys "
                "`--capture-range=cudaProfilerApi`), or `--steps 1:`")
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
        if ctx.facts.gpu is None:  # no GPU work: no idle time, no --steps (a GPU window), no CUDA profiler API
            return [ctx.finding(self.id, 0, str(st["name"].iloc[0]), f"{said}, and {ms(excess)} of the steps' time "
                                "belongs to it", "capture the steady state: start the capture after the warm-up "
                                "(nsys --delay=SECONDS), or time the program from its second step on",
                                severity="info")]
        start = ("torch.cuda.profiler.start()" if ctx.pytorch else "cudaProfilerStart()")
        return [ctx.finding(self.id, 0, str(st["name"].iloc[0]), f"{said}, and {ms(excess)} of the idle time above "
                            "belongs to it", f"capture the steady state: start the capture after a few steps ({start} "
                            "with nsys --capture-range=cudaProfilerApi), or analyse from the second step on: "
                            "--steps 1:", severity="info")]


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
        cpu_only = ctx.facts.cpu_only
        if cpu_only:  # no GPU work: no idle GPU time to explain, and a Python program is marked from Python
            how = ("with NVTX ranges from Python (pip install nvtx; `with nvtx.annotate(\"step\"):` around each "
                   "step, or torch.cuda.nvtx.range, which needs no GPU either)" if cpu_only.python or ctx.pytorch else
                   "with NVTX ranges (nvtxRangePushA/nvtxRangePop)")
            return [ctx.finding(self.id, 0, "the capture", "the trace has no NVTX ranges, so the program's time "
                                "cannot be split into its steps and phases", f"mark each step and its phases {how} "
                                "and trace with --trace=nvtx,osrt (add cuda where a GPU is used)", severity="info")]
        return [ctx.finding(self.id, 0, "the capture", "the trace has no NVTX ranges, so idle GPU time cannot be tied "
                            "to the program's phases", ctx.advice(
                                "wrap each step and its phases in NVTX ranges (torch.cuda.nvtx.range(...) or "
                                "nvtx.annotate) and trace with --trace=cuda,nvtx,osrt",
                                "wrap each iteration and its phases in NVTX ranges (nvtxRangePushA/nvtxRangePop) and "
                                "trace with --trace=cuda,nvtx,osrt"), severity="info")]
