"""`compare-traces [RUN_DIR|TRACE ...] --out DIR`: the comparison report (PNGs, report.md, report.html)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pandas as pd

from ..analysis.cli.options import (OneLineCommand, check_numbers, chosen_executor, executor_options,
                                    link_gbps_option, probe_option)
from ..analysis.facade import (NotComparable, Trace, TraceError, analyze, analyze_runs, check_same_profiler,
                               loop_of, options_for, profiler_of, read_record, run_record_beside)
from ..analysis.render import outputs
from ..analysis.render.rank_plots import plot_ranks
from ..analysis.result import Document, Result
from ..nsys_core.contracts import DEFAULT_LINK_GBPS

from . import charts, render
from .collect import (ReportInputError, bundled_multi_gpu, find_bench, find_probe, find_runs,
                      find_scaling)
from .compare import before_after, gpu_rows, results_table, scaling_summary, stage_row

CHARTS = [("Throughput", "throughput.png"), ("GPU utilisation", "utilization.png"),
          ("GPU idle time per step, by cause", "gaps.png"), ("DtoH duration and bandwidth", "dtoh.png"),
          ("Copy-compute overlap", "overlap.png"), ("One step per stage", "timelines.png")]
NOT_DRAWN = {"throughput.png": "no trace gives steps/s", "utilization.png": "no trace has GPU activity",
             "gaps.png": "no trace has both steps and GPU activity", "dtoh.png": "no trace has DtoH copies",
             "overlap.png": "no trace has DtoH copies and kernels", "timelines.png": "no trace has steps"}
GPU_CHARTS = ("utilization.png", "gaps.png", "dtoh.png", "overlap.png")  # nothing to draw without GPU activity
BUNDLED_DIR = "bundled"  # --bundled: the bundled H200 report's own folder inside --out
# what a report writes into --out, and so what the next report removes first (nothing else there is touched)
REPORT_FILES = ("report.md", "report.html", "results.json", "gpus.json", "before_after.png", "gpus_*.png",
                *(name for _, name in CHARTS))


@click.command(cls=OneLineCommand, name="compare-traces", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", default="out/report", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--bench", "bench_path", type=click.Path(dir_okay=False, path_type=Path),
              help="bench JSON (`make bench`); default: bench.json in the given folders")
@link_gbps_option("each trace's own, from its GPU and fastest copy")
@probe_option(" (python -m nsys_transfer.workloads.linkprobe); default: probe.json in the given folders")
@click.option("--bundled", is_flag=True,
              help="also the report of the H200 traces bundled with the toolkit, always in OUT/bundled/, its results "
                   "table in OUT/report.md (with no PATHS: OUT/report.md says there are no runs yet; `make report` "
                   "passes it unless BUNDLED=0)")
@executor_options
def main(paths, out_dir, bench_path, link_gbps, probe_path, bundled, jobs, dask):
    """Compare stages: one trace per stage from run folders (runs/<stage>/<stage>.sqlite), files, or, with no
    argument, the H200 traces bundled with the toolkit. Multi-GPU runs (`make profile GPUS=N`: <stage>-x<N>gpu)
    get their own section: every GPU side by side and the shared resource that limits them."""
    paths = list(paths)
    try:
        check_numbers(link_gbps=link_gbps)
        outputs.check_destination(out_dir, "--out", folder=True)
        # --bundled without PATHS: no runs of the user's yet; the bundled report in its own folder all the same
        mine = _inputs(paths, bench_path, probe_path, jobs, dask) if paths or not bundled else None
        theirs = _inputs([], None, None, jobs, dask) if bundled else None
        if mine is not None:
            check_same_profiler({str(p): profiler_of(p) for p in [*mine.traces.values(), *(
                p for run in mine.multi.values() for p in run)]})
    except (ReportInputError, TraceError) as e:
        _fail(str(e))
    except NotComparable as e:
        _fail(f"not comparable: {e}")
    if mine is not None and not mine.traces and not mine.multi:
        _fail(f"no traces to compare in {', '.join(map(_shown, paths))}" if paths else "no traces to compare")
    click.echo(f"compare-traces: reporting {_listed(mine) if mine else 'no runs of yours'} into {out_dir}"
               + (f"; and the bundled H200 traces into {out_dir / BUNDLED_DIR}" if theirs else ""), err=True)
    created = outputs.first_missing(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        clear_report(out_dir)
        also = None
        if theirs:
            df = _report(theirs, out_dir / BUNDLED_DIR, link_gbps, echo=False)
            also = (BUNDLED_DIR, render.results_markdown(df) if len(df) else "")
        if mine is not None:
            _report(mine, out_dir, link_gbps, also=also)
        else:
            _no_runs(out_dir, also)
    except OSError as e:
        outputs.remove_created(created)
        _fail(f"{e.filename or out_dir}: {e.strerror or e}; no report written")
    except BaseException:  # a failed run leaves no half-made (or empty) report folder behind
        outputs.remove_created(created)
        raise


@dataclass
class Inputs:
    """What one report reads: its traces by stage, its multi-GPU runs, and the records beside them."""
    paths: list
    traces: dict
    multi: dict
    bench: dict
    probe: dict | None
    probe_file: Path | None
    scaling: list
    where: object


def _inputs(paths: list[Path], bench_path, probe_path, jobs, dask) -> Inputs:
    """The inputs of a report of `paths` (none: the bundled H200 traces); ReportInputError, TraceError if bad."""
    traces, multi = find_runs(paths)
    if not paths:
        multi = bundled_multi_gpu()
    probe, probe_file = find_probe(paths, probe_path)
    return Inputs(paths, traces, multi, find_bench(paths, bench_path), probe, probe_file,
                  scaling_summary(find_scaling(paths)[0]), chosen_executor(jobs, dask, sum(map(len, multi.values()))))


def _listed(i: Inputs) -> str:
    """The traces a report reads, in words: where from and which."""
    src = ", ".join(map(_shown, i.paths)) if i.paths else "the bundled H200 traces (reports/data/h200, h200x2)"
    names = list(i.traces) + [f"{run} ({len(p)} trace{'s' if len(p) > 1 else ''}, several GPUs)"
                              for run, p in i.multi.items()]
    return f"{len(i.traces) + sum(map(len, i.multi.values()))} traces from {src}: {', '.join(names)}"


def clear_report(out_dir: Path) -> None:
    """Remove what an earlier report wrote into out_dir (REPORT_FILES, and its bundled/ report), so the folder
    holds only this run's files; any other file there stays."""
    for folder in (out_dir, out_dir / BUNDLED_DIR):
        for pattern in REPORT_FILES:
            for f in folder.glob(pattern):
                if f.is_file():
                    f.unlink()
    if (out_dir / BUNDLED_DIR).is_dir() and not any((out_dir / BUNDLED_DIR).iterdir()):
        (out_dir / BUNDLED_DIR).rmdir()


