"""Is the trace complete? analysis/integrity.py on real exports: silent on every complete one we have, loud on real
exports that lost events (altered with sqlite3 at test time the way a lossy capture looks), and `--check`."""
import json
import shutil
import sqlite3

import pytest

from analysis import Trace
from analysis.integrity import LOST_FRACTION_LOSSY, assess
from conftest import ROOT, run_cli
from test_against_nsys_stats import _local_copy
from test_shared_correlation import add_nested_api_rows

H200X2 = ROOT / "reports" / "data" / "h200x2"
CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET")


def _assess(path, pairs=False):
    with Trace.open(path) as t:
        return assess(t, pairs=pairs)


def _complete(a):
    f = a["figures"]
    assert a["verdict"] == "complete", a["evidence"]
    assert a["lost_fraction"] is None or a["lost_fraction"] <= LOST_FRACTION_LOSSY / 10
    assert f["missing_ops"] == 0 and f["shared_correlation_ids"]["count"] == 0
    assert set(a) >= {"verdict", "lost_fraction", "evidence", "figures"} and a["evidence"].endswith(".")


@pytest.mark.parametrize("pairs", [False, True])
def test_silent_on_the_bundled_h200_traces(h200, pairs):
    for name, path in h200.items():
        a = _assess(path, pairs)
        _complete(a)
        assert a["figures"]["method"] == ("pairs" if pairs else "counts"), name
        assert a["figures"]["capture"]["driver_cuda"] == "13.0"
        assert all(tl["cpu_share_after"] < 0.2 for tl in a["figures"]["timeline"]), name


@pytest.mark.parametrize("pairs", [False, True])
def test_silent_on_the_two_gpu_traces(pairs):
    for path in sorted(H200X2.glob("*.sqlite.xz")):
        a = _assess(path, pairs)
        _complete(a)
        if path.name.startswith(("pinned-x2.", "streams-x2.", "pinned-cpu8")):
            assert len(a["figures"]["timeline"]) == 2, path.name  # one row per rank process


@pytest.mark.parametrize("pairs", [False, True])
def test_silent_on_the_public_exports(public_traces, pairs):
    for path in public_traces:
        a = _assess(path, pairs)
        _complete(a)
        d = a["figures"]["diagnostics"]
        if d["cuda_events_collected"] is not None:  # 2024+: nsys's own count equals the exported rows
            assert d["cuda_events_collected"] == d["cuda_rows_exported"], path.name
        if path.name.startswith("nvtxex"):  # 80 of its 94 zero-byte memsets run nothing: reported, not evidence
            assert a["figures"]["api"]["memset"] == {"calls": 94, "without_gpu": 80}


def _delete(path, sql):
    con = sqlite3.connect(path)
    try:
        n = con.execute(sql).rowcount
        con.commit()
        return n
    finally:
        con.close()


