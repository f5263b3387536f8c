"""The human-readable summary of one analysis (text for the terminal). Pure: the typed document (Document) in, str
out."""
from __future__ import annotations

from collections.abc import Sequence, Set

from ..common.typed_json import ABSENT
from ..document import Document
from .formats import gbps, ms, pct, wrapped
from ..rules import facts, prediction
from ..rules.base import Finding
from ..rules.capture import failed_run_evidence
from ..rules.capture_checks import DOUBTFUL_PREFIX
from ..rules.diagnosis import verdict_of
from ..rules.prediction import Overall, Prediction
from ..sections.code_sites import CodePart, CodeSite, SetupLines
from ..sections.copies import CopyDirection, MemcpyPart
from ..sections.cpu import SetupBeforeSteps, StepsPart
from ..sections.gpu_part import GpuPart
from ..sections.kernels import KernelGraphs, KernelsPart
from ..sections.program_end import ProgramEnd
from ..sections.setup import SetupPart
from ..sections.trace_info import TraceInfo
from ..sections.unified import UnifiedMemory
from ..sections.window import Window


def _sync_split(m: CopyDirection) -> str:
    """"3 sync / 5 async", and how many no CUDA API row tells apart (a damaged or API-less export)."""
    unknown = m.count - m.sync - m.async_
    return f"{m.sync} sync / {m.async_} async" + (f" / {unknown} unknown (no CUDA API row)" if unknown else "")


SHOWN = ("high", "medium", "info")


def finding_lines(findings: Sequence[Finding], show_all: bool = False) -> list[str]:
    """High and medium findings (and capture notes) with their cost; how many lower ones there are."""
    L, hidden = [], 0
    for d in findings:
        if not show_all and d.severity not in SHOWN:
            hidden += 1
            continue
        cost = f" ({ms(d.impact_ns)}, {100 * d.impact_fraction:.0f}%)" if d.impact_ns else ""
        L.append(f"  [{d.severity}] {d.rule}{cost}: {d.evidence}")
        L += code_line(d.line)
        L.append(f"      -> {d.suggestion}")
        if d.prediction:
            L.append(f"      {d.prediction}")  # Prediction.__str__: what fixing it buys
    if hidden:
        L.append(f"  ({hidden} lower-impact finding{'s' if hidden > 1 else ''} not shown; --all shows them)")
    return L


def predicted_lines(predicted: Overall | None) -> list[str]:
    """What fixing every predicted finding together buys, and why the ranking by gain leads where it does."""
    if not predicted:
        return []
    L = []
    if predicted.all_fixed:
        L.append("all of them fixed: " + str(predicted.all_fixed).replace("fixing this: ", "", 1))
    if predicted.rank_note:
        L.append(f"ranked by what the fixes buy: {predicted.rank_note}")
    return L


def code_line(site: CodeSite | None, indent: str = "      ") -> list[str]:
    """`at main.py:31  for x, y in loader`, and the way the work is reached from it, where a finding has its line."""
    if not site:
        return []
    out = [f"{indent}at {site.place}  {site.code}  ({site.role}, {100 * site.share:.0f}% of the sampled time here)"]
    if len(site.path) > 1:
        out.append(f"{indent}   via " + " -> ".join(site.path))
    return out


def code_section_lines(code: CodePart | None, lined: Set[str] = frozenset()) -> list[str]:
    """Where a CPU-only capture's time went, line by line; or one line on why no finding names its line. lined: the
    places a finding shows with its path (not repeated here)."""
    if not code:
        return []
    if code.missing:
        return [f"program lines: {code.missing}"]
    if not code.cpu and not code.setup:
        return []
    out = _setup_lines(code.setup)
    loop = "in its loop" if code.setup else ""
    out.append(f"where the main thread's time went{' ' + loop if loop else ''}, line by line ({code.source}):")
    for site in code.cpu:
        out.append(f"  {ms(site.ns)} ({100 * site.share:.0f}%)  {site.place}  {site.code}  [{site.role}]")
        if site.growth:
            a, b = site.growth
            out.append(f"      growing: {a:,.1f} ms a call at the start of the run, {b:,.1f} ms at the end")
        if len(site.path) > 1 and site.place not in lined:
            out.append("      via " + " -> ".join(site.path))
    return out


