"""A capture without GPU work (a PyTorch program run on the CPU): no GPU time to explain, but the main thread's loop
and the lines of the program it spends its time at (sections/code_lines.py, the set-up before the loop apart). Each
costly line is a finding with the advice its role calls for (rules/code_advice.cpu_advice), so `nsys-transfer verify`
can say which of them a fix resolved."""
from __future__ import annotations

from .base import MEDIUM_SHARE, Context, Finding, Rule, ms, severity_of
from .code_advice import cpu_advice


class CpuHotspot(Rule[Context]):
    """The main thread's loop in a capture without GPU work: each of its costliest lines of the program that holds a
    share of note, with its role's advice (the share is of the loop's sampled time, the set-up before it left out)."""
    id = "cpu-hotspot"
    fires_when = ("a capture without GPU work whose Python stacks give a line of the program at least "
                  f"{MEDIUM_SHARE:.0%} of the main thread's loop (`code.cpu`, the set-up before the loop left out); "
                  "subject: the line (`main.py:31`); severity by that share")
    suggests = ("by the line's role: input into DataLoader workers, the per-element reads on whole batches, the "
                "array built once, disk writes to a thread pool, the model under inference_mode with more work a call")

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        code = ctx.code
        if ctx.facts.gpu is not None or ctx.facts.cpu_only is None or code is None or not code.cpu_ns:
            return []
        out = []
        for site in code.cpu:
            if site.ns < MEDIUM_SHARE * code.cpu_ns:
                continue
            evidence = f"the main thread spent {ms(site.ns)} of its loop's {ms(code.cpu_ns)} at {site.place} ({site.role})"
            if site.growth:
                evidence += (f", growing through the run: {site.growth[0]:,.1f} ms a visit at the start, "
                             f"{site.growth[1]:,.1f} ms at the end")
            # its share as the code section writes it (of the loop's sampled time, 3 digits): one value for one figure
            share = round(site.share, 3)
            out.append(Finding(self.id, severity_of(share), int(site.ns), share, site.place, evidence,
                               cpu_advice(site, code.cores), line=site))
        return out
