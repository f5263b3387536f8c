"""The one door into the analysis: analyze() takes a trace (a path or an open Trace) or several (one per rank) and the
options, and returns a Result (result.py) that the text and JSON renderers, the charts, verify and the reports render.
It resolves the window the user asked for (--window, --steps) and compares the GPUs, of one trace or of several.

The command lines (analysis/cli, nsys_transfer/cli.py) and the reports import only this module and the result types
(`nsys_transfer.analysis` re-exports both); pyproject.toml's import contracts hold them to it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from ..nsys_core.contracts import DEFAULT_LINK_GBPS, DEFAULT_STEP_REGEX

from .common import defaults, schema
from .common.errors import TraceError
from .common.typed_json import from_json
from .document import Document, RanksPart
from .common.memory import LARGE_TRACE_BYTES, return_freed_memory
from .common.window_spec import Spec
from . import cycles
from .verify import NotComparable, Side, check_same_profiler, verify
from .load.btree import not_built_notice
from .load import kineto_json
from .load.journal import lock_held
from .load.inputs import capture_record_beside, read_record, run_record_beside, traces_in
from .load.trace import Trace
from .rank_summary import (RankOptions, Ranks, analyze_ranks, default_labels, merge_parts,
                           part_of_path, trace_labels)
from .result import Result
from .rules import capture_checks
from .rules import diagnosis
from .rules.diagnosis import verdict_of
from .rules.scaling import scaling_row
from .executors import parallel
from .executors.parallel import Dask, cores, executor
from .sections import loop, window
from .sections.loop_lines import loop_lines
from .document.breakdown import time_breakdown
from .sections.capture_figures import figures
from .sections.copies import big_copies
from .sections.cpu_only import launched
from .sections.program import toolkit_record
from .summary import Options, analyze_sections

__all__ = [
    "analyze", "analyze_runs", "Options", "Result", "Ranks", "Side", "NotComparable", "Spec", "Trace", "TraceError",
    "defaults", "options_for", "rank_options", "capture_verdict", "gpu_names", "side_of", "verify", "rule_ids", "scaling_row",
    "time_breakdown", "big_copies", "read_record", "run_record_beside", "capture_record_beside", "toolkit_record",
    "executor", "cores", "Dask", "not_built_notice", "profiler_of", "check_same_profiler", "one_run", "analyze_cycles",
    "Cycles", "traces_given", "verdict_of", "lock_held", "loop_of",
]
Cycles = cycles.Cycles


def analyze(traces: Path | str | Trace | list, opts: Options | None = None, *, probe: dict | None = None,
            workload: dict | None = None, progress: Callable[[str], None] | None = None, compare_gpus: bool = True,
            where=None, on_start: Callable[[object], None] | None = None) -> Result:
    """The analysis of one trace (a path or an open Trace) or of several (a list of paths: one run's traces, one per
    rank, a single multi-GPU trace too), as analyze-trace makes it; TraceError, OSError on bad input.

    One trace: its sections and findings over the window opts asks for (opts.window_asked, resolved here) or its
    steady state; with several GPUs in it and compare_gpus, their side-by-side comparison too (`ranks`). Several
    traces: every GPU side by side on one clock, each trace analysed where `where` (an analysis.executors.parallel
    executor; default: one after the other here) runs it. probe: a link-probe record; workload: the workload's own
    record (python -m nsys_transfer.workloads --json), both for the GPUs' comparison."""
    if isinstance(traces, list):
        return analyze_runs({"": traces}, opts, probe=probe, workloads={"": workload}, progress=progress, where=where,
                            on_start=on_start)[""]
    if isinstance(traces, Trace):
        return _one(traces, opts or Options(), probe, workload, progress, compare_gpus)
    with Trace.open(traces) as t:
        return _one(t, opts or Options(), probe, workload, progress, compare_gpus)


def _one(t: Trace, opts: Options, probe, workload, progress, compare_gpus: bool) -> Result:
    """One open trace's Result (analyze)."""
    if opts.window_asked:  # the one place the asked window becomes trace ns
        opts = replace(opts, window=window.resolve_asked(t, opts.window_asked, opts.step_regex))
    if t.path.stat().st_size >= LARGE_TRACE_BYTES:
        return_freed_memory()  # before the analysis' threads and arrays: peak memory as it holds it
    a = analyze_sections(t, opts, progress)
    doc, tables, ranks = a.doc, a.tables, None
    if compare_gpus and doc.gpu and len(doc.gpu.devices) > 1:
        ranks = analyze_ranks([t], rank_options(opts, doc.steps.regex if doc.steps else None, doc.trace.link.gbps,
                                                probe, workload), progress=progress)
        # the comparison is made as JSON (rank_summary.py): read once here
        part = from_json(RanksPart, ranks.summary)
        doc = replace(doc, ranks=part, diagnosis=tuple(schema.with_limit(list(doc.diagnosis), part.limit)))
        tables = {**tables, **rank_tables(ranks)}
    return Result(doc, tables, a.gap_causes, ranks, list(doc.warnings))


