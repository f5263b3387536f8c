"""`analyze-trace TRACE`: parse options, run the analysis, print. One line and exit 2 on bad input."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from . import charts, options, window
from ..facade import (Dask, Options, Result, Spec, Trace, TraceError, analyze, analyze_cycles,
                      capture_verdict, capture_record_beside, defaults, not_built_notice,
                      one_run, options_for, read_record, run_record_beside, traces_given)
from ..render import outputs
from ..result import Document
from ..render.check_report import check_report, integrity_of
from ..render.ranks_text import ranks_report
from ..render.text import cycles_report, text_report


def _record(flag: str, path: Path | None, key: str, what: str, how: str) -> dict | None:
    """A JSON record given by `flag`, checked enough to use; one line and exit 2 when it is not."""
    if path is None:
        return None
    try:
        return read_record(path, key, what, how)
    except TraceError as e:
        _fail(f"{flag} {e}")


@click.command(cls=options.OneLineCommand, name="analyze-trace", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="write the summary JSON here (docs/json-schema.md)")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False, path_type=Path), help="write the tables as CSV into this folder")
@click.option("--plots", "plot_dir", type=click.Path(file_okay=False, path_type=Path), help="write PNG charts into this folder")
@click.option("--min-gap-ms", default=defaults.MIN_GAP_MS, show_default=True, help="smallest idle gap reported")
@options.step_regex_option(" (default: detected, e.g. 'Batch 7', 'step 12')")
@click.option("--window", "window", default=None,
              help="analyse only START:END: trace ns, or times from the capture's start with a unit (1200ms:4500ms, "
                   "1.2s:): the session start the export records, as nsys's timeline shows it (the header says "
                   "which origin); either end may be left open")
@click.option("--steps", "steps", default=None,
              help="analyse only these steps: FIRST:END, 0-based, END left out (3: skips the first three)")
@click.option("--whole", is_flag=True, help="the verdict over the whole capture, set-up and warm-up included "
              "(default: the steady state, past them; `setup` says what they were)")
@click.option("--top", default=defaults.TOP, show_default=True, help="rows in the top-N lists")
@click.option("--pipeline-depth", default=defaults.PIPELINE_DEPTH, show_default=True, help="for the short-capture rule")
@options.link_gbps_option("from the trace's GPU, its PCIe generation, and its fastest copy")
@click.option("--all", "show_all", is_flag=True, help="show low-impact findings too")
@options.probe_option(" of the machine (python -m nsys_transfer.workloads.linkprobe): measured shared DtoH capacity")
@click.option("--workload", "--run", "run_path", type=click.Path(dir_okay=False, path_type=Path),
              help="the workload's own record (python -m nsys_transfer.workloads --json; default: <trace>.workload.json beside it); not the "
              "profiling run record <trace>.run.json, which is read from beside the trace")
@click.option("-q", "--quiet", is_flag=True, help="no summary on stdout")
@click.option("--check", is_flag=True, help="print the trace's consistency figures (API calls vs GPU rows, events over "
              "time, nsys's messages from the run record beside it) and exit 1 when it is not to be trusted")
@options.executor_options
def main(traces, json_path, csv_dir, plot_dir, min_gap_ms, step_regex, window, steps, whole, top, pipeline_depth,
         link_gbps, show_all, probe_path, run_path, quiet, check, jobs, dask):
    """Say what the GPU and the transfers did, what limits the program and the fix, in an Nsight Systems export
    (.sqlite, .sqlite.xz or .nsys-rep) or a torch.profiler trace (Kineto JSON, .json or .json.gz, from
    export_chrome_trace or tensorboard_trace_handler: .pt.trace.json[.gz]); a folder stands for the traces in it. With
    the Python stacks `nsys-transfer run` samples beside the trace (BASE.pystacks.gz), each finding names its line of
    the program; a capture without GPU work shows the main thread's loop line by line, its set-up apart.

    With several GPUs in one trace (torchrun under nsys), or several traces (one per rank, put on one clock), it
    also compares the GPUs and names the resource that limits them."""
    try:
        traces = traces_given(traces)  # a folder stands for the traces in it
    except TraceError as e:
        _fail(str(e))
    if check:
        return _check(traces)
    if not quiet and not_built_notice():
        click.echo(not_built_notice(), err=True)
    win = _checked_options(window, steps, whole, step_regex, traces, json_path, csv_dir, plot_dir, min_gap_ms=min_gap_ms, top=top,
                           pipeline_depth=pipeline_depth, link_gbps=link_gbps)
    min_gap_ns = defaults.ns_of_ms(min_gap_ms)  # every analysis below takes ns
    probe = _record("--probe", probe_path, "verdict", "a link-probe record",
                    "make one with `python -m nsys_transfer.workloads.linkprobe --json FILE` on the GPU machine")
    run = _record("--run", run_path or run_record_beside(traces[0]), "throughput", "a workload record",
                  "`python -m nsys_transfer.workloads --json FILE` writes one")
    try:
        where = options.chosen_executor(jobs, dask, len(traces))  # with one trace too: a bad value is said, not ignored
    except TraceError as e:
        _fail(str(e))
    if len(traces) > 1:
        if win or whole:
            _fail(f"{win.flag if win else '--whole'} applies to one trace; with several traces each GPU is analysed "
                  "over its own steps")
        if _one_run(traces):  # a torch.profiler schedule's cycles: one run, one verdict
            return _main_cycles(traces, json_path, csv_dir, plot_dir, options_for(
                None, step_regex, None, min_gap_ns, link_gbps=link_gbps, top=top), show_all, quiet, where)
        given = [flag for flag, name in (("--top", "top"), ("--pipeline-depth", "pipeline_depth"), ("--all", "show_all"))
                 if _on_command_line(name)]
        if given:
            _fail(f"{given[0]} applies to one trace's findings; with several traces the report compares the GPUs "
                  "(analyse one trace for its findings)")
        return _main_ranks(traces, json_path, csv_dir, plot_dir, options_for(None, step_regex, None, min_gap_ns,
                                                                              link_gbps=link_gbps), probe, run, quiet, where)
    trace = traces[0]
    t_start = time.time()
    verbose = sys.stderr.isatty() or (trace.exists() and trace.is_file() and trace.stat().st_size > 64 << 20)
    progress = (lambda msg: click.echo(f"analyze-trace: {msg} ({time.time() - t_start:.1f} s)", err=True)) if verbose else None
    opts = options_for(trace, step_regex, win, min_gap_ns, top=top, pipeline_depth=pipeline_depth, link_gbps=link_gbps,
                       whole=whole)
    try:
        a = analyze_file(trace, opts, progress, plot_dir, probe=probe, workload=run)
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(f"{trace}: {e}")
    _warn(a.warnings)
    _save(a.summary, a.tables, json_path, csv_dir)
    if not quiet:
        click.echo(text_report(a.doc, show_all))
        if a.doc.ranks:
            click.echo(ranks_report(a.doc.ranks))
    if progress:
        progress("done")


def analyze_file(trace: Path, opts: Options, progress=None, plot_dir: Path | None = None,
                 tool: str = "analyze-trace", plot_stem: str | None = None, probe: dict | None = None,
                 workload: dict | None = None) -> Result:
    """One trace file's analysis (facade.analyze), as analyze-trace makes it, and its charts when plot_dir is given
    (TraceError, OSError on bad input); `tool` names the command in what it says about the charts, plot_stem starts
    their names (default: the file's name up to its first dot)."""
    with Trace.open(trace) as t:
        a = analyze(t, opts, probe=probe, workload=workload, progress=progress)
        if plot_dir:
            outputs.make_folder(plot_dir, "--plots")
            charts.plot_trace(a, t, plot_dir, plot_stem or charts.plot_stem_of(trace), opts.min_gap_ns, tool)
    return a


def _main_ranks(paths, json_path, csv_dir, plot_dir, opts: Options, probe, run, quiet, where):
    """Several traces (one per rank, say): every GPU side by side on one clock, each trace analysed where `where`
    (an analysis.executors.parallel executor) runs it."""
    t_start = time.time()
    progress = (lambda msg: click.echo(f"analyze-trace: {msg} ({time.time() - t_start:.1f} s)", err=True)) \
        if sys.stderr.isatty() else None

    def started(ex) -> None:
        if isinstance(ex, Dask) and not ex.local and any(not p.is_absolute() for p in paths):
            click.echo("analyze-trace: note: the Dask workers read relative paths from their own working folder",
                       err=True)
        if progress:
            progress(f"analysing {len(paths)} traces {ex.where}")
    try:
        r = analyze(list(paths), opts, probe=probe, workload=run, progress=progress, where=where, on_start=started)
        if plot_dir:
            outputs.make_folder(plot_dir, "--plots")
            drawing = charts.rank_plots()
            drawing.plot_ranks(r.ranks, plot_dir / "gpus.png", title=f"{len(paths)} traces")
            drawing.plot_rank_heatmap(r.ranks, plot_dir / "gpus_heatmap.png", title=f"{len(paths)} traces")
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(str(e))
    _warn(r.warnings)
    _save(r.summary, r.tables, json_path, csv_dir)
    if not quiet:
        click.echo(ranks_report(r.ranks.part))


def _one_run(traces) -> bool:
    """Whether the traces are one torch.profiler run's cycles (facade.one_run); one line and exit 2 on bad input."""
    try:
        return one_run(list(traces))
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(str(e))


def _main_cycles(paths, json_path, csv_dir, plot_dir, opts: Options, show_all: bool, quiet: bool, where):
    """Several traces of one torch.profiler run (a schedule's cycles): each analysed alone (in --jobs workers where
    asked), one verdict over the steady cycles, then the full analysis of the steady cycle with the median step."""
    if csv_dir or plot_dir:
        _fail(f"{'--csv' if csv_dir else '--plots'} applies to one trace; these {len(paths)} traces are one run's "
              "cycles: give one of them for its tables and charts")
    try:
        run = analyze_cycles(list(paths), opts, where=where)
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(str(e))
    detail = Document.from_json(run.detail)  # the steady cycle's document, typed once
    _warn(list(detail.warnings))
    _save(run.document(), {}, json_path, None)
    if not quiet:
        click.echo(cycles_report(run, detail, show_all))


def _check(traces) -> None:
    """analyze-trace --check: each trace's own consistency figures; exit 1 when one is not to be trusted."""
    trusted = True
    for path in traces:
        try:
            result = capture_verdict(path, pairs=True)
        except TraceError as e:
            _fail(str(e))
        except (OSError, MemoryError) as e:
            _fail(f"{path}: {e}")
        rec_path = capture_record_beside(path)
        record = None
        if rec_path is not None:
            try:
                record = read_record(rec_path, "nsys", "a run record", "`python -m nsys_transfer.profiling` writes one")
            except TraceError as e:
                click.echo(f"analyze-trace: ignoring {e}", err=True)
        text, ok = check_report(integrity_of(result), str(path), rec_path, record)
        click.echo(text)
        trusted &= ok
    sys.exit(0 if trusted else 1)


def _on_command_line(param: str) -> bool:
    """Whether the user gave this option (not its default)."""
    return click.get_current_context().get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE


def _checked_options(window_text, steps_text, whole, step_regex, traces, json_path, csv_dir, plot_dir, **numbers
                     ) -> Spec | None:
    """Every option value and output place, before any work: one line and exit 2 for the first that is wrong."""
    try:
        options.check_numbers(**numbers)
        for flag, path, folder in (("--json", json_path, False), ("--csv", csv_dir, True), ("--plots", plot_dir, True)):
            outputs.check_destination(path, flag, folder, inputs=traces)
        win = window.parse_span(window_text, steps_text, whole)
        options.check_regex("--step-regex", step_regex)
        return win
    except TraceError as e:
        _fail(str(e))


def _save(summary: dict, tables: dict, json_path, csv_dir) -> None:
    try:
        if json_path:
            outputs.write_json(json_path, summary)
        if csv_dir:
            outputs.write_tables(csv_dir, tables)
    except TraceError as e:
        _fail(str(e))


def _warn(warnings: list[str] | None) -> None:
    """What a damaged export made the analysis drop or replace, on one line (the JSON's `warnings` lists each)."""
    if warnings:
        click.echo(f"analyze-trace: warning: {'; '.join(warnings)}", err=True)


def _fail(msg: str):
    click.echo(f"analyze-trace: {msg}", err=True)
    sys.exit(2)


def entry():
    """Console-script entry (OneLineCommand: usage errors exit 2, a bug is one line with exit 3)."""
    main()


if __name__ == "__main__":
    entry()