def _setup_lines(setup: SetupLines | None) -> list[str]:
    """A CPU-only capture's set-up before its loop (imports, model construction), apart from the loop's lines."""
    if not setup:
        return []
    kinds = ", ".join(f"{k} {ms(v)}" for k, v in setup.by_kind.items() if v)
    out = [f"set-up before the loop (until {setup.until}; paid once a run, left out of the lines below): "
           f"{ms(setup.ns)}" + (f" ({kinds})" if kinds else "")]
    out += [f"  {ms(site.ns)}  {site.place}  {site.code}" for site in setup.lines]
    return out


def text_report(doc: Document, show_all: bool = False) -> str:
    """The analysis (one trace's document) as the plain-text report (all findings with show_all)."""
    t, g = doc.trace, doc.gpu
    failed = bool(t.program_end.failed)
    L = _header_lines(t, failed)
    L += _window_lines(doc.window)
    if doc.setup:
        L += _setup_section_lines(doc.setup)
    st = doc.steps
    L += _gpu_lines(g, t)
    if t.link.gbps:
        L.append(f"host link: {t.link.gbps:.1f} GB/s ({t.link.source})")
    L += _steps_lines(st, bool(g and doc.nvtx.count), failed=failed)
    if st.setup:
        L.append(_setup_line(st.setup))
    gp = doc.gaps
    if g:
        L.append(f"idle gaps >= {ms(gp.threshold_ns)}: {gp.count}, total {ms(gp.total_ns)}")
        for c in gp.covered_by[:3]:
            L.append(f"    {100 * c.share:.0f}% of gap time inside {_range_word(doc)} '{c.name}' on the launching "
                     "thread")
    L += _copy_lines(doc.memcpy)
    L += _kernel_lines(doc.kernels)
    if doc.nvtx.count:
        L.append(f"{_range_word(doc)} ranges (total): " + ", ".join(f"{r.name} {ms(r.total_ns)} x{r.count}"
                                                       for r in doc.nvtx.ranges[:6]))
    limit = doc.ranks.limit if doc.ranks else None
    findings = [f for f in doc.diagnosis if f != limit]  # the multi-GPU limit is ranks_report's
    L += code_section_lines(doc.code, {f.line.place for f in findings if f.line})
    if any(show_all or f.severity in SHOWN for f in findings):
        L.append("diagnosis (by what fixing each buys):")
    L += finding_lines(findings, show_all)
    L += predicted_lines(doc.predicted)
    if g:  # what limits the program: the first thing read (after a warning that the trace is incomplete), and the last
        at = 1 + sum(1 for line in L[1:3] if line.startswith("!!"))  # after the failed-run and trust warnings
        L.insert(at, wrapped(verdict_line(doc.diagnosis, doc.window.source, limit)))
        L.append(L[at])
    return "\n".join(L)


def _copy_lines(mc: MemcpyPart) -> list[str]:
    """The DtoH and HtoD copies, the unified-memory migrations and the host-side DtoH rate."""
    L = []
    for m, label in ((mc.dtoh, "DtoH"), (mc.htod, "HtoD")):
        if m.count:
            kinds = ", ".join(f"{k} {v}" for k, v in m.kinds.items())
            L.append(f"{label}: {m.count} copies, {m.bytes / 1e9:.2f} GB, total {ms(m.total_ns)}, "
                     f"max {ms(m.max_ns)}, {gbps(m.gbps)}; host memory: {kinds}; "
                     f"{_sync_split(m)}; overlapped kernels {pct(m.overlap_fraction)}")
    if mc.unified:
        L.append(_unified_line(mc.unified))
    h = mc.dtoh_host
    if h and mc.dtoh.count and h.peak_gbps is not None:
        L.append(f"host-side DtoH (all devices, {h.bin_ns / 1e6:g} ms bins): peak {h.peak_gbps:.1f} GB/s, "
                 f"mean {h.mean_gbps:.1f} GB/s over the window")
    return L


def _range_word(doc: Document) -> str:
    """What the trace's ranges are: torch.profiler's record_function ranges, nsys's NVTX ranges."""
    return "record_function" if doc.trace.profiler == "torch.profiler" else "NVTX"


