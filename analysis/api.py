"""The Python API, for a notebook: analyze(trace) reads one trace (an Nsight Systems export or a torch.profiler trace)
as analyze-trace does and returns a TraceReport: the verdict and the findings as typed values (each finding with what
its fix buys), DataFrames of where the GPU's time went, and the charts as matplotlib figures.

    from nsys_transfer import analyze
    r = analyze("runs/before/before.sqlite")
    r.verdict, r.idle_by_cause, r.findings[0].prediction, r.plot.timeline()

Every value is the analysis's own: the DataFrames are its tables (those --csv writes) or rows of its typed document
(Result.doc: its Finding, CodeSite and Prediction values), the verdict is the line analyze-trace prints, the charts are
those --plots draws (render/charts.trace_chart). Nothing here works a figure out another way. pandas comes with
this module and matplotlib with the first chart, never with `import nsys_transfer` (nsys_transfer/__init__.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .cli.charts import plot_stem_of
from .cli.options import check_numbers, check_regex
from .cli.window import parse_span
from .facade import (Trace, TraceError, defaults, options_for, read_record, run_record_beside,
                     time_breakdown, traces_given, verdict_of)
from .facade import analyze as analyze_result
from .render.ranks_text import ranks_report
from .render.text import text_report, verdict_line
from .result import CodeSite, Finding, Prediction, Result

__all__ = ["analyze", "TraceReport", "Verdict", "Charts", "Finding", "CodeSite", "Prediction", "TraceError"]


def analyze(trace: str | Path, *, window: str | None = None, steps: str | None = None, whole: bool = False,
            min_gap_ms: float = defaults.MIN_GAP_MS, step_regex: str | None = None, top: int = defaults.TOP,
            link_gbps: float | None = None, progress: Callable[[str], None] | None = None) -> TraceReport:
    """One trace's analysis, as `analyze-trace TRACE` makes it (the same options, spelt as keywords: window="1.2s:",
    steps="1:", whole=True, ...). trace: a .sqlite, .sqlite.xz or .nsys-rep export, a torch.profiler trace (.json,
    .json.gz), or a folder that holds one of them. progress(message) hears each stage of a long analysis.
    TraceError on bad input (a file that is no trace, an option out of range), in one line."""
    check_numbers(min_gap_ms=min_gap_ms, top=top, link_gbps=link_gbps)
    check_regex("--step-regex", step_regex)
    paths = traces_given([trace])
    if len(paths) != 1:  # ranks side by side, or a schedule's cycles as one run: what analyze-trace reads of several
        raise TraceError(f"{trace}: holds {len(paths)} traces, analyze() reads one; analyze-trace reads several "
                         "(one per rank side by side, or a torch.profiler schedule's cycles as one run)")
    path = paths[0]
    opts = options_for(path, step_regex, parse_span(window, steps, whole), defaults.ns_of_ms(min_gap_ms), top=top,
                       link_gbps=link_gbps, whole=whole)
    beside = run_record_beside(path)  # the workload's record, as analyze-trace reads it (several GPUs use it)
    workload = read_record(beside, "throughput", "a workload record", "") if beside else None
    return TraceReport.of(path, analyze_result(path, opts, workload=workload, progress=progress))


@dataclass(frozen=True)
class Verdict:
    """What limits the program, as analyze-trace says it: text, its verdict line (None for a trace without GPU work,
    where it prints none), and finding, the finding that line names (None where nothing costs 0.1% of the GPUs'
    time)."""
    text: str | None
    finding: Finding | None

    def __str__(self) -> str:
        return self.text or "no verdict: the trace holds no GPU work (its findings say what the CPU did)"


@dataclass(frozen=True)
class TraceReport:
    """One trace's analysis (analyze): path, the trace; verdict, what limits the program; findings, every finding in
    the diagnosis's order (by what fixing each buys), each with its line in the program (`line`, a CodeSite) and what
    its fix buys (`prediction`, a Prediction: speed-up ranges of the steady state and the whole loop, the limit
    that binds next); all_fixed, what fixing every predicted finding together buys. The DataFrames (each a copy, units
    in the column names) and the charts (`plot`) are properties; summary is the JSON analyze-trace --json writes
    (docs/json-schema.md), result the facade's Result behind it all."""
    path: Path
    verdict: Verdict
    findings: tuple[Finding, ...]
    all_fixed: Prediction | None
    result: Result = field(repr=False)

    @classmethod
    def of(cls, path: Path, result: Result) -> TraceReport:
        """The report of an analysis (facade.analyze's Result) of the trace at path."""
        doc = result.doc
        line = verdict_line(doc.diagnosis, doc.window.source if doc.window else "",
                            doc.ranks.limit if doc.ranks else None) \
            if doc.gpu else None  # the text prints a verdict only where the GPU worked
        verdict = Verdict(line, verdict_of(doc.diagnosis))
        return cls(Path(path), verdict, doc.diagnosis, doc.predicted.all_fixed if doc.predicted else None, result)

    @property
    def summary(self) -> dict:
        """The JSON document, as analyze-trace --json writes it (docs/json-schema.md)."""
        return self.result.summary

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table behind the analysis, by the name analyze-trace --csv gives its file."""
        return self.result.tables

    @property
    def warnings(self) -> list[str]:
        """What the analysis said of the trace itself: rows a damaged export lost, what a torch.profiler trace lacks."""
        return self.result.warnings

    def text(self, show_all: bool = False) -> str:
        """The report analyze-trace prints (show_all: the low findings too, as --all)."""
        doc = self.result.doc
        return text_report(doc, show_all) + (f"\n{ranks_report(doc.ranks)}" if doc.ranks else "")

    def _table(self, name: str, columns: tuple[str, ...] = ()) -> pd.DataFrame:
        """A copy of one of the analysis's tables; empty, with these columns, where the trace gives none (a capture
        without GPU work has no idle time to give a cause)."""
        df = self.tables.get(name)
        return df.copy() if df is not None else pd.DataFrame(columns=list(columns))

    @property
    def idle_by_cause(self) -> pd.DataFrame:
        """Every idle nanosecond of each GPU given to one cause (the `idle` section): cause, subject (the call, range
        or line it names, where one), idle_ns, device; the largest first."""
        df = self._table("idle", ("cause", "subject", "idle_ns", "device"))
        return df.sort_values("idle_ns", ascending=False, ignore_index=True) if len(df) else df

    @property
    def breakdown(self) -> pd.DataFrame:
        """Where the GPUs' time in the window went, the breakdown chart's bars: part (kernels, copies by direction and
        host memory, idle time by cause), time_ns, share (of the parts' sum)."""
        parts = time_breakdown(self.result.doc) if self.result.doc.gpu else []
        df = pd.DataFrame(parts, columns=["part", "time_ns"])
        return df.assign(share=df["time_ns"] / df["time_ns"].sum() if len(df) else [])

    @property
    def copies(self) -> pd.DataFrame:
        """Every copy in the window, a row each: start_ns, end_ns, duration_ns, bytes, gbps, copy_kind (DtoH...),
        src_kind and dst_kind (Pageable, Pinned, Device...), the CUDA call behind it (api_*), sync, blocking,
        overlap_ns with kernels."""
        return self._table("memcpy")

    @property
    def kernels(self) -> pd.DataFrame:
        """The kernels that took the most GPU time (top=N of analyze): name, count, total_ns, mean_ns, min_ns, max_ns,
        pct (of the kernels' time), shown_name, precision, library."""
        return self._table("kernels_top")

    @property
    def steps(self) -> pd.DataFrame:
        """The program's steps as the analysis found them (NVTX or record_function ranges): name, start_ns, end_ns,
        duration_ns; empty where it found none (summary['steps']['source'] says why)."""
        return self._table("steps")

    @property
    def gaps(self) -> pd.DataFrame:
        """The GPUs' idle gaps of at least min_gap_ms: device, start_ns, end_ns, duration_ns, and what ran next."""
        return self._table("gaps")

    @property
    def code_lines(self) -> pd.DataFrame:
        """The program's lines behind the idle time and the copies (the `code` section, from the Python stacks beside
        the trace, or a torch.profiler trace's own): kind (idle, copies, or cpu for a capture without GPU work),
        cause (the idle cause or copy direction), place, file, line, function, code, role (what the work is for),
        time_ns (the time given to the line), share (of the lines' time there), visits, threads, growth_start_ms and
        growth_end_ms (where its cost grows), path (how the loop reaches it); empty without stacks."""
        code = self.result.doc.code
        groups = [("idle", cause, sites) for cause, sites in code.idle.items()] if code else []
        groups += [("copies", direction, sites) for direction, sites in code.copies.items()] if code else []
        groups += [("cpu", None, code.cpu if code else ())]
        return pd.DataFrame([_code_row(kind, cause, site) for kind, cause, sites in groups for site in sites],
                            columns=CODE_COLUMNS)

    @property
    def predictions(self) -> pd.DataFrame:
        """What each finding's fix buys, a row per predicted finding: rule, subject, severity, impact_ns,
        impact_fraction, the speed-up ranges steady_low_x, steady_high_x (the steady state) and whole_low_x,
        whole_high_x (the whole loop, warm-up included), next_limit, ceiling_x (the further speed-up the kernels
        alone leave), why_not (why the trace cannot say, instead of figures), says (the line analyze-trace prints
        under the finding: str(prediction))."""
        rows = [_prediction_row(f) for f in self.findings if f.prediction is not None]
        return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)

    @property
    def plot(self) -> Charts:
        """The charts analyze-trace --plots draws, as matplotlib figures: plot.timeline(), plot.breakdown(), ..."""
        return Charts(self)

    def __repr__(self) -> str:
        return f"TraceReport({self.path.name}: {self.verdict}; {len(self.findings)} findings)"


