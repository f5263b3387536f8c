"""The output side sets the pace: a program on nsys_transfer.fixes.OutputPipeline whose launching thread waits for
a free output buffer (inside `copy to CPU`: back-pressure from process()) or for the workers to drain. That is
neither input nor CPU work on the loop: the workers' post-processing is slower than the GPU."""
from __future__ import annotations

import pandas as pd

from ...nsys_core.contracts import COPY_TO_CPU, DRAIN_OUTPUTS, PIPELINE_DRAIN, QUEUE_OUTPUT
from ...nsys_core.contracts import pipeline_pace

from ..common.idle_causes import DRAIN, INPUT
from .advice import RANGE_FIXES
from ..replay import fixes
from ..replay.fixes import Fix, NoFigure
from .base import MEDIUM_SHARE, Context, Finding, Rule, idle_of, ms

PIPELINE_RANGES = (COPY_TO_CPU, QUEUE_OUTPUT, PIPELINE_DRAIN)  # fixes.OutputPipeline's own ranges
DRAIN_RANGES = (PIPELINE_DRAIN, DRAIN_OUTPUTS)  # a wait inside these is for the output workers, in any program


def uses_pipeline(ctx: Context) -> bool:
    """Whether the traced program hands its outputs to the fixes library's OutputPipeline (its drain range is in the
    trace, or its two submit() ranges are: a capture that ends before the pipeline closes has no drain), and is not
    this toolkit's own stage (whose ranges of the same names have their own advice)."""
    names = {r.name for r in ctx.facts.nvtx_ranges}
    return (PIPELINE_DRAIN in names or {COPY_TO_CPU, QUEUE_OUTPUT} <= names) and not ctx.program.toolkit


def pipeline_waits(ctx: Context) -> pd.DataFrame:
    """The idle attribution's input rows that are the loop waiting on its output side: on its OutputPipeline's ranges
    (where it uses one), or inside a drain range (this toolkit's `drain outputs` too): never input time."""
    rows = idle_of(ctx, INPUT)
    ranges = PIPELINE_RANGES if uses_pipeline(ctx) else DRAIN_RANGES
    return rows[rows["subject"].isin(ranges)] if len(rows) else rows


def output_waits(ctx: Context) -> pd.DataFrame:
    """Every wait of the loop on its output side, by where it waited: pipeline_waits(), and the drain cause (waits
    after the last step, sections/idle.py) counted as the drain whatever range held it."""
    drain = idle_of(ctx, DRAIN)
    drain = drain.assign(subject=PIPELINE_DRAIN) if len(drain) else drain
    return pd.concat([pipeline_waits(ctx), drain]) if len(drain) else pipeline_waits(ctx)


TAIL_BATCHES = 3  # without the pipeline's pace in the trace: a drain longer than this many batches of GPU time is a
# backlog (the outputs fell behind), a shorter one the last batch's own post-processing


def pace_in_trace(ctx: Context) -> tuple[int, float] | None:
    """(workers, ms of work a batch) the pipeline left in the trace at its drain (fixes.OutputPipeline); None in a
    trace without it (an older library)."""
    paces = [p for p in map(pipeline_pace, ctx.facts.nvtx_names.astype(str)) if p]
    # a pool only grows (forked a few workers at a time): the mark with the most workers is its latest (of marks with
    # as many, any: each is the run's average so far)
    return max(paces, key=lambda p: p[0]) if paces else None