def _header_lines(t: TraceInfo, failed: bool) -> list[str]:
    """The trace and its GPUs, then the warnings read before any figure: a failed run, an incomplete trace."""
    gpus = ", ".join(sorted({g.name or "?" for g in t.gpus})) or "none listed"
    made_by = t.nsys_version if str(t.nsys_version).startswith("torch.profiler") else f"nsys {t.nsys_version}"
    L = [f"{t.path}  ({made_by}; GPUs: {gpus})"]
    integ = t.integrity
    if failed:
        L.append(failed_run_line(t.program_end))
    if integ.verdict == "lossy":
        L.append(f"!! INCOMPLETE TRACE: {integ.evidence} The GPU figures below count only what was recorded.")
    elif integ.verdict == "doubtful":
        L.append(f"!! POSSIBLY INCOMPLETE TRACE: {integ.evidence} The figures below count only what nsys recorded.")
    return L


def verdict_line(findings: Sequence[Finding], source: str = "", limit: Finding | None = None) -> str:
    """One line that says what limits the program (in its steady state, where the window is that): the costliest
    finding (the trust notes first), or that nothing costs a measurable share. With several GPUs the multi-GPU limit
    leads where it names the cause (schema.with_limit): said as what limits the GPUs, its cost being its own."""
    f = verdict_of(findings)
    head = "verdict (steady state)" if source.startswith("steady state") else "verdict"
    if f and f.line and f.line.growth:
        head = "verdict (a cost that grows: no steady state)"
    if f is None:
        return (f"{head}: nothing costs as much as 0.1% of the GPUs' time, so the program keeps its GPU fed: leave its "
                "transfers as they are.")
    if f.rule == "failed-run":
        return "verdict: the program failed: fix it and trace it again before reading any figure (see failed-run)"
    if f.rule == "incomplete-trace":
        what = ("nsys says the trace may be incomplete" if f.evidence.startswith(DOUBTFUL_PREFIX)
                else "the trace is incomplete")
        return f"verdict: {what}: re-capture it before trusting any figure (see incomplete-trace)."
    if f.rule == "too-little-to-judge":
        what = "too little GPU work" if f.subject == "GPU work" else "too few steps"
        return f"verdict: too little to judge ({what} in the capture): {f.suggestion}."
    if f is limit or f == limit:
        return f"{head}: {f.rule} limits these GPUs (see limit below): {_first_clause(f.suggestion)}."
    what = f" ({f.subject})" if f.subject and f.subject not in ("the capture",) else ""
    return (f"{head}: {f.rule}{what} limits this program, {100 * f.impact_fraction:.0f}% of the GPUs' time: "
            f"{_first_clause(f.suggestion)}.{_buys(f.prediction)}")


def _buys(p: Prediction | None) -> str:
    """' Fixing it buys 1.3-1.5x in the steady state.' where the verdict's finding has figures (its prediction)."""
    if not p or not (p.steady or p.whole):
        return ""
    r, where = (p.steady, "in the steady state") if p.steady else (p.whole, "over the whole loop")
    return f" Fixing it buys {prediction.x_range(r)} {where}."


def _first_clause(text: str) -> str:
    """A suggestion's first clause, to its first semicolon, whole (its action: each rule's suggestion says what to
    do before its first semicolon); wrapped() folds it where it is long."""
    return text.split("; ")[0].rstrip(".")


def _window_lines(w: Window) -> list[str]:
    """The window's length and source, in trace ns and in ms from the capture's start (the origin `--window 1.5s:`
    counts from: the session start, or the first recorded event where the export records none)."""
    if w.duration_ns is ABSENT:
        return []
    first = w.origin_ns if w.origin_ns is not ABSENT else (None if w.capture_start_ns is ABSENT else w.capture_start_ns)
    rel = (f" = {(w.start_ns - first) / 1e6:,.1f} to {(w.end_ns - first) / 1e6:,.1f} ms from the "
           f"{w.origin or 'capture start'}" if first is not None else "")
    lines = [f"window: {ms(w.duration_ns)} ({w.source}; {w.start_ns}:{w.end_ns} ns{rel})"]
    if w.teardown_ns:  # verify counts it: the program's clock runs through it
        lines.append(f"  then the output pipeline's close: {ms(w.teardown_ns)} past the window (its workers joined, "
                     "its buffers unpinned and unmapped), on the program's own clock")
    return lines


