"""The output side sets the pace: a program on nsys_transfer.fixes.OutputPipeline whose launching thread waits for
a free output buffer (inside `copy to CPU`: back-pressure from process()) or for the workers to drain. That is
neither input nor CPU work on the loop: the workers' post-processing is slower than the GPU."""
from __future__ import annotations

import pandas as pd

from nsys_transfer.nsys_core.contracts import COPY_TO_CPU, PIPELINE_DRAIN, QUEUE_OUTPUT

from nsys_transfer.analysis.rules.base import Context, Finding, idle_of, ms

PIPELINE_RANGES = (COPY_TO_CPU, QUEUE_OUTPUT, PIPELINE_DRAIN)  # fixes.OutputPipeline's own ranges


def uses_pipeline(ctx: Context) -> bool:
    """Whether the traced program hands its outputs to the fixes library's OutputPipeline (its drain range is in the
    trace), and is not this toolkit's own stage (whose ranges of the same names have their own advice)."""
    names = {r["name"] for r in ctx.summary["nvtx"]["ranges"]}
    return PIPELINE_DRAIN in names and not ctx.program.get("toolkit")


def pipeline_waits(ctx: Context) -> pd.DataFrame:
    """The idle attribution's input rows that are the loop waiting on its OutputPipeline (empty where it uses none)."""
    rows = idle_of(ctx, "input")
    if rows.empty or not uses_pipeline(ctx):
        return rows.iloc[0:0]
    return rows[rows["subject"].isin(PIPELINE_RANGES)]


class OutputBound:
    """The GPU idles while the loop waits for the OutputPipeline's workers: free buffers (back-pressure in submit())
    or the drain; named with the GPU's pace against the outputs' and the knobs that move the latter."""
    id = "output-bound"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        rows = pipeline_waits(ctx)
        if rows.empty:
            return []
        impact = int(rows["idle_ns"].sum())
        by = rows.groupby("subject")["idle_ns"].sum()
        submits = next((r["count"] for r in ctx.summary["nvtx"]["ranges"] if r["name"] == COPY_TO_CPU), 0)
        busy_ns = (ctx.summary.get("gpu") or {}).get("busy_ns") or 0
        pace = ""
        if submits and busy_ns and ctx.window_ns():
            gpu_rate, out_rate = submits / (busy_ns / 1e9), submits / (ctx.window_ns() / 1e9)
            pace = (f"; the GPU's work for the {submits} batches submitted here took {ms(busy_ns)} ({gpu_rate:.1f} "
                    f"batches/s of GPU time), while they went out at {out_rate:.1f} batches/s over the window")
        waits = ", ".join(f"{ms(by[k])} {what}" for k, what in ((COPY_TO_CPU, "for a free output buffer in submit()"),
                                                                (QUEUE_OUTPUT, "handing a batch over"),
                                                                (PIPELINE_DRAIN, "for the workers to drain"))
                          if k in by)
        ev = (f"the GPU sat idle {ms(impact)} ({ctx.share_of_window(impact)}) while the loop waited on its "
              f"OutputPipeline: {waits}{pace}")
        return [ctx.finding(self.id, impact, "OutputPipeline workers", ev,
                            "the output side sets the pace: process() in the workers is slower than the GPU: give the "
                            "pipeline more workers (workers=N, up to the idle cores), split= to share each batch "
                            "across them, or less CPU work per output (the argmax or reduction on the GPU before "
                            "submit(), a smaller dtype)")]