def _report(i: Inputs, out_dir: Path, link_gbps: float | None, also: tuple[str, str] | None = None,
            echo: bool = True) -> pd.DataFrame:
    """Analyse every trace, draw the charts and write report.md, report.html and results.json into out_dir; `also`:
    (folder, results table) of the bundled report beside it. Returns the results table."""
    paths, traces, multi, bench = i.paths, i.traces, i.multi, i.bench
    rows, timeline_items, opened, analyses = [], [], [], []
    gpus_md, gpu_charts = "", {}
    link, line_gbps = None, None  # the DtoH chart's link line: the first trace's own link (or --link-gbps)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        gpus_md, gpu_charts = _multi_gpu_section(multi, out_dir, i.probe, i.probe_file, i.scaling,
                                                 link_gbps or DEFAULT_LINK_GBPS, i.where)
        for n, (stage, path) in enumerate(traces.items(), 1):
            click.echo(f"compare-traces: [{n}/{len(traces)}] analysing {stage} ({path.name})", err=True)
            t = Trace.open(path)
            opened.append(t)
            # the analysis analyze-trace gives by default (its steady state, each trace's own link unless --link-gbps
            # sets one): every figure the report prints is the one the text and the JSON print for that trace
            # (a stage row reads the trace's own figures: GPUs are compared in the multi-GPU runs' section)
            a = analyze(t, options_for(path, link_gbps=link_gbps), compare_gpus=False)
            doc = a.doc
            if link is None and (link_gbps or doc.trace.link.gbps):  # the chart's line: the traces' own
                link = doc.trace.link
                line_gbps = line_gbps or link_gbps or link.gbps
            if doc.warnings:
                click.echo(f"compare-traces: {stage}: warning: {'; '.join(doc.warnings)}", err=True)
            rows.append(stage_row(stage, a, bench.get(stage)))
            if paths:  # the user's runs: each one's loop as verify reads it (the bundled stages' table stays as it is)
                rows[-1]["loop_s"] = _loop_s(path, a.doc)
            analyses.append(a)  # verify's figures for a pair: the steady state of each, this same analysis
            if not stage.endswith("-long"):
                timeline_items.append((stage, a, t))
        df = results_table(rows)
        pair = before_after(list(traces), list(traces.values()), analyses, out_dir) if not multi else None
        chart_map, missing = _draw(df, list(traces), analyses, timeline_items, out_dir, line_gbps, link) \
            if len(df) else ({}, [])
    except TraceError as e:
        _fail(str(e))
    finally:
        for t in opened:
            t.close()
    note = _note(paths, bench, missing)
    captions = {"dtoh.png": dtoh_caption(df, line_gbps or DEFAULT_LINK_GBPS, link)} if "dtoh.png" in \
        chart_map.values() else {}
    sources = {**{s: str(p) for s, p in traces.items()}, **{s: ", ".join(map(str, ps)) for s, ps in multi.items()}}
    md = render.markdown(df, chart_map, sources, note, gpus_md, gpu_charts, pair, captions, also)
    _write(out_dir, df, md, render.html_page(render.results_markdown(df) if len(df) else "", df, chart_map, note,
                                             gpus_md, gpu_charts, pair, captions, also))
    if echo and len(df):
        click.echo(render.results_markdown(df))
        click.echo(render.results_note(df))
    if echo and gpus_md:
        click.echo(gpus_md)
    pngs = len(chart_map) + len(gpu_charts) + (1 if pair and pair[1] else 0)
    click.echo(f"report: {out_dir / 'report.md'}, {out_dir / 'report.html'} and {pngs} PNGs in {out_dir}"
               + (f"; the bundled H200 report: {out_dir / also[0] / 'report.md'}" if also else ""))
    return df