def analyze_runs(runs: dict[str, list], opts: Options | None = None, *, probe: dict | None = None,
                 workloads: dict[str, dict | None] | None = None, progress: Callable[[str], None] | None = None,
                 where=None, on_start: Callable[[object], None] | None = None) -> dict[str, Result]:
    """Several runs' traces (run -> its trace paths), each run's GPUs side by side on one clock: every trace analysed
    where `where` runs it, in one go, then merged run by run. on_start(executor) is called once the executor is
    ready, before the work (what the command line says about it). workloads: each run's workload record."""
    opts = opts or Options()
    calls, order = [], []
    for run, paths in runs.items():
        ropts = rank_options(opts, opts.step_regex, opts.link_gbps, probe, (workloads or {}).get(run))
        labels = default_labels(1) if len(paths) == 1 else trace_labels([Path(p).name for p in paths])
        order.append((run, ropts, len(calls), len(paths)))
        calls += [(p, label, ropts) for p, label in zip(paths, labels)]
    if not calls:
        return {}
    with where or parallel.executor(1, None, len(calls)) as ex:
        if on_start:
            on_start(ex)
        parts = ex.map(part_of_path, calls, progress or (lambda msg: None))
    out = {}
    for run, ropts, first, n in order:
        r = merge_parts(parts[first:first + n], ropts, progress)
        out[run] = Result(Document.made_as_json(r.document()), rank_tables(r), None, r, r.warnings)
    return out


def rank_options(opts: Options, step_regex: str | None, link_gbps: float | None, probe: dict | None = None,
                 workload: dict | None = None) -> RankOptions:
    """The GPUs' comparison's options from the one-trace ones: one home for what both take (the smallest gap, the
    bin), one trace's GPUs or several traces'. step_regex and link_gbps: the steps and the link speed (one trace: the
    ones its analysis used; several: the options'), the defaults where None."""
    return RankOptions(min_gap_ns=opts.min_gap_ns, step_regex=step_regex or DEFAULT_STEP_REGEX, bin_ns=opts.bin_ns,
                       link_gbps=link_gbps or DEFAULT_LINK_GBPS, probe=probe, run=workload)


def rank_tables(ranks: Ranks) -> dict:
    """The GPUs' comparison's tables, by their --csv names."""
    return {"gpus": ranks.devices, "dtoh_host_by_gpu": ranks.host, "dtoh_copies_by_gpu": ranks.copies,
            "dtoh_contention": ranks.tables["contention"]}


def options_for(trace: Path | None, step_regex: str | None = None, win: Spec | None = None,
                min_gap_ns: int = defaults.MIN_GAP_NS, **kw) -> Options:
    """The options every command analyses with, built here alone (analyze-trace, verify for both of its traces,
    compare-traces): the window as asked (resolved by analyze) and this toolkit's run record beside the trace; trace
    None for several traces at once (the GPUs side by side, a torch.profiler run's cycles), which no one run record
    describes. kw: the other Options fields (top, link_gbps, whole, ...)."""
    return Options(min_gap_ns=min_gap_ns, step_regex=step_regex, window=None,
                   run_record=toolkit_record(str(trace)) if trace is not None else None, window_asked=win, **kw)


def capture_verdict(path, pairs: bool = False) -> dict:
    """The trace's own consistency verdict and figures (rules/capture_checks.py); pairs: the per-pair figures too
    (--check). TraceError, OSError on bad input."""
    with Trace.open(path) as t:
        return capture_checks.verdict(figures(t, pairs=pairs))


def gpu_names(path) -> list[str]:
    """The GPUs the trace recorded, by name, sorted (TraceError, OSError on bad input)."""
    with Trace.open(path) as t:
        return sorted(set(t.device.gpus["name"].astype(str)))


def side_of(trace: Path, result: Result, label: str, read_loop: bool) -> Side:
    """One side of verify: the trace's analysis, the workload record and the run record beside it, and (read_loop)
    the loop as the program runs it, read from the trace again."""
    rec_path = run_record_beside(trace)
    workload = read_record(rec_path, "throughput", "a workload record", "") if rec_path else None
    found = _loop(trace, result.doc) if read_loop else None
    return Side(str(trace), result.doc, workload, label, _recorded(trace), found,
                _sampled(trace, result.doc, found), _command(trace), _step_periods(result))


def _step_periods(result: Result) -> list[int] | None:
    """Each step of the analysis window's from its start to the next one's (each process's steps apart, where several
    ran them); None with fewer than two steps."""
    steps = result.tables.get("steps")
    if steps is None or len(steps) < 2:
        return None
    runs = [g for _, g in steps.groupby("pid")] if "pid" in steps else [steps]
    starts = [sorted(int(x) for x in g["start_ns"]) for g in runs]
    return [b - a for s in starts for a, b in zip(s, s[1:])] or None