class OutputBound(Rule[Context]):
    """The GPU idles while the loop waits for the OutputPipeline's workers: free buffers (back-pressure in submit())
    or the drain; named with the GPU's pace against what the workers can take, and the knobs that move the latter.
    Workers that keep up leave only the last outputs' tail at the end: a low finding, not the pace."""
    id = "output-bound"
    fires_when = ("idle cause `input` inside the fixes library's OutputPipeline ranges (`copy to CPU`: back-pressure "
                  "in submit(), `output pipeline: drain`) of a program that uses it; evidence: the GPU's pace "
                  "(batches per second of GPU time) against the outputs' over the window and what the workers can "
                  "take (the pipeline's `output pipeline: N workers, M ms of work a batch` range); workers that keep "
                  "up (or, without that range, a drain under 3 batches of GPU time and no back-pressure): severity "
                  "low, subject `OutputPipeline drain`, the last outputs' tail (`analysis/rules/output.py`)")
    suggests = "more workers, `split=`, less CPU work per output (the reduction on the GPU before submit())"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = output_waits(ctx)
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        by = rows.groupby(rows["subject"].replace({DRAIN_OUTPUTS: PIPELINE_DRAIN}))["idle_ns"].sum()
        submits = next((r.count for r in ctx.facts.nvtx_ranges if r.name == COPY_TO_CPU), 0)
        busy_ns = (ctx.facts.gpu.busy_ns if ctx.facts.gpu else 0) or 0
        gpu_rate = submits / (busy_ns / 1e9) if submits and busy_ns else None
        pace, can = self._rates(ctx, submits, busy_ns, gpu_rate)
        behind = self._behind(ctx, by, can, gpu_rate, busy_ns / submits if submits else None)
        waits = ", ".join(f"{ms(by[k])} {what}" for k, what in ((COPY_TO_CPU, "for a free output buffer in submit()"),
                                                                (QUEUE_OUTPUT, "handing a batch over"),
                                                                (PIPELINE_DRAIN, "for the workers to drain"))
                          if k in by)
        pipeline = uses_pipeline(ctx)
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}) while the loop waited on its "
              f"{'OutputPipeline' if pipeline else 'output side'}: {waits}{pace}")
        if not behind:
            return [ctx.finding(self.id, impact, "OutputPipeline drain" if pipeline else "output drain",
                                ev + ": the workers keep up, and this is the last outputs' post-processing after "
                                "the GPU's last batch, paid once a run",
                                "nothing to move in the steady state: a longer run spreads the tail; a shorter one "
                                "hides it only with less CPU work per output", severity="low")]
        return [ctx.finding(self.id, impact, "OutputPipeline workers" if pipeline else "output workers", ev,
                            self._fix(ctx, pipeline))]

    @staticmethod
    def _fix(ctx: Context, pipeline: bool) -> str:
        """The output side's knobs: the OutputPipeline's, this toolkit's stages', or any program's."""
        if pipeline:
            return ("the output side sets the pace: process() in the workers is slower than the GPU: give the "
                    "pipeline more workers (workers=N or workers=\"auto\", up to the idle cores), split= to "
                    "share each batch across them, or less CPU work per output (the argmax or reduction on "
                    "the GPU before submit(), a smaller dtype)")
        if ctx.program.toolkit:
            return RANGE_FIXES[DRAIN_OUTPUTS][0]
        return ctx.advice("the output side sets the pace: the post-processing after the GPU is slower than the GPU: "
                          "more output workers (up to the idle cores), or less CPU work per output (the argmax or "
                          "reduction on the GPU before the copy, a smaller dtype)",
                          "the output side sets the pace: the host's work on each result is slower than the GPU: "
                          "more host threads on it, or less host work per result (reduce on the GPU before the copy)",
                          fix="output")

    @staticmethod
    def _rates(ctx: Context, submits: int, busy_ns: int, gpu_rate: float | None) -> tuple[str, float | None]:
        """The evidence's rates (the GPU's, the outputs', what the workers can take) and the last, where known."""
        if not gpu_rate or not ctx.window_ns():
            return "", None
        out_rate = submits / (ctx.window_ns() / 1e9)
        text = (f"; the GPU's work for the {submits} batches submitted here took {ms(busy_ns)} ({gpu_rate:.1f} "
                f"batches/s of GPU time), while they went out at {out_rate:.1f} batches/s over the window")
        mark = pace_in_trace(ctx)
        if mark is None:
            return text, None
        workers, per_ms = mark
        can = workers / (per_ms / 1e3) if per_ms > 0 else None
        return (text + f"; {workers} workers at {per_ms:,.0f} ms of work a batch can take {can:.1f} batches/s"
                if can else text), can

    @staticmethod
    def _behind(ctx: Context, by: pd.Series, can: float | None, gpu_rate: float | None, gpu_ns_per_batch) -> bool:
        """Whether the outputs set the pace: the workers cannot take the GPU's rate (where the trace says what they
        can take), else a back-pressure of note or a drain of several batches' GPU time (a backlog)."""
        if can is not None and gpu_rate:
            return can < gpu_rate
        back = by.get(COPY_TO_CPU, 0) + by.get(QUEUE_OUTPUT, 0)
        drain = by.get(PIPELINE_DRAIN, 0)
        return back >= MEDIUM_SHARE * ctx.window_ns() or bool(gpu_ns_per_batch and
                                                               drain > TAIL_BATCHES * gpu_ns_per_batch)

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The workers keep up (more of them, or less work each): the loop's waits for them go (half at the low
        end)."""
        t = ctx.timeline
        if finding.severity == "low":
            return NoFigure("the last outputs' tail, paid once a run")
        if t is None or not t.wait_ns.any():
            return NoFigure("the replayed iterations hold none of the loop's waits for the workers")
        return fixes.remove(t.wait_ns, "the output workers keep up: the loop's waits for them go (half of them at "
                                       "the low end)", low_share=0.5)