def _loop_s(path: Path, doc: Document) -> float | None:
    """The run's loop time in seconds, the one verify compares (facade.loop_of, which reads the document and gives the
    loop's own record); None where the trace gives none."""
    found = loop_of(path, doc)
    return found["duration_ns"] / 1e9 if found else None


def _no_runs(out_dir: Path, also: tuple[str, str] | None) -> None:
    """report.md and report.html when there is no run of the user's yet: how to make one, and the bundled report beside
    (its own folder, where it always is)."""
    md = render.no_runs_markdown(also)
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(render.no_runs_html(also))
    click.echo(f"report: {out_dir / 'report.md'} (no runs of yours yet) and {out_dir / 'report.html'}"
               + (f"; the bundled H200 report: {out_dir / also[0] / 'report.md'}" if also else ""))


def _note(paths, bench: dict, missing: list[str]) -> str:
    """The report's note: which traces, which unprofiled bench, and what could not be drawn."""
    src = "the H200 traces bundled in reports/data/h200" if not paths else ", ".join(map(str, paths))
    env = next((b.get("environment") for b in bench.values() if b.get("environment")), None)
    note = (f"Traces: {src}." + (f" Throughput: unprofiled bench on {env.get('gpu')} (torch {env.get('torch')}, "
                                 f"{env.get('cpus')} CPUs)." if env else ""))
    return note + (" Not drawn: " + "; ".join(missing) + "." if missing else "")


