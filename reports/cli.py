"""`compare-traces [RUN_DIR|TRACE ...] --out DIR`: the comparison report (PNGs, report.md, report.html)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from analysis.errors import TraceError

from . import charts, render
from .collect import BUNDLED, ReportInputError, find_bench, find_traces
from .compare import results_table, stage_row

CHARTS = [("Throughput", "throughput.png"), ("GPU utilisation", "utilization.png"),
          ("GPU idle time per step", "gaps.png"), ("DtoH duration and bandwidth", "dtoh.png"),
          ("Copy-compute overlap", "overlap.png"), ("One step per stage", "timelines.png")]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", default="out/report", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--bench", "bench_path", type=click.Path(dir_okay=False, path_type=Path),
              help="bench JSON (`make bench`); default: bench.json in the given folders")
@click.option("--link-gbps", default=55.0, show_default=True)
def main(paths, out_dir, bench_path, link_gbps):
    """Compare stages: one trace per stage from run folders (runs/<stage>/<stage>.sqlite), files, or, with no
    argument, the H200 traces bundled with the toolkit."""
    from analysis import Trace
    from analysis.summary import Options, analyze

    paths = list(paths)
    try:
        traces = find_traces(paths)
        bench = find_bench(paths, bench_path)
    except ReportInputError as e:
        _fail(str(e))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, timeline_items, opened = [], [], []
    try:
        for i, (stage, path) in enumerate(traces.items(), 1):
            click.echo(f"compare-traces: [{i}/{len(traces)}] analysing {stage} ({path.name})", err=True)
            t = Trace.open(path)
            opened.append(t)
            a = analyze(t, Options(link_gbps=link_gbps))
            rows.append(stage_row(stage, a, bench.get(stage)))
            if not stage.endswith("-long"):
                timeline_items.append((stage, a, t))
        df = results_table(rows)
        click.echo("compare-traces: drawing charts", err=True)
        charts.throughput(df, out_dir / "throughput.png")
        charts.utilization(df, out_dir / "utilization.png")
        charts.gaps(df, out_dir / "gaps.png")
        charts.dtoh(df, out_dir / "dtoh.png", link_gbps)
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
    chart_map = dict(CHARTS)
    md = render.markdown(df, {t: n for t, n in CHARTS}, {s: str(p) for s, p in traces.items()}, note)
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(render.html_page(render.results_markdown(df), df, {t: n for t, n in CHARTS}, note))
    (out_dir / "results.json").write_text(json.dumps(df.drop(columns=["diagnosis"]).to_dict("records"), indent=2,
                                                     default=float) + "\n")
    click.echo(render.results_markdown(df))
    click.echo(f"report: {out_dir / 'report.md'}, {out_dir / 'report.html'} and {len(chart_map)} PNGs in {out_dir}")


def _fail(msg):
    click.echo(f"compare-traces: {msg}", err=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