def _setup_section_lines(s: SetupPart) -> list[str]:
    """The set-up before the steady state (the `setup` section), which the verdict leaves out."""
    w = s.warmup
    warm = ""
    if w.count:
        durations = ", ".join(f"{d / 1e6:,.1f}" for d in w.durations_ns[:4])
        unit = "step" if s.source == "steps" else "iteration"
        first = f"the first {unit}" if w.count == 1 else f"the first {w.count} {unit}s"
        warm = (f"; warm-up: {first} "
                f"({durations} ms against a median of {w.median_step_ns / 1e6:,.1f} ms)")
    lines = [f"Set-up before the steady state (left out of the verdict): {s.duration_ns / 1e6:,.1f} ms, GPU busy "
             f"{s.gpu_busy_ns / 1e6:,.1f} ms ({s.kernels:,} kernels){warm}"]
    lines += [f"  {c.cause}: {c.ns / 1e6:,.1f} ms in {c.kind} ({c.top})" for c in s.causes[:6]]
    cs = s.cpu_samples
    if cs.samples:
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in list(cs.kinds.items())[:4])
        lines.append(f"  the launching thread's CPU samples in it ({cs.samples:,}): {kinds}")
    return lines


def _gpu_lines(g: GpuPart | None, t: TraceInfo) -> list[str]:
    """GPU busy and compute per device; without GPU work, what the OS calls took instead."""
    if g:
        return [f"GPU busy {pct(g.utilization)}, compute (kernels) {pct(g.compute_utilization)}"
                + ("".join(f"; device {d.device}: {pct(d.utilization)} / {pct(d.compute_utilization)}"
                           for d in g.devices) if len(g.devices) > 1 else "")]
    L = [t.cpu_only.line if t.cpu_only else "no GPU activity in this trace (NVTX / OS runtime only)"]
    if t.os_runtime:
        L.append("OS runtime calls (total): " + ", ".join(f"{r.name} {ms(r.total_ns)} x{r.count}"
                                                        for r in t.os_runtime[:6]))
    return L


def failed_run_line(end: ProgramEnd) -> str:
    """The first thing said of a failed run: that it failed, how, and what to do."""
    said = failed_run_evidence(facts.ProgramEnd(end.failed, end.exit_code, end.error, end.source))
    return f"!! FAILED RUN: {said}. The figures below are of a run that did not finish: fix the program, then trace it again."


def _steps_lines(st: StepsPart, say_none: bool, failed: bool = False) -> list[str]:
    """The steps found and their rate (of a failed run: said to be one); that none were found, where the trace has
    ranges they could have been."""
    if st.count:
        return [f"steps: {st.count} matching {st.regex!r} ({st.source}), "
                f"{st.per_second:.2f} steps/s{_period(st.per_second)}, the step ranges {ms(st.mean_ns)} "
                "on average on the CPU"
                + (f", GPU idle {ms(st.mean_gpu_idle_ns)} per step" if st.mean_gpu_idle_ns is not None else "")
                + ("; a failed run: not its throughput (its last step may be the one it failed in)" if failed else "")]
    return ["steps: none found (no NVTX range recurs with a counter: --step-regex names one); no per-step figures"] \
        if say_none else []


def _period(per_second: float | None) -> str:
    """' (X ms a step)': the time per step that the steps/s says, from that one figure (a step range on the CPU may
    be much shorter than the period while the GPU works asynchronously)."""
    return f" ({ms(1e9 / per_second)} a step)" if per_second else ""


def _setup_line(su: SetupBeforeSteps) -> str:
    """The set-up before the first step, what the GPU's idle time there went to, and that per-step costs leave it out."""
    idle = ", ".join(f"{k} {ms(v)}" for k, v in sorted(su.idle_ns.items(), key=lambda kv: -kv[1])[:3])
    calls = f"; {su.sync_calls:,} synchronising calls" if su.sync_calls else ""
    return (f"set-up before the first step: {ms(su.before_first_step_ns)} (GPU idle there: {idle or 'none'}"
            f"{calls}); host-sync, launch and mapping costs count from the first step on")


