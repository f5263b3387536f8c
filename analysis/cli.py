"""`analyze-trace TRACE`: parse options, run the analysis, print. One line and exit 2 on bad input."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from .errors import TraceError


def _window(value):
    if not value:
        return None
    try:
        a, b = (int(float(x)) for x in value.split(":"))
    except ValueError:
        raise click.BadParameter("use START_NS:END_NS (trace timestamps in ns)")
    if b <= a:
        raise click.BadParameter("END_NS must be after START_NS")
    return a, b


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="write the summary JSON here (docs/json-schema.md)")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False, path_type=Path), help="write the tables as CSV into this folder")
@click.option("--plots", "plot_dir", type=click.Path(file_okay=False, path_type=Path), help="write PNG charts into this folder")
@click.option("--min-gap-ms", default=1.0, show_default=True, help="smallest idle gap reported")
@click.option("--step-regex", default=r"^Batch \d+", show_default=True, help="NVTX ranges that are steps")
@click.option("--window", "window", default=None, help="analyse only START_NS:END_NS")
@click.option("--top", default=10, show_default=True, help="rows in the top-N lists")
@click.option("--pipeline-depth", default=10, show_default=True, help="for the short-capture rule")
@click.option("--link-gbps", default=55.0, show_default=True, help="host link speed, for the pageable-memcpy rule")
@click.option("-q", "--quiet", is_flag=True, help="no summary on stdout")
def main(trace, json_path, csv_dir, plot_dir, min_gap_ms, step_regex, window, top, pipeline_depth, link_gbps, quiet):
    """Say what the GPU and the transfers did in an Nsight Systems export (.sqlite, .sqlite.xz or .nsys-rep)."""
    import re

    try:
        re.compile(step_regex)
    except re.error as e:
        _fail(f"--step-regex {step_regex!r} is not a valid regular expression ({e})")
    win = _window(window)
    t_start = time.time()
    verbose = sys.stderr.isatty() or (trace.exists() and trace.is_file() and trace.stat().st_size > 64 << 20)
    progress = (lambda msg: click.echo(f"analyze-trace: {msg} ({time.time() - t_start:.1f} s)", err=True)) if verbose else None
    try:
        from .render import text_report
        from .summary import Options, analyze
        from .trace import Trace

        with Trace.open(trace) as t:
            a = analyze(t, Options(min_gap_ns=int(min_gap_ms * 1e6), step_regex=step_regex, window=win, top=top,
                                   pipeline_depth=pipeline_depth, link_gbps=link_gbps), progress)
            if plot_dir:
                from . import plots
                plot_dir.mkdir(parents=True, exist_ok=True)
                stem = trace.name.split(".")[0]
                plots.plot_timeline(a, t, plot_dir / f"{stem}_timeline.png", title=f"{stem}: last steps")
                plots.plot_gaps(a, plot_dir / f"{stem}_gaps.png", title=f"{stem}: GPU idle gaps >= {min_gap_ms:g} ms")
                plots.plot_dtoh(a, plot_dir / f"{stem}_dtoh.png", link_gbps, title=stem)
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(f"{trace}: {e}")
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(a.summary, indent=2))
    if csv_dir:
        csv_dir.mkdir(parents=True, exist_ok=True)
        for name, df in a.tables.items():
            df.to_csv(csv_dir / f"{name}.csv", index=False)
    if not quiet:
        click.echo(text_report(a.summary))
    if progress:
        progress("done")


def _fail(msg: str):
    click.echo(f"analyze-trace: {msg}", err=True)
    sys.exit(2)


def entry():
    """Console-script entry: click's own usage errors exit 2; anything unexpected is one line, not a traceback."""
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except Exception as e:  # pragma: no cover - a bug, reported briefly
        if os.environ.get("ANALYZE_TRACE_DEBUG"):
            raise
        click.echo(f"analyze-trace: internal error: {type(e).__name__}: {e} (set ANALYZE_TRACE_DEBUG=1 for details)", err=True)
        sys.exit(3)


if __name__ == "__main__":
    entry()
