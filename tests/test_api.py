"""The Python API (analysis/api.py; issue 59, item 5): `from nsys_transfer import analyze` reads one trace, nsys's or
torch.profiler's, into a typed report whose every value is the analysis's own (the JSON analyze-trace --json writes,
the verdict line it prints, the charts --plots draws); `import nsys_transfer` stays cheap; and docs/notebook.ipynb
runs in a real Jupyter kernel and shows what it stores (tests/notebook_outputs.py), so it never goes stale."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest
from click.testing import CliRunner

import golden_answers
import notebook_outputs
from conftest import ROOT, run_cli

PER_SAMPLE = "tests/data/held_out/per_sample_metrics_nsys2024.sqlite.xz"  # nsys; a golden answer holds its JSON
KINETO = ROOT / "tests" / "data" / "kineto" / "kineto_min_gpu.pt.trace.json.gz"  # torch.profiler


@pytest.fixture(scope="module")
def nsys_report():
    from nsys_transfer import analyze
    return analyze(ROOT / PER_SAMPLE)


@pytest.fixture(scope="module")
def kineto_report():
    from nsys_transfer import analyze
    return analyze(KINETO)


def test_importing_nsys_transfer_loads_neither_the_analysis_nor_pandas():
    """A DataLoader worker imports nsys_transfer.fixes, and so nsys_transfer: the API is named lazily, and asking for
    it loads pandas and the analysis, not matplotlib (the first chart does)."""
    code = ("import sys, json; import nsys_transfer; a = sorted(m for m in sys.modules if m.startswith(('pandas', "
            "'matplotlib', 'nsys_transfer.'))); from nsys_transfer import analyze; "
            "print(json.dumps([a, 'pandas' in sys.modules, 'matplotlib' in sys.modules, analyze.__module__]))")
    r = run_cli("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [[], True, False, "nsys_transfer.analysis.api"]


def test_the_report_holds_the_analysis_own_values(nsys_report):
    """The JSON is analyze-trace --json's byte for byte (its golden answer), the findings are its findings read back
    typed, the verdict is the line the text prints, and each DataFrame is a table or the JSON's rows."""
    from nsys_transfer.analysis.facade import time_breakdown
    from nsys_transfer.analysis.result import CodeSite, Finding, Prediction
    r = nsys_report
    s = json.loads(json.dumps(r.summary))
    s["trace"].pop("path")
    assert golden_answers.text(s) == (golden_answers.STORE / golden_answers.file_name(PER_SAMPLE)).read_text()
    assert all(isinstance(f, Finding) for f in r.findings)
    assert [f.as_dict() for f in r.findings] == r.summary["diagnosis"]
    top = r.verdict.finding
    assert top is r.findings[0] and top.rule == "host-sync" and isinstance(top.line, CodeSite)
    assert top.line.place == "per_sample_metrics.py:61" and top.line.code == "if y in top5[i]:"
    assert isinstance(top.prediction, Prediction) and top.prediction.steady == (2.75, 2.96)
    assert str(top.prediction) in r.text()  # what the fix buys, as the text says it under the finding
    assert " ".join(r.verdict.text.split()) in " ".join(r.text().split())
    idle = r.idle_by_cause
    assert list(idle["idle_ns"]) == sorted((c["idle_ns"] for c in r.summary["idle"]["causes"]), reverse=True)
    assert list(idle.columns) == ["cause", "subject", "idle_ns", "device"]
    assert list(zip(r.breakdown["part"], r.breakdown["time_ns"])) == time_breakdown(r.result.doc)
    assert r.breakdown["share"].sum() == pytest.approx(1)
    copies = r.copies
    assert copies.equals(r.tables["memcpy"]) and len(copies) == 75357
    copies.loc[:, "bytes"] = 0  # a copy: the report's own stays as it is
    assert r.copies.equals(r.tables["memcpy"])
    assert r.kernels.equals(r.tables["kernels_top"]) and r.steps.empty and r.gaps.empty
    sites = r.summary["code"]["idle"]["launch"]
    lines = r.code_lines
    assert list(lines["time_ns"]) == [x["ns"] for x in sites] and set(lines["kind"]) == {"idle"}
    assert list(lines["place"]) == ["per_sample_metrics.py:61", "per_sample_metrics.py:56", "per_sample_metrics.py:54"]
    p = r.predictions
    assert list(p["rule"]) == ["host-sync", "input-bound"]  # the predicted findings (not the info note)
    assert tuple(p.loc[0, ["steady_low_x", "steady_high_x", "whole_low_x", "whole_high_x"]]) == (2.75, 2.96, 2.19, 2.97)
    assert r.all_fixed == Prediction.of(r.summary["predicted"]["all_fixed"])