def _unified_line(u: UnifiedMemory) -> str:
    """The unified-memory migrations by direction, and how many the driver made on demand."""
    dirs = "; ".join(f"{label} {m.count:,} ({m.bytes / 1e9:.2f} GB, {ms(m.total_ns)}, {m.on_demand:,} on demand)"
                     for m, label in ((u.htod, "HtoD"), (u.dtoh, "DtoH"), (u.dtod, "DtoD")) if m)
    od = u.on_demand
    return (f"unified-memory migrations: {dirs}; on demand: {ms(od.gpu_ns)} of GPU time, {ms(od.kernel_overlap_ns)} "
            "of it while kernels ran" + ("" if u.cause_recorded else " (the export records no causes)"))


def _kernel_lines(k: KernelsPart) -> list[str]:
    """The kernels' count, time and top names; the CUDA graphs they ran in."""
    L = []
    if k.count or k.graphs:
        count = k.count if k.count or not k.graphs else "none one by one (all inside CUDA graphs)"
        L.append(f"kernels: {count}, total {ms(k.total_ns)}; top: "
                 + "; ".join(f"{str(r.shown_name or r.name)[:60]} "
                             + ("n/a" if r.pct is None else f"{r.pct:.0f}%") for r in k.top[:3]))
    if k.graphs:
        L.append(_graphs_line(k.graphs))
    return L


def _graphs_line(gr: KernelGraphs) -> str:
    """How much GPU time ran inside CUDA graphs, and whether their kernels are in the trace."""
    how = ("traced as whole graphs (nsys --cuda-graph-trace=graph): the kernels inside are not in the trace; trace "
           "with --cuda-graph-trace=node to see them" if gr.traced_as == "graph" else
           f"traced node by node: {gr.kernels_inside:,} kernels inside them")
    return (f"CUDA graphs: {gr.launches:,} launches, {ms(gr.gpu_ns)} on the GPU "
            f"({pct(gr.share_of_kernel_time)} of kernel time); {how}")


def cycles_report(run, detail: Document, show_all: bool = False) -> str:
    """Several traces of one torch.profiler run (analysis/cycles.Cycles): a line per cycle, the run's one verdict,
    then the full report of the steady cycle with the median step (detail: its document, run.detail typed)."""
    v = run.verdict
    L = [f"{len(run.cycles)} torch.profiler traces of one run (one process, one after another: a schedule's cycles), "
         "read as one run:"]
    for i, c in enumerate(run.cycles, 1):
        steps = (f"{c.first_step}..{c.last_step}" if c.first_step and c.first_step != c.last_step else
                 c.first_step or f"{c.steps} steps")
        step = f"{c.step_ns / 1e6:,.1f} ms a step" if c.step_ns else "no steps"
        busy = f"GPU busy {pct(c.gpu_busy)}" if c.gpu_busy is not None else "no GPU work"
        top = f"{c.rule}" + (f" ({c.subject})" if c.subject else "") if c.rule else "nothing costed"
        left = "" if c.steady else "  [warm-up: its steps are outliers against the other cycles'; left out]"
        L.append(f"  cycle {i}: {c.label}  {steps}, {step}, {busy}; verdict {top}{left}")
    what = f" ({v.subject})" if v.subject else ""
    if all(c.gpu_busy is None for c in run.cycles):
        L.append("verdict: none on the GPU: no cycle recorded GPU work (each shows the program on the CPU, below)")
    elif v.rule is None:
        L.append(f"verdict (the {v.steady} steady cycles): nothing costs as much as 0.1% of the GPUs' time.")
    else:
        L.append(wrapped(f"verdict (the {v.steady} steady cycle{'s' if v.steady != 1 else ''}, {v.agree} of them "
                         f"agree): {v.rule}{what} limits this program, {100 * v.share:.0f}% of their GPUs' time"
                         + (f": {_first_clause(v.suggestion)}." if v.suggestion else ".")))
    L.append(f"the steady cycle with the median step, in full: {run.detail_label}")
    return "\n".join(L) + "\n" + text_report(detail, show_all)

