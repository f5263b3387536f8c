"""nsys's lost CPU samples weighed by what was lost (issue 57, item 5). A CPU-only run captured under load with
nsys-transfer run's defaults (tests/data/newcomer/loader_roll_lost_nsys2024: a DataLoader loop with two workers on a
busy 2-core machine) made nsys say "Some events (9) were lost (including Perf: 9)" and, per thread, "lost N CPU
profiling records": 9 of the 3,210 CPU samples it took. They only say where threads ran; no figure rests on them, so
the capture is complete, no [high] incomplete-trace, and no advice about CUDA's profiler range. Where a large share
is lost (the same trace, its message altered to say 900), the lines are approximate: a medium finding that says so,
with advice about sampling, not the CUDA capture."""
import json
import lzma
import shutil
import sqlite3

from conftest import ROOT, run_cli

LOST = ROOT / "tests" / "data" / "newcomer" / "loader_roll_lost_nsys2024.sqlite.xz"


def _analysed(path, tmp_path):
    out = tmp_path / "a.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(path), "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, json.loads(out.read_text())


def test_a_few_lost_samples_leave_the_capture_complete(tmp_path):
    text, s = _analysed(LOST, tmp_path)
    assert s["trace"]["integrity"]["verdict"] == "complete", s["trace"]["integrity"]["evidence"]
    assert not [f for f in s["diagnosis"] if f["rule"] == "incomplete-trace"]
    assert "incomplete" not in text and "cudaProfilerApi" not in text
    doubts = s["trace"]["integrity"]["figures"]["diagnostics"]["doubts"]
    said = [d["explained"] for d in doubts if "Perf" in d["said"]]
    assert said == ["nsys lost 9 CPU samples of the 3,210 it took (0.3%): they only say where threads ran, and so few "
                    "move no figure here"], said
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(LOST))
    assert r.returncode == 0 and "=> trusted" in r.stdout, r.stdout[-2000:]


def test_many_lost_samples_make_the_lines_approximate_not_the_capture(tmp_path):
    plain = tmp_path / "many_lost.sqlite"
    with lzma.open(LOST) as f, open(plain, "wb") as out:
        shutil.copyfileobj(f, out)
    with sqlite3.connect(plain) as con:  # the real message, saying 900 where it said 9
        con.execute("UPDATE DIAGNOSTIC_EVENT SET text = replace(replace(text, '(\t9)', '(\t900)'), 'Perf:\t9', "
                    "'Perf:\t900') WHERE text LIKE 'Some events%'")
    text, s = _analysed(plain, tmp_path)
    (f,) = [f for f in s["diagnosis"] if f["rule"] == "incomplete-trace"]
    assert f["severity"] == "medium" and "--sample none" in f["suggestion"], f
    assert "cudaProfilerApi" not in f["suggestion"] and "CUDA" not in f["suggestion"]