def _write(out_dir: Path, df: pd.DataFrame, md: str, html: str) -> None:
    """report.md, report.html and results.json (a figure nothing gives: null, never NaN)."""
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(html)
    records = df.drop(columns=["diagnosis"], errors="ignore").astype(object).where(df.notna().drop(
        columns=["diagnosis"], errors="ignore"), None).to_dict("records")
    (out_dir / "results.json").write_text(json.dumps(records, indent=2, default=float) + "\n")


def _draw(df, stages, analyses: list[Result], timeline_items, out_dir: Path, link_gbps, link
          ) -> tuple[dict[str, str], list[str]]:
    """The stage charts into out_dir: ({title: file} of those drawn, what was not drawn and why, in words)."""
    click.echo("compare-traces: drawing charts", err=True)
    drawn = {"throughput.png": charts.throughput(df, out_dir / "throughput.png"),
             "utilization.png": charts.utilization(df, out_dir / "utilization.png"),
             "gaps.png": charts.gaps(stages, analyses, out_dir / "gaps.png"),
             "dtoh.png": charts.dtoh(df, out_dir / "dtoh.png", link_gbps or DEFAULT_LINK_GBPS, link),
             "overlap.png": charts.overlap(df, out_dir / "overlap.png")}
    drawn["timelines.png"], no_steps = charts.timelines(timeline_items, out_dir / "timelines.png")
    missing = [f"{name} ({NOT_DRAWN[name]})" for _, name in CHARTS if not drawn[name] and name not in GPU_CHARTS]
    gpu_missing = [name for name in GPU_CHARTS if not drawn[name]]
    if gpu_missing and not any(a.doc.gpu for a in analyses):  # runs on the CPU: said once, not chart by chart
        missing.insert(0, f"the GPU's charts ({', '.join(gpu_missing)}: no trace has GPU activity)")
    else:
        missing[:0] = [f"{name} ({NOT_DRAWN[name]})" for name in gpu_missing]
    if drawn["timelines.png"] and no_steps:
        missing.append(f"{', '.join(no_steps)} in timelines.png (no steps found in "
                       f"{'its' if len(no_steps) == 1 else 'their'} trace)")
    return {title: name for title, name in CHARTS if drawn[name]}, missing


def dtoh_caption(df: pd.DataFrame, link_gbps: float, link) -> str:
    """What the DtoH chart's link line is (link: the analysis's trace.link, typed), and why a copy can stand above
    it."""
    source = (link.source if link else None) or "the default link speed"
    out = f"The dashed line is the host link, {link_gbps:g} GB/s: {source}."
    d = df[df["dtoh_gbps"].notna()]
    over = [f"{s} ({v:.1f} GB/s)" for s, v in zip(d["stage"], d["dtoh_gbps"]) if v > link_gbps]
    if over:
        out += (" " + ", ".join(over) + " run above it: " + (
            "the nominal is 85% of the PCIe raw rate, what pinned copies typically reach, and a good link does "
            "better (each trace's own link figure is raised to its fastest pinned copy: trace.link in the JSON)."
            if source.startswith("PCIe") else "the line is one trace's figure, and another trace's copies ran faster."))
    return out


def _multi_gpu_section(multi: dict, out_dir: Path, probe, probe_file, scaling, link_gbps, where) -> tuple[str, dict]:
    """Analyse each multi-GPU trace (every GPU side by side), chart it, and return the section's Markdown. The traces
    of every run are analysed where `where` (an analysis.executors.parallel executor) runs them, then merged run by run."""
    rows, verdicts, chart_files, ranks_json = [], {}, {}, {}
    workloads = {run: _run_beside(paths[0]) for run, paths in multi.items()}

    def started(ex) -> None:  # a Dask cluster is reached (or started) before the first message
        for i, (run, paths) in enumerate(multi.items(), 1):
            click.echo(f"compare-traces: [{i}/{len(multi)}] analysing the GPUs of {run} "
                       f"({', '.join(p.name for p in paths)})", err=True)
    results = analyze_runs(multi, options_for(None, link_gbps=link_gbps), probe=probe, workloads=workloads, where=where,
                           on_start=started)
    for run, result in results.items():
        r = result.ranks
        rows += gpu_rows(run, r)
        verdicts[run] = r.part.limit
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
