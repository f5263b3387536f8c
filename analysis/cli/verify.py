"""`nsys-transfer verify BEFORE AFTER`: did the fix work? Both traces analysed the same way, compared, one verdict
first. Exit 0 when the gates pass, 1 when one fails, 2 on bad input (one trace given twice too) or when the two cannot
be compared."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import click

from . import charts, options, window
from .analyze import analyze_file
from ..facade import (NotComparable, Side, TraceError, check_same_profiler, options_for,
                      profiler_of, rule_ids, side_of, traces_given, verify)
from ..render import outputs
from ..render.verify_text import verify_report



def _fail(msg: str, code: int = 2):
    click.echo(f"verify: {msg}", err=True)
    sys.exit(code)


def trace_in(path: Path) -> Path:
    """The trace a path names: itself, or the newest trace in a run folder; TraceError when there is none."""
    if path.is_dir():  # the folder's traces (an export stands for its report; hidden ones never), per-rank ones aside
        found = sorted((p for p in traces_given([path]) if ".rank" not in p.name), key=lambda p: p.stat().st_mtime)
        if not found:
            raise TraceError(f"{path}: a folder with per-rank traces alone; give one trace of each side")
        return found[-1]
    return path


def check_two_traces(before: Path, after: Path) -> None:
    """TraceError when both sides are one trace: one path (a run folder and the trace it names too), or two files of
    the same content (a copy): a trace against itself says 'about as fast' of nothing that was changed."""
    b, a = trace_in(before), trace_in(after)
    if not (b.is_file() and a.is_file()):
        return  # a missing side is said where it is read
    if b.samefile(a):
        raise TraceError(f"both sides are the same trace ({b}): trace the program again after the change, under "
                         "another name, and compare the two")
    if b.stat().st_size == a.stat().st_size and _digest(b) == _digest(a):
        raise TraceError(f"both sides are the same trace: {b} and {a} have the same content (a copy); trace the "
                         "program again after the change, under another name, and compare the two")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load(path: Path, step_regex, win, label: str, plot_dir: Path | None = None, whole: bool = False,
         plot_stem: str | None = None) -> Side:
    """One side: its trace analysed (and charted into plot_dir: its timeline with the idle gaps coloured by cause,
    its gaps, copies and breakdown, named from plot_stem), and the workload record beside it when there is one."""
    trace = trace_in(path)
    if sys.stderr.isatty() or (trace.is_file() and trace.stat().st_size > 64 << 20):  # long work shows progress
        click.echo(f"verify: analysing {label}: {trace}", err=True)
    # the steady state on both sides, as the user's own clock after a warm-up: each side's set-up (a fix's buffers
    # and workers) is its own, and the window runs to the end of the last output, wherever the fix moved that work
    result = analyze_file(trace, options_for(trace, step_regex, win, whole=whole), plot_dir=plot_dir, tool="verify",
                          plot_stem=plot_stem)
    return side_of(trace, result, label, read_loop=not (whole or win))


def check_rule_names(fail_on_new: str | None) -> None:
    """TraceError when --fail-on-new names no rule, or a rule no trace finding has (a typo would never fire)."""
    if fail_on_new is None:
        return
    names = [r.strip() for r in fail_on_new.split(",") if r.strip()]
    known = rule_ids()
    unknown = [n for n in names if n not in known and n != "any"]
    if unknown or not names:
        shown = f"no rule {', '.join(map(repr, unknown))}" if unknown else "no rule"
        raise TraceError(f"--fail-on-new {fail_on_new!r}: {shown}; give 'any' or rule ids from {', '.join(known)}")


@click.command(cls=options.OneLineCommand, name="verify", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@options.step_regex_option(", for both traces (default: detected)")
@click.option("--window", "window_text", default=None, help="analyse only START:END of each trace (as analyze-trace)")
@click.option("--steps", "steps_text", default=None, help="analyse only these steps of each trace, FIRST:END")
@click.option("--fail-if-slower", type=float, default=None, metavar="PCT",
              help="exit 1 when AFTER is more than PCT percent slower than BEFORE")
@click.option("--fail-on-new", default=None, metavar="RULE[,RULE]",
              help="exit 1 when AFTER has a finding of these rules that BEFORE had not ('any': any high or medium)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="write the comparison here (docs/json-schema.md, 'verify')")
@click.option("--plots", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="draw both traces' GPU time side by side (verify_breakdown.png) and each trace's charts (timeline "
                   "with idle gaps coloured by cause, gaps, DtoH, breakdown) into this folder")
@click.option("--whole", is_flag=True, help="compare the whole captures, set-up and warm-up included (default: each "
              "one's steady state)")
@click.option("-q", "--quiet", is_flag=True, help="print only the verdict line")
def main(before, after, step_regex, window_text, steps_text, fail_if_slower, fail_on_new, json_path, plot_dir, whole,
         quiet):
    """Compare two traces of the same program, before and after a change: one verdict line first (faster or slower
    over the whole loop, the findings resolved and new), then the figures and every finding (resolved, reduced,
    unchanged, worse, new). Exit 0 ok, 1 a gate failed, 2 bad input or not comparable.

    Each side: an Nsight Systems export (.sqlite, .sqlite.xz, .nsys-rep, or a run folder) or a torch.profiler trace,
    both of the same profiler; of one program that finished (a failed run is refused); captured on the same GPUs, or
    both without GPU work (then the loops are compared by their time: mark each step with an NVTX range `step N`, or
    trace with `nsys-transfer run`, whose Python stacks find the loop). For a fair speed-up capture both with
    `nsys-transfer run --sample none --python-backtrace none`."""
    try:
        for flag, path, folder in (("--json", json_path, False), ("--plots", plot_dir, True)):
            outputs.check_destination(path, flag, folder, inputs=[before, after])
        win = window.parse_span(window_text, steps_text, whole)
        options.check_regex("--step-regex", step_regex)
        options.check_numbers(fail_if_slower=fail_if_slower)
        check_rule_names(fail_on_new)
        check_two_traces(before, after)
        if plot_dir:
            outputs.make_folder(plot_dir, "--plots")
        labels = ("before", "after")
        check_same_profiler({label: profiler_of(trace_in(p)) for label, p in zip(labels, (before, after))})
        stems = [charts.plot_stem_of(trace_in(p)) for p in (before, after)]
        names = list(stems)
        if stems[0] == stems[1]:  # one program's two runs: each side's charts under its own name
            stems = [f"{label}_{stem}" for label, stem in zip(labels, stems)]
        sides = [load(p, step_regex, win, label, plot_dir, whole, stem)
                 for p, label, stem in zip((before, after), labels, stems)]
        result = verify(*sides, fail_if_slower=fail_if_slower, fail_on_new=fail_on_new)
    except NotComparable as e:
        _fail(f"not comparable: {e}")
    except TraceError as e:
        _fail(str(e))
    except (OSError, MemoryError) as e:
        _fail(str(e))
    doc = result.document
    if json_path:
        try:
            outputs.write_json(json_path, doc.as_dict())
        except TraceError as e:
            _fail(str(e))
    if plot_dir:
        named = [f"{label}: {stem}" for label, stem in zip(labels, names)]  # which trace each bar is, not only its side
        if charts.plots().plot_breakdown([s.doc for s in sides], named, plot_dir / "verify_breakdown.png",
                                   title="where the GPU's time went") is None:
            (plot_dir / "verify_breakdown.png").unlink(missing_ok=True)  # an earlier run's: not this one's
            click.echo("verify: --plots: not drawn: verify_breakdown.png (no GPU activity in either trace)", err=True)
    if quiet:
        click.echo("\n".join([doc.verdict.line, *(f"GATE FAILED: {r}" for r in doc.gates.failed)]))
    else:
        click.echo(verify_report(doc))
    sys.exit(doc.exit_code)
