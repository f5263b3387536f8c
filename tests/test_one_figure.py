"""One value per figure (issue 49): the text, the JSON, the report's Markdown and table, and the figures behind its
charts print each figure from the same value, on the bundled traces and the public exports beside the checkout."""
import json
import re

import pytest

from conftest import H200, ROOT, SHARED_TRACES, run_cli
from nsys_transfer.analysis.render.formats import MS
from nsys_transfer.analysis.result import Document, Result
from nsys_transfer.reports.charts import idle_per_step

SINGLE = sorted(H200.glob("*.sqlite.xz"))
SEVERAL = sorted(p for p in (ROOT / "reports" / "data" / "h200x2").glob("*.sqlite.xz") if "rank" not in p.name
                 and "linkprobe" not in p.name)
PUBLIC = sorted(SHARED_TRACES.glob("*.sqlite")) if SHARED_TRACES.is_dir() else []


def cli_answers(trace, analyze_trace) -> tuple[str, dict]:
    """analyze-trace's text and JSON for one trace, from one run, made once per test run (several tests read it, and
    tests/test_same_answers.py the same run's JSON)."""
    name = f"shared/traces/{trace.name}" if trace.parent == SHARED_TRACES else str(trace.relative_to(ROOT))
    return analyze_trace(name)


def ms(ns) -> str:
    return MS.format(ns / 1e6)


def finding_line(text: str, f: dict) -> str | None:
    """The text's line of this finding ('  [high] rule (cost, share): evidence'), found by its evidence."""
    return next((line for line in text.splitlines() if re.match(rf"\s+\[\w+\] {re.escape(f['rule'])} \(", line)
                 and line.endswith(f["evidence"])), None)


def shown(doc: dict) -> list[dict]:
    """The findings the text and the report list (the low ones only with --all)."""
    return [f for f in doc["diagnosis"] if f["severity"] in ("high", "medium")]


def check_text_against_json(text: str, doc: dict) -> None:
    """steps/s, the time a step, idle per step, the copy cost and its share of the link, the verdict's rule."""
    st = doc["steps"]
    if st["count"]:
        assert f"{st['per_second']:.2f} steps/s ({ms(1e9 / st['per_second'])} a step)" in text
        if st["mean_gpu_idle_ns"] is not None:
            assert f"GPU idle {ms(st['mean_gpu_idle_ns'])} per step" in text
    for f in shown(doc):
        if f["rule"] == "pageable-memcpy":
            line = finding_line(text, f)
            assert line and f"({ms(f['impact_ns'])}, " in line, line
            link = doc["trace"]["link"]["gbps"]
            assert "GB/s link)" not in line or f"of the {link:.0f} GB/s link)" in line, line
    verdict = next((line for line in text.splitlines() if line.startswith("verdict")), None)
    costed = [f for f in doc["diagnosis"] if f["severity"] != "info"]
    if verdict and costed and doc["gpu"]:
        assert verdict.split(": ", 1)[1].startswith(costed[0]["rule"] + " "), (verdict, costed[0]["rule"])


@pytest.mark.parametrize("trace", SINGLE + SEVERAL + PUBLIC, ids=lambda p: p.name)
def test_text_and_json_say_one_figure(trace, analyze_trace):
    text, doc = cli_answers(trace, analyze_trace)
    check_text_against_json(text, doc)


def test_several_gpus_give_one_verdict(analyze_trace):
    """The summary's verdict, the per-GPU lines and the limit line say one thing, and an output wait is no input."""
    text, doc = cli_answers(ROOT / "reports/data/h200x2/streams-x2.sqlite.xz", analyze_trace)
    verdict = text.splitlines()[1]
    assert verdict.startswith("verdict: rank-pipeline ") and "pin the output buffers" in verdict
    assert "input-bound" not in {f["rule"] for f in shown(doc)}  # the wait after the last step is the drain's
    text, doc = cli_answers(ROOT / "reports/data/h200x2/pinned-cpu8-x2gpu.sqlite.xz", analyze_trace)
    assert "input-bound" not in {f["rule"] for f in shown(doc)}
    assert "output-bound" in {f["rule"] for f in doc["diagnosis"]} and text.splitlines()[1].startswith(
        "verdict: host-cpu ")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """compare-traces on the bundled traces: report.md and results.json, by stage."""
    out = tmp_path_factory.mktemp("rep")
    r = run_cli("-m", "nsys_transfer.reports", "--out", str(out), "-j", "1", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {r["stage"]: r for r in json.loads((out / "results.json").read_text())}
    return (out / "report.md").read_text(), rows


def table_row(md: str, stage: str) -> dict:
    """The results table's cells of one stage, by column."""
    lines = md.splitlines()
    head = next(line for line in lines if line.startswith("| stage |"))
    row = next(line for line in lines if line.startswith(f"| {stage} |"))
    return dict(zip([c.strip() for c in head.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))


@pytest.mark.parametrize("trace", SINGLE, ids=lambda p: p.name)
def test_report_says_the_analysis_figures(trace, report, analyze_trace):
    md, rows = report
    stage = trace.name.split(".")[0]
    text, doc = cli_answers(trace, analyze_trace)
    row, cells = rows[stage], table_row(md, stage)
    idle = doc["steps"]["mean_gpu_idle_ns"]
    assert cells["idle per step"] == ms(idle) and row["gap_per_step_ms"] == pytest.approx(idle / 1e6)
    if row["throughput_source"] == "trace":
        assert cells["steps/s"] == f"{doc['steps']['per_second']:.2f}"
    # the idle chart's bars are parts of that figure
    assert sum(idle_per_step([stage], [Result(Document.from_json(doc))]).loc[stage]) == pytest.approx(idle / 1e6, rel=1e-6, abs=1e-6)
    section = md.split(f"### {stage}\n", 1)[1].split("\n### ", 1)[0]
    for f in shown(doc):
        if f["rule"] == "pageable-memcpy":
            line = next(x for x in section.splitlines() if x.startswith("- **pageable-memcpy**") and f["evidence"] in x)
            assert f"({f['severity']}, {ms(f['impact_ns'])} = " in line
            assert f["evidence"] in line and f["evidence"] in text
