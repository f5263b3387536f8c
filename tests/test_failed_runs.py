"""A failed run is marked failed everywhere (issue 49, item 1): `nsys-transfer run`, analyze-trace (from the run record
beside the trace, and from the trace alone), verify and compare-traces; a program that cannot start is refused before
nsys runs. Real captures of two small CPU programs: one raises at step 3, one finishes."""
import json
import os
import shutil
import sys

import pytest

from conftest import run_cli
from nsys_transfer.analysis.sections.program_end import ending_error

CRASH = """import time, nvtx
for i in range(5):
    with nvtx.annotate(f"step {i}"):
        time.sleep(0.05)
        if i == 3:
            raise RuntimeError("boom at step 3")
"""
FINISH = """import time, nvtx
for i in range(5):
    with nvtx.annotate(f"step {i}"):
        time.sleep(0.05)
"""


def _capture(nsys, folder, name, source):
    """`nsys-transfer run` of the program `source` into folder/runs/NAME/NAME; the completed process."""
    prog = folder / f"{name}.py"
    prog.write_text(source)
    env = {**os.environ, "NSYS": nsys.path}
    return run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(folder / "runs" / name / name), "--trace",
                   "nvtx,osrt", "--sample", "none", "--", sys.executable, str(prog), env=env, timeout=300)


@pytest.fixture(scope="module")
def runs(nsys, tmp_path_factory):
    """runs/crash (exit 1 at step 3) and runs/finish, each captured for real."""
    folder = tmp_path_factory.mktemp("failed")
    crash = _capture(nsys, folder, "crash", CRASH)
    finish = _capture(nsys, folder, "finish", FINISH)
    assert finish.returncode == 0, finish.stderr[-2000:]
    return folder / "runs", crash


def test_run_fails_with_the_programs_status(runs):
    _, crash = runs
    assert crash.returncode == 1, crash.stderr[-2000:]
    assert "the program exited with status 1" in crash.stderr


def test_analyze_trace_says_the_run_failed_first(runs, tmp_path):
    folder, _ = runs
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(folder / "crash" / "crash.sqlite"), "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[1].startswith("!! FAILED RUN: the program exited with status 1 (RuntimeError: boom at step 3)")
    assert "a failed run: not its throughput" in r.stdout
    s = json.loads(out.read_text())
    assert s["trace"]["program_end"] == {"exit_code": 1, "failed": True, "error": "RuntimeError: boom at step 3",
                                         "source": "run record"}
    assert s["diagnosis"][0]["rule"] == "failed-run" and s["diagnosis"][0]["severity"] == "high"
    r = run_cli("-m", "nsys_transfer.analysis", str(folder / "finish" / "finish.sqlite"), "--json", str(out))
    s = json.loads(out.read_text())
    assert "FAILED" not in r.stdout and s["trace"]["program_end"]["failed"] is False
    assert not any(d["rule"] == "failed-run" for d in s["diagnosis"])


def test_the_trace_alone_shows_the_failure(runs, tmp_path):
    """Without its run record, the program's stderr that nsys stored in the export ends with the traceback."""
    folder, _ = runs
    alone = tmp_path / "crash.sqlite"
    shutil.copyfile(folder / "crash" / "crash.sqlite", alone)
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(alone), "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    end = json.loads(out.read_text())["trace"]["program_end"]
    if end["source"] is None:
        pytest.skip("this nsys stores no program output in its export (ProcessStreams: nsys 2024+)")
    assert end == {"exit_code": None, "failed": True, "error": "RuntimeError: boom at step 3", "source": "trace"}
    assert "!! FAILED RUN: the program failed (RuntimeError: boom at step 3)" in r.stdout


def test_verify_refuses_a_failed_run(runs):
    folder, _ = runs
    r = run_cli("-m", "nsys_transfer", "verify", str(folder / "finish" / "finish.sqlite"),
                str(folder / "crash" / "crash.sqlite"))
    assert r.returncode == 2 and "crash.sqlite is of a failed run" in r.stderr, r.stderr[-2000:]


def test_the_report_lists_the_failed_run_as_failed(runs, tmp_path):
    folder, _ = runs
    r = run_cli("-m", "nsys_transfer.reports", str(folder), "--out", str(tmp_path / "rep"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| crash | FAILED (exit 1) |  |" in md  # no steps/s
    crash_section = md.split("### crash")[1].split("###")[0]
    assert "No finding of note" not in crash_section and "**failed-run**" in crash_section
    rows = {r["stage"]: r for r in json.loads((tmp_path / "rep" / "results.json").read_text())}
    assert rows["crash"]["steps_per_s"] is None and rows["crash"]["run"] == "FAILED (exit 1)"
    assert rows["finish"]["steps_per_s"] > 0 and rows["finish"]["run"] == ""


def test_a_program_that_cannot_start_is_refused_before_nsys(nsys, tmp_path):
    env = {**os.environ, "NSYS": nsys.path}
    for command, said in (([sys.executable, str(tmp_path / "nope.py")], "nope.py: no such file"),
                          (["no-such-program-here"], "no-such-program-here: no such program on PATH"),
                          ([str(tmp_path / "nope")], "nope: no such program")):
        r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "x"), "--", *command, env=env)
        assert r.returncode == 2 and said in r.stderr, r.stderr[-2000:]
        assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("x*"))


def test_ending_error_reads_only_a_final_traceback():
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    f()\nValueError: bad\n'
    assert ending_error(tb) == "ValueError: bad"
    assert ending_error(tb + "  note: an indented note\n") == "ValueError: bad"
    assert ending_error(tb + "then the program went on\n") is None  # a traceback it logged is not its end
    assert ending_error("warning: something\n") is None
    assert ending_error("") is None
    assert ending_error("/venv/bin/python: can't open file '/x/nope.py': [Errno 2] No such file or directory\n") \
        .startswith("/venv/bin/python: can't open file")