def _sampled(trace: Path, doc: Document, found: dict | None) -> dict | None:
    """A capture without GPU work: every line of the program its main thread was sampled at in the loop
    (sections/loop_lines.py); None with GPU work or without a loop or stacks."""
    if doc.gpu or not found:
        return None
    with Trace.open(trace) as t:
        return loop_lines(t, found["start_ns"], found["end_ns"])


def _command(trace: Path) -> list | None:
    """The command line that ran the program: from the run record beside the trace, else from the export itself
    (what nsys launched: sections/cpu_only.launched); None where neither says."""
    capture = capture_record_beside(trace)
    try:
        command = read_record(capture, "recorded", "a run record", "").get("command") if capture else None
    except TraceError:
        command = None
    if not isinstance(command, list) and profiler_of(trace) == "nsys":  # a torch.profiler trace records none
        with Trace.open(trace) as t:
            command = launched(t)
    return [str(x) for x in command] if isinstance(command, list) else None


def loop_of(trace: Path | str, doc: Document) -> dict | None:
    """The loop as the program runs it, read from the trace (as verify reads each side's): None without one."""
    return _loop(Path(trace), doc)


def _loop(trace: Path, doc: Document) -> dict | None:
    """The loop as the program runs it (sections/loop.py), read from the trace again: first iteration to the end of the
    last output's work, wherever it ran (without GPU work, cpu_of: the loop by the program's own clock); None without
    one."""
    with Trace.open(trace) as t:
        # no GPU work: the loop by its own clock (cpu_of)
        found = loop.of(t, doc.window, doc.steps) or loop.cpu_of(t, doc.window, doc.steps, doc.gpu)
    if found is None:
        return None
    return {"start_ns": found.start_ns, "end_ns": found.end_ns, "duration_ns": found.duration_ns,
            "start_from": found.start_from, "end_from": found.end_from, "gpu_end_ns": found.gpu_end_ns,
            "cuda_calls": found.cuda_calls, "call_floor_ns": found.call_floor_ns,
            "workers_start": asdict(found.workers_start) if found.workers_start else None}


def _recorded(trace: Path) -> dict | None:
    """What nsys was asked to record, from the run record beside the trace; None without one (or an older one)."""
    capture = capture_record_beside(trace)
    try:
        return read_record(capture, "recorded", "a run record", "")["recorded"] if capture else None
    except TraceError:
        return None


def profiler_of(path) -> str:
    """What recorded the trace file, from its first bytes (nothing converted): "torch.profiler" for a Kineto JSON
    (gzip-compressed or not), else "nsys"; OSError where it cannot be read."""
    p = Path(path)
    return "torch.profiler" if p.is_file() and p.stat().st_size and kineto_json.looks_like_json(p) else "nsys"


def rule_ids() -> list[str]:
    """Every rule's id, sorted (what --fail-on-new may name)."""
    return sorted({r.id for r in diagnosis.rules()})


def identity_of(path) -> cycles.Identity:
    """What tells the trace's run apart (cycles.Identity): its profiler, host, process, rank and span (TraceError,
    OSError on bad input)."""
    with Trace.open(path) as t:
        k = t.kineto_identity
        start = t.session_start_utc_ns
        end = start + int(k["end_ns"]) if start is not None and k.get("end_ns", "").isdigit() else None
        return cycles.Identity(t.profiler, t.hostname, k.get("pid", ""), k.get("rank", ""), start, end)


def one_run(paths: list) -> bool:
    """Whether several traces are the cycles of one torch.profiler run (cycles.is_one_run), not ranks: read as one
    run with one verdict (analyze_cycles) where they are."""
    if len(paths) < 2 or not all(profiler_of(p) == "torch.profiler" for p in paths):  # nsys ranks: nothing opened
        return False
    return cycles.is_one_run([identity_of(p) for p in paths])


def analyze_cycles(paths: list, opts: Options | None = None, *, where=None, progress=None,
                   on_start: Callable[[object], None] | None = None) -> cycles.Cycles:
    """Several traces of one run (one_run): each analysed alone where `where` runs it (default: here, one after the
    other), in time order, and merged into the run's one verdict (analysis/cycles.py)."""
    opts = opts or Options()
    ordered = sorted(paths, key=lambda p: identity_of(p).start_utc_ns or 0)
    labels = [Path(p).name for p in ordered]
    with where or parallel.executor(1, None, len(ordered)) as ex:
        if on_start:
            on_start(ex)
        summaries = ex.map(cycle_summary, [(str(p), opts) for p in ordered], progress or (lambda msg: None))
    return cycles.merge(labels, summaries)


def cycle_summary(path: str, opts: Options) -> dict:
    """One cycle's analysis summary, as analyze-trace makes it for the file alone: what a worker process runs."""
    return analyze(path, options_for(Path(path), opts.step_regex, None, opts.min_gap_ns, top=opts.top,
                                     link_gbps=opts.link_gbps)).summary


def traces_given(paths) -> list[Path]:
    """The traces a command line names: each file as given, each folder as the traces in it (load/inputs.traces_in:
    TraceError where it holds none)."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += traces_in(p) if p.is_dir() else [p]
    return out