def test_the_charts_are_the_figures_analyze_trace_draws(nsys_report, tmp_path):
    """Each chart is the figure --plots writes (render/charts.trace_chart, saved by render/figure.save): the same PNG;
    a chart --plots leaves out is None (this trace has no idle gap of 1 ms or more)."""
    from matplotlib.figure import Figure

    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.render import charts, plots
    r = nsys_report
    assert r.plot.gaps() is None and r.plot.gpus() is None
    with Trace.open(r.path) as t:
        for kind, fig in (("breakdown", r.plot.breakdown()), ("timeline", r.plot.timeline())):
            assert isinstance(fig, Figure) and fig.axes
            chart = charts.trace_chart(kind, r.result, t, "per_sample_metrics_nsys2024")
            written = plots.save(chart, tmp_path / kind)
            assert fig._repr_png_() == written.read_bytes(), kind  # what a notebook shows is the file


def test_a_torch_profiler_trace_reads_the_same(kineto_report, tmp_path):
    """The same calls on a torch.profiler trace: its JSON is analyze-trace's, its steps, lines and charts are there."""
    from nsys_transfer.analysis.cli.analyze import main as analyze_trace
    r = kineto_report
    out = tmp_path / "k.json"
    assert CliRunner().invoke(analyze_trace, [str(KINETO), "--json", str(out), "-q"]).exit_code == 0
    assert json.loads(json.dumps(r.summary)) == json.loads(out.read_text())
    assert r.summary["trace"]["profiler"] == "torch.profiler" and "torch.profiler trace" in r.warnings[0]
    assert r.verdict.finding.rule == "gpu-idle-cpu-bound" and r.verdict.text.startswith("verdict: gpu-idle-cpu-bound")
    assert len(r.steps) == 8 and r.steps["name"].str.startswith("ProfilerStep#").all()
    assert {"idle", "copies"} == set(r.code_lines["kind"]) and "calls .argmax()" in set(r.code_lines["code"])
    assert r.predictions.loc[0, "says"] == str(r.findings[0].prediction)
    assert r.plot.dtoh() is not None and r.plot.timeline() is not None and r.plot.gaps() is not None


def test_one_trace_at_a_time_and_bad_options_said_in_one_line():
    from nsys_transfer import analyze
    from nsys_transfer.analysis import TraceError
    with pytest.raises(TraceError, match="holds 2 traces, analyze\\(\\) reads one"):
        analyze(ROOT / "tests" / "data" / "nsys2024")  # a folder of two: ranks or cycles are analyze-trace's
    with pytest.raises(TraceError, match="--min-gap-ms -1: must be at least 0"):
        analyze(KINETO, min_gap_ms=-1)
    with pytest.raises(TraceError, match="--window and --steps both name the span"):
        analyze(KINETO, window="1s:", steps="1:")


def test_findings_and_lines_read_back_from_every_stored_answer():
    """Finding.of and CodeSite.of read the JSON as_dict wrote, exactly, on every stored answer."""
    from nsys_transfer.analysis.result import CodeSite, Finding
    for key, doc in golden_answers.load().items():
        for d in doc.get("diagnosis") or []:
            assert Finding.of(d).as_dict() == d, (key, d["rule"])
        code = doc.get("code") or {}
        for sites in [*(code.get("idle") or {}).values(), *(code.get("copies") or {}).values(), code.get("cpu") or []]:
            for site in sites:
                assert CodeSite.of(site).as_dict() == site, key


def test_the_notebook_runs_in_a_jupyter_kernel_and_shows_what_it_stores():
    """docs/notebook.ipynb, run from docs/ by nbclient in a kernel of this Python: no cell fails, each prints the text
    it stores and displays the kinds of output it stores (tables, charts)."""
    missing = [m for m in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        why = f"{', '.join(missing)} not installed (pip install -e '.[dev]'): docs/notebook.ipynb is not run"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the notebook: {why}")
        pytest.skip(why)
    import nbformat
    stored = notebook_outputs.shown(nbformat.read(notebook_outputs.NOTEBOOK, as_version=4))
    ran = notebook_outputs.shown(notebook_outputs.execute())
    assert ran == stored, "docs/notebook.ipynb shows other outputs than it stores: if meant, python " \
                          "tests/notebook_outputs.py --update"
