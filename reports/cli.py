"""`compare-traces [RUN_DIR|TRACE ...] --out DIR`: the comparison report (PNGs, report.md, report.html)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.render import outputs
from nsys_transfer.analysis.errors import TraceError
from nsys_transfer.analysis.load.inputs import read_record, run_record_beside
from nsys_transfer.analysis.cli.options import OneLineCommand, check_numbers, chosen_executor, executor_options
from nsys_transfer.analysis.render.plots import plot_ranks
from nsys_transfer.analysis.sections.program import toolkit_record
from nsys_transfer.analysis.ranks import RankOptions, default_labels, merge_parts, part_of_path, trace_labels
from nsys_transfer.analysis.summary import Options, analyze
from nsys_transfer.nsys_core.contracts import DEFAULT_LINK_GBPS

from nsys_transfer.reports import charts, render
from nsys_transfer.reports.collect import (ReportInputError, bundled_multi_gpu, find_bench, find_probe, find_runs,
                                           find_scaling)
from nsys_transfer.reports.compare import before_after, gpu_rows, results_table, scaling_summary, stage_row

CHARTS = [("Throughput", "throughput.png"), ("GPU utilisation", "utilization.png"),
          ("GPU idle time per step", "gaps.png"), ("DtoH duration and bandwidth", "dtoh.png"),
          ("Copy-compute overlap", "overlap.png"), ("One step per stage", "timelines.png")]


@click.command(cls=OneLineCommand, name="compare-traces", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", default="out/report", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--bench", "bench_path", type=click.Path(dir_okay=False, path_type=Path),
              help="bench JSON (`make bench`); default: bench.json in the given folders")
@click.option("--link-gbps", default=None, type=float,
              help="host link speed in GB/s (default: each trace's own, from its GPU and fastest copy)")
@click.option("--probe", "probe_path", type=click.Path(dir_okay=False, path_type=Path),
              help="link-probe JSON (python -m nsys_transfer.workloads.linkprobe); default: probe.json in the given folders")
@executor_options
def main(paths, out_dir, bench_path, link_gbps, probe_path, jobs, dask):
    """Compare stages: one trace per stage from run folders (runs/<stage>/<stage>.sqlite), files, or, with no
    argument, the H200 traces bundled with the toolkit. Multi-GPU runs (`make profile GPUS=N`: <stage>-x<N>gpu)
    get their own section: every GPU side by side and the shared resource that limits them."""
    paths = list(paths)
    try:
        check_numbers(link_gbps=link_gbps)
        outputs.check_destination(out_dir, "--out", folder=True)
        traces, multi = find_runs(paths)
        if not paths:
            multi = bundled_multi_gpu()
        bench = find_bench(paths, bench_path)
        probe, probe_file = find_probe(paths, probe_path)
        scaling = scaling_summary(find_scaling(paths)[0])
        where = chosen_executor(jobs, dask, sum(len(p) for p in multi.values()))
    except (ReportInputError, TraceError) as e:
        _fail(str(e))
    if not traces and not multi:
        _fail("no traces to compare")
    created = outputs.first_missing(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _report(paths, traces, multi, bench, probe, probe_file, scaling, out_dir, link_gbps, where)
    except OSError as e:
        outputs.remove_created(created)
        _fail(f"{e.filename or out_dir}: {e.strerror or e}; no report written")
    except BaseException:  # a failed run leaves no half-made (or empty) report folder behind
        outputs.remove_created(created)
        raise


def _report(paths, traces, multi, bench, probe, probe_file, scaling, out_dir: Path, link_gbps: float, where) -> None:
    """Analyse every trace, draw the charts and write report.md, report.html and results.json into out_dir."""
    rows, timeline_items, opened, summaries = [], [], [], []
    gpus_md, gpu_charts = "", {}
    try:
        gpus_md, gpu_charts = _multi_gpu_section(multi, out_dir, probe, probe_file, scaling,
                                                 link_gbps or DEFAULT_LINK_GBPS, where)
        for i, (stage, path) in enumerate(traces.items(), 1):
            click.echo(f"compare-traces: [{i}/{len(traces)}] analysing {stage} ({path.name})", err=True)
            t = Trace.open(path)
            opened.append(t)
            # the whole capture: the report compares the traces' throughput over the same work (verify does too)
            a = analyze(t, Options(link_gbps=link_gbps, run_record=toolkit_record(str(path)), whole=True))
            link_gbps = link_gbps or a.summary["trace"]["link"]["gbps"]  # the chart's line: the traces' own link
            if a.summary.get("warnings"):
                click.echo(f"compare-traces: {stage}: warning: {'; '.join(a.summary['warnings'])}", err=True)
            rows.append(stage_row(stage, a, bench.get(stage)))
            summaries.append(a.summary)
            if not stage.endswith("-long"):
                timeline_items.append((stage, a, t))
        df = results_table(rows)
        pair = before_after(list(traces), list(traces.values()), summaries, out_dir) if not multi else None
        if len(df):
            click.echo("compare-traces: drawing charts", err=True)
            charts.throughput(df, out_dir / "throughput.png")
            charts.utilization(df, out_dir / "utilization.png")
            charts.gaps(df, out_dir / "gaps.png")
            charts.dtoh(df, out_dir / "dtoh.png", link_gbps or DEFAULT_LINK_GBPS)
            charts.overlap(df, out_dir / "overlap.png")
            charts.timelines(timeline_items, out_dir / "timelines.png")
    except TraceError as e:
        _fail(str(e))
    finally:
        for t in opened:
            t.close()
    src = "the H200 traces bundled in reports/data/h200" if not paths else ", ".join(map(str, paths))
    env = next((b.get("environment") for b in bench.values() if b.get("environment")), None)
    note = (f"Traces: {src}." + (f" Throughput: unprofiled bench on {env.get('gpu')} (torch {env.get('torch')}, "
                                 f"{env.get('cpus')} CPUs)." if env else ""))
    chart_map = dict(CHARTS) if len(df) else {}
    sources = {**{s: str(p) for s, p in traces.items()}, **{s: ", ".join(map(str, ps)) for s, ps in multi.items()}}
    md = render.markdown(df, chart_map, sources, note, gpus_md, gpu_charts, pair)
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(render.html_page(render.results_markdown(df), df, chart_map, note, gpus_md,
                                                          gpu_charts, pair))
    records = df.drop(columns=["diagnosis"], errors="ignore").astype(object).where(df.notna().drop(
        columns=["diagnosis"], errors="ignore"), None).to_dict("records")  # a figure nothing gives: null, never NaN
    (out_dir / "results.json").write_text(json.dumps(records, indent=2, default=float) + "\n")
    if len(df):
        click.echo(render.results_markdown(df))
        click.echo(render.results_note(df))
    if gpus_md:
        click.echo(gpus_md)
    click.echo(f"report: {out_dir / 'report.md'}, {out_dir / 'report.html'} and {len(chart_map) + len(gpu_charts)} "
               f"PNGs in {out_dir}")


def _multi_gpu_section(multi: dict, out_dir: Path, probe, probe_file, scaling, link_gbps, where) -> tuple[str, dict]:
    """Analyse each multi-GPU trace (every GPU side by side), chart it, and return the section's Markdown. The traces
    of every run are analysed where `where` (an analysis.parallel executor) runs them, then merged run by run."""
    rows, verdicts, chart_files, ranks_json = [], {}, {}, {}
    calls, runs = [], []
    for run, paths in multi.items():
        opts = RankOptions(link_gbps=link_gbps, probe=probe, run=_run_beside(paths[0]))
        labels = default_labels(1) if len(paths) == 1 else trace_labels([p.name for p in paths])
        runs.append((run, opts, len(calls), len(paths)))
        calls += [(p, label, opts) for p, label in zip(paths, labels)]
    if calls:
        with where as ex:  # a Dask cluster is reached (or started) before the first message
            for i, (run, paths) in enumerate(multi.items(), 1):
                click.echo(f"compare-traces: [{i}/{len(multi)}] analysing the GPUs of {run} "
                           f"({', '.join(p.name for p in paths)})", err=True)
            parts = ex.map(part_of_path, calls)
    for run, opts, first, n in runs:
        r = merge_parts(parts[first:first + n], opts)
        rows += gpu_rows(run, r)
        verdicts[run] = r.summary["limit"]
        ranks_json[run] = r.summary
        name = f"gpus_{run}.png"
        plot_ranks(r, out_dir / name, title=run)
        chart_files[f"{run}: every GPU and the host-side DtoH they share"] = name
    if not rows and not scaling:
        return "", {}
    (out_dir / "gpus.json").write_text(json.dumps({"scaling": scaling, "runs": ranks_json}, indent=2) + "\n")
    note = ""
    if probe:
        v = probe.get("verdict", {})
        note = ("Link probe (`python -m nsys_transfer.workloads.linkprobe`, unprofiled" + (f", {_shown(probe_file)}" if probe_file else "")
                + "): " + "; ".join(f"{m} DtoH {sum(x['solo_gbps']) / len(x['solo_gbps']):.1f} GB/s per GPU alone, "
                                    f"{x['together_gbps']:.1f} GB/s all GPUs at once ({x['scaling']:.2f} x the sum)"
                                    for m, x in sorted(v.items(), reverse=True) if x.get("together_gbps")) + ".")
    return render.gpus_markdown(rows, verdicts, scaling, note), chart_files


def _run_beside(trace: Path) -> dict | None:
    """The workload record `profile stage` wrote beside the trace; a bad one is reported and left out."""
    path = run_record_beside(trace)
    try:
        return read_record(path, "throughput", "a workload record", "`python -m nsys_transfer.workloads --json FILE` writes one") \
            if path else None
    except TraceError as e:
        click.echo(f"compare-traces: {e}; its run's host CPU load is left out", err=True)
        return None


def _shown(path: Path) -> str:
    """A path as the reader knows it: relative to the working folder when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _fail(msg):
    click.echo(f"compare-traces: {msg}", err=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