def test_lost_kernels_are_found_and_counted(h200, tmp_path):
    """Half the kernels gone, their launch calls still there: what a capture that lost GPU activity looks like."""
    path = _local_copy(h200["pinned"], tmp_path)
    lost = _delete(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
    for pairs in (False, True):
        a = _assess(path, pairs)
        assert a["verdict"] == "lossy" and a["figures"]["method"] == "pairs"
        assert a["figures"]["api"]["kernel"]["without_gpu"] == lost
        assert a["lost_fraction"] == pytest.approx(lost / a["figures"]["expected_ops"], abs=1e-3)
        assert f"{lost:,} of" in a["evidence"] and "no GPU activity" in a["evidence"]
        assert "CUDA 13.0 driver" in a["evidence"]  # the nsys/driver mismatch the export recorded


def test_gpu_rows_without_their_calls_are_found(h200, tmp_path):
    path = _local_copy(h200["streams"], tmp_path)
    lost = _delete(path, "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN "
                         "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 3 = 0)")
    a = _assess(path)
    assert a["verdict"] == "lossy" and a["figures"]["gpu"]["kernel"]["without_api"] == lost
    assert "have no CUDA API call" in a["evidence"]


def test_cuda_events_that_stop_while_the_program_goes_on(h200, tmp_path):
    """Every CUDA row after the first step's GPU work gone, the OS runtime calls kept: the program went on for two
    more steps, its GPU operations did not."""
    path = _local_copy(h200["baseline"], tmp_path)
    with Trace.open(path) as t:
        k = t.kernels.sort_values("start_ns")
        first_burst_end = int(k["end_ns"].iloc[300])
    for table in CUDA_TABLES:
        _delete(path, f"DELETE FROM {table} WHERE start > {first_burst_end}")
    a = _assess(path)
    assert a["verdict"] == "lossy"
    tl = a["figures"]["timeline"][0]
    assert tl["cpu_share_after"] > 0.5 and a["lost_fraction"] >= tl["cpu_share_after"]
    assert "GPU operations stop while" in a["evidence"]


def test_shared_correlation_ids_are_reported_not_lossy(h200, tmp_path):
    path = _local_copy(h200["baseline"], tmp_path)
    added = add_nested_api_rows(path, "CUPTI_ACTIVITY_KIND_MEMCPY", "cudaMemcpy_v3020")
    a = _assess(path)
    assert a["verdict"] == "complete" and a["figures"]["method"] == "pairs"
    assert a["figures"]["shared_correlation_ids"]["count"] == added
    assert a["figures"]["api"]["copy"] == {"calls": 5, "without_gpu": 0}


def test_summary_carries_it(h200):
    from analysis.summary import analyze
    with Trace.open(h200["ceiling"]) as t:
        s = analyze(t).summary
    integ = s["trace"]["integrity"]
    assert integ["verdict"] == "complete" and integ["figures"]["expected_ops"] == s["kernels"]["count"] + 2
    json.dumps(integ)  # JSON-safe


# --- analyze-trace --check ----------------------------------------------------------------------------------------

def test_check_complete_trace_with_its_run_record(h200, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copyfile(h200["pinned"], d / "pinned.sqlite.xz")
    shutil.copyfile(ROOT / "reports" / "data" / "h200" / "pinned.run.json", d / "pinned.run.json")
    r = run_cli("-m", "analysis", "--check", str(d / "pinned.sqlite.xz"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "COMPLETE" in r.stdout and "kernel launches" in r.stdout and "without a GPU row" in r.stdout
    assert "run record" in r.stdout and "no nsys warnings or errors" in r.stdout and "=> trusted" in r.stdout
    assert "GPU ops |" in r.stdout


def test_check_lossy_trace_exits_1(h200, tmp_path):
    path = _local_copy(h200["pinned"], tmp_path)
    _delete(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 4 <> 0")
    r = run_cli("-m", "analysis", "--check", str(path))
    assert r.returncode == 1 and "LOSSY" in r.stdout and "NOT to be trusted" in r.stdout
    assert "Traceback" not in r.stderr


def test_check_record_with_nsys_errors_exits_1(h200, tmp_path):
    """A complete-looking trace whose capture record holds an importer error is not trusted either."""
    shutil.copyfile(h200["ceiling"], tmp_path / "ceiling.sqlite.xz")
    rec = json.loads((ROOT / "reports" / "data" / "h200" / "ceiling.run.json").read_text())
    rec["nsys_messages"] = [{"stage": "import", "kind": "error",
                             "text": "Importer error status: Importation succeeded with non-fatal errors."}]
    (tmp_path / "ceiling.run.json").write_text(json.dumps(rec))
    r = run_cli("-m", "analysis", "--check", str(tmp_path / "ceiling.sqlite.xz"))
    assert r.returncode == 1 and "COMPLETE" in r.stdout and "Importer error status" in r.stdout


def test_check_bad_input_is_one_line(tmp_path):
    (tmp_path / "x.sqlite").write_text("not a trace")
    r = run_cli("-m", "analysis", "--check", str(tmp_path / "x.sqlite"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