CODE_COLUMNS = ["kind", "cause", "place", "file", "line", "function", "code", "role", "time_ns", "share", "visits",
                "threads", "growth_start_ms", "growth_end_ms", "path"]
PREDICTION_COLUMNS = ["rule", "subject", "severity", "impact_ns", "impact_fraction", "steady_low_x", "steady_high_x",
                      "whole_low_x", "whole_high_x", "next_limit", "ceiling_x", "why_not", "says"]


def _code_row(kind: str, cause: str | None, site: CodeSite) -> list:
    """A code_lines row (CODE_COLUMNS) of one site."""
    g = site.growth or (None, None)
    return [kind, cause, site.place, site.file, site.line, site.function, site.code, site.role, site.ns, site.share,
            site.visits, site.threads, g[0], g[1], site.path]


def _prediction_row(f: Finding) -> list:
    """A predictions row (PREDICTION_COLUMNS) of a finding."""
    p = f.prediction
    steady, whole = p.steady or (None, None), p.whole or (None, None)
    return [f.rule, f.subject, f.severity, f.impact_ns, f.impact_fraction, steady[0], steady[1], whole[0], whole[1],
            p.next_limit, p.ceiling_x, p.why_not, str(p)]


@dataclass(frozen=True)
class Charts:
    """A TraceReport's charts, each a matplotlib Figure (render/figure.Chart: shown once in a notebook, on its own
    canvas, whatever backend is in use; fig.savefig writes it) drawn by the code that draws analyze-trace --plots'
    files, titled by the trace's name; None where --plots leaves the chart out (no idle gap, no DtoH copy, ...)."""
    report: TraceReport

    def timeline(self, steps: int = 3):
        """The timeline of the last `steps` steps (else the window): kernels and copies by stream, each idle gap
        coloured by its cause, the launching thread's ranges (the trace is opened again for its kernels)."""
        charts = _charts()
        with Trace.open(self.report.path) as t:
            return _laid_out(charts.timeline_figure(self.report.result, t, steps, self._name))

    def breakdown(self):
        """Where the GPU's time went, one bar (report.breakdown's parts)."""
        return self._chart("breakdown")

    def gaps(self):
        """The idle gaps over the window, each to scale and coloured by its cause."""
        return self._chart("gaps")

    def dtoh(self):
        """Each DtoH copy's duration and bandwidth against the host link."""
        return self._chart("dtoh")

    def gpus(self):
        """Several GPUs in the trace: each GPU's kernel and copy shares, the DtoH into host memory over time."""
        return self._chart("gpus")

    @property
    def _name(self) -> str:
        return plot_stem_of(self.report.path)

    def _chart(self, kind: str):
        """One of the charts that need no more of the trace than the analysis holds."""
        return _laid_out(_charts().trace_chart(kind, self.report.result, None, self._name))


def _charts():
    """One trace's charts by kind (render/charts.py), imported with the first chart asked for: matplotlib costs a
    notebook ~0.3 s."""
    from .render import charts  # noqa: PLC0415
    return charts


def _laid_out(fig):
    """A chart laid out as its file is (Chart.laid_out), so fig.savefig writes what the notebook shows."""
    if fig is not None:
        fig.laid_out()
    return fig
