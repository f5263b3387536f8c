"""Is the trace complete? analysis/sections/capture_figures.py on real exports: silent on every complete one we have, loud on real
exports that lost events (altered with sqlite3 at test time the way a lossy capture looks), and `--check`."""
import json
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.rules.capture_checks import LOST_FRACTION_LOSSY, verdict
from nsys_transfer.analysis.sections.capture_figures import figures
from conftest import ROOT, run_cli
from test_against_nsys_stats import _local_copy
from test_shared_correlation import add_nested_api_rows

H200X2 = ROOT / "reports" / "data" / "h200x2"
CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET")


def _assess(path, pairs=False):
    with Trace.open(path) as t:
        return verdict(figures(t, pairs=pairs))


def _complete(a):
    f = a["figures"]
    assert a["verdict"] == "complete", a["evidence"]
    assert a["lost_fraction"] is None or a["lost_fraction"] <= LOST_FRACTION_LOSSY / 10
    assert f["missing_ops"] == 0 and f["shared_correlation_ids"]["count"] == 0
    assert set(a) >= {"verdict", "lost_fraction", "evidence", "figures"} and a["evidence"].endswith(".")


def test_the_verdict_reads_the_typed_figures_not_the_trace():
    """figures() reads the export; the verdict on them needs no trace (closed here) and leaves them as they were."""
    with Trace.open(H200X2 / "pinned-x2.sqlite.xz") as t:
        f = figures(t, pairs=True)
    assert len(f.tails) == 2 and f.api["kernel"].calls > 0 and f.capture.driver_cuda == "13.0"
    a = verdict(f)
    _complete(a)
    assert a["figures"] == {**f.reported, "cut": False} and "cut" not in f.reported and verdict(f) == a


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
    """Every CUDA row after the first step's GPU work gone, the NVTX ranges kept: the program went on for eleven
    more steps, its GPU operations did not. (OS runtime calls alone after the last GPU operation decide nothing: a
    program's last post-processing and exit make them too.)"""
    path = _local_copy(h200["pinned-long"], tmp_path)
    with Trace.open(path) as t:
        k = t.device.kernels.sort_values("start_ns")
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


def test_summary_carries_it(h200, summary_of):
    s = summary_of(h200["ceiling"])
    integ = s["trace"]["integrity"]
    assert integ["verdict"] == "complete" and integ["figures"]["expected_ops"] == s["kernels"]["count"] + 2
    json.dumps(integ)  # JSON-safe


# --- analyze-trace --check ----------------------------------------------------------------------------------------

def test_check_complete_trace_with_its_run_record(h200, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copyfile(h200["pinned"], d / "pinned.sqlite.xz")
    shutil.copyfile(ROOT / "reports" / "data" / "h200" / "pinned.run.json", d / "pinned.run.json")
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(d / "pinned.sqlite.xz"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "COMPLETE" in r.stdout and "kernel launches" in r.stdout and "without a GPU row" in r.stdout
    assert "run record" in r.stdout and "no nsys warnings or errors" in r.stdout and "=> trusted" in r.stdout
    assert "GPU ops |" in r.stdout


def test_check_lossy_trace_exits_1(h200, tmp_path):
    path = _local_copy(h200["pinned"], tmp_path)
    _delete(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 4 <> 0")
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
    assert r.returncode == 1 and "LOSSY" in r.stdout and "NOT to be trusted" in r.stdout
    assert "Traceback" not in r.stderr


def test_check_record_with_nsys_errors_exits_1(h200, tmp_path):
    """A complete-looking trace whose capture record holds an importer error is not trusted either."""
    shutil.copyfile(h200["ceiling"], tmp_path / "ceiling.sqlite.xz")
    rec = json.loads((ROOT / "reports" / "data" / "h200" / "ceiling.run.json").read_text())
    rec["nsys_messages"] = [{"stage": "import", "kind": "error",
                             "text": "Importer error status: Importation succeeded with non-fatal errors."}]
    (tmp_path / "ceiling.run.json").write_text(json.dumps(rec))
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(tmp_path / "ceiling.sqlite.xz"))
    assert r.returncode == 1 and "COMPLETE" in r.stdout and "Importer error status" in r.stdout


def test_check_bad_input_is_one_line(tmp_path):
    (tmp_path / "x.sqlite").write_text("not a trace")
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(tmp_path / "x.sqlite"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


# --- real captures of other programs on the H200 machine (driver for CUDA 13.0), by nsys 2023.4 and 2024.2 --------
# tests/data/programs/NAME_nsys{2023,2024}.{sqlite.xz,run.json,nsys.log}: the same command under each nsys; the
# run records and console logs are the capture's own (python -m nsys_transfer.profiling run on the GPU machine).
PROGRAMS = ROOT / "tests" / "data" / "programs"


def _api_rows(path):
    with Trace.open(path) as t:
        return int(t.query("SELECT COUNT(*) AS n FROM CUPTI_ACTIVITY_KIND_RUNTIME")["n"].iloc[0]), len(t.device.kernels)


@pytest.mark.parametrize("name", ["hf_generate", "torchvision_loader"])
def test_real_lossy_captures_are_flagged_with_how_much(name):
    """nsys 2023.4 on CUDA 13 lost CUDA events of these programs (its importer: "non-fatal errors"); nsys 2024.2
    recorded the same command completely. The lost fraction from the 2023 trace alone matches the share of API
    calls the 2024 capture has and the 2023 one lacks."""
    lossy, complete = PROGRAMS / f"{name}_nsys2023.sqlite.xz", PROGRAMS / f"{name}_nsys2024.sqlite.xz"
    a = _assess(lossy)
    assert a["verdict"] == "lossy", a["evidence"]
    assert a["evidence"].startswith("The capture lost CUDA events: ") and "correlation ids" in a["evidence"]
    assert "on a CUDA 13.0 driver" in a["evidence"]
    rows_lossy, kernels_lossy = _api_rows(lossy)
    rows_full, kernels_full = _api_rows(complete)
    truth = 1 - rows_lossy / rows_full
    assert a["lost_fraction"] == pytest.approx(truth, abs=0.05), (a["lost_fraction"], truth)
    assert kernels_lossy < 0.7 * kernels_full
    _complete(_assess(complete))


def test_hf_generate_complete_capture_matches_torch_profiler():
    """nsys 2024.2's trace of generate(): every "request N" holds ~9,300 GPU operations, what torch.profiler counts
    for one request on the same machine (GPU.md); nsys 2023.4's holds a handful."""
    for nsys_year, low, high in (("2024", 9000, 9700), ("2023", 0, 100)):
        with Trace.open(PROGRAMS / f"hf_generate_nsys{nsys_year}.sqlite.xz") as t:
            n, k, m = t.host.nvtx, t.device.kernels, t.device.memcpys
            for r in n[n["name"].isin(["request 1", "request 2", "request 3"])].itertuples():
                ops = sum(int(((df["start_ns"] >= r.start_ns) & (df["start_ns"] < r.end_ns)).sum()) for df in (k, m))
                assert low <= ops <= high, (nsys_year, r.name, ops)


def test_lightning_captures_are_complete():
    for year in ("2023", "2024"):
        _complete(_assess(PROGRAMS / f"lightning_predict_nsys{year}.sqlite.xz", pairs=True))


def test_check_real_lossy_capture_with_its_record():
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(PROGRAMS / "hf_generate_nsys2023.sqlite.xz"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "LOSSY, lost fraction 9" in r.stdout and "NOT to be trusted" in r.stdout
    # the record beside it (written before records kept nsys_messages): its last lines hold the importer's errors
    assert "importer: StringStorage.cpp(113): Cannot find string for an exterior index" in r.stdout
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(PROGRAMS / "hf_generate_nsys2024.sqlite.xz"))
    assert r.returncode == 0 and "nsys counted 117,446 CUDA events; the export holds 117,446" in r.stdout


def test_summary_of_a_lossy_trace_says_so(tmp_path):
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(PROGRAMS / "torchvision_loader_nsys2023.sqlite.xz"), "--json", str(out), "-q")
    assert r.returncode == 0, r.stderr
    integ = json.loads(out.read_text())["trace"]["integrity"]
    assert integ["verdict"] == "lossy" and 0.25 < integ["lost_fraction"] < 0.45


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 20])
def test_largest_correlation_id_gap_per_process_matches_a_plain_sort(chunk, monkeypatch):
    """_largest_id_gap() sorts one copy of a process's ids and takes differences CHUNK at a time: the largest hole
    between sorted positive ids equals that of one sorted array of every row's ids (p < 0: all processes)."""
    from nsys_transfer.analysis.common import intervals
    from nsys_transfer.analysis.sections.capture_activity import _largest_id_gap, _pids_in_order
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    for _ in range(200):
        gpu = {}
        for kind in ("kernel", "copy", "memset"):
            n = int(rng.integers(0, 30))
            gpu[kind] = (rng.choice([-1, 3, 7], n), rng.integers(-3, 200, n), np.zeros(n, np.int64), np.zeros(n, np.int64))
        pid = np.concatenate([v[0] for v in gpu.values()])
        corr = np.concatenate([v[1] for v in gpu.values()])
        assert _pids_in_order(gpu) == pd.unique(pid).tolist()
        for p in _pids_in_order(gpu):
            ids = np.sort(corr[pid == p] if p >= 0 else corr)
            ids = ids[ids > 0]
            assert _largest_id_gap(gpu, p) == (int((np.diff(ids) - 1).max()) if ids.size >= 2 else None)


def test_timeline_and_id_gaps_in_chunks_equal_whole(h200, monkeypatch):
    """The integrity timeline's GPU counts and the correlation-id holes, CHUNK rows at a time, equal those of the whole
    arrays on a real capture."""
    from nsys_transfer.analysis.common import intervals
    from nsys_transfer.analysis.sections.capture_activity import OsrtStarts as _OsrtStarts, id_gaps as _id_gaps, timeline as _timeline
    from nsys_transfer.analysis.sections.capture_figures import gpu_rows
    with Trace.open(h200["pinned"]) as t:
        gpu = gpu_rows(t)
        whole = _timeline(t, gpu, _OsrtStarts(t)), _id_gaps(t, gpu, _OsrtStarts(t))
        monkeypatch.setattr(intervals, "CHUNK", 7)
        chunked = _timeline(t, gpu, _OsrtStarts(t)), _id_gaps(t, gpu, _OsrtStarts(t))
    assert whole[0] and sum(p["gpu_ops"] for p in whole[0]) > 7
    assert chunked == whole


def test_a_time_slice_cut_from_a_capture_is_called_cut_not_lost(tmp_path):
    """Another tool cut a slice out of a real capture, the GPU tables 300 ms earlier than the CPU ones: the calls at
    its end lack their kernels, the kernels at its start their calls. Not to be trusted, but not nsys's loss."""
    path = _local_copy(ROOT / "tests" / "data" / "programs" / "hf_generate_nsys2024.sqlite.xz", tmp_path)
    a, b, shift = 15_200_000_000, 16_200_000_000, 300_000_000
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        _delete(path, f"DELETE FROM {table} WHERE start < {a} OR start > {b}")
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        _delete(path, f"DELETE FROM {table} WHERE start < {a - shift} OR start > {b - shift}")
    _delete(path, "DELETE FROM DIAGNOSTIC_EVENT")
    r = _assess(path, pairs=True)
    assert r["verdict"] == "lossy" and r["figures"]["cut"]
    assert r["figures"]["edges"] == {"calls_without_gpu": "end", "gpu_without_calls": "start"}
    assert r["evidence"].startswith("The export looks cut out of a longer capture") and "nsys 2024" not in r["evidence"]
    # events lost in the middle (every other kernel) stay "lost"
    (tmp_path / "b").mkdir()
    lossy = _local_copy(ROOT / "tests" / "data" / "programs" / "hf_generate_nsys2024.sqlite.xz", tmp_path / "b")
    _delete(lossy, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
    r = _assess(lossy, pairs=True)
    assert r["verdict"] == "lossy" and not r["figures"]["cut"] and r["evidence"].startswith("The capture lost")


def test_check_says_which_process_nsys_found_no_cuda_in():
    """nsys writes "No CUDA events collected" once per process without CUDA (here a DataLoader worker of the
    Lightning program); --check says which process and that the GPU work is another's, instead of a bare
    contradiction beside 2,502 kernels."""
    path = ROOT / "tests" / "data" / "programs" / "lightning_predict_nsys2024.sqlite.xz"
    a = _assess(path)
    said = [m for m in a["figures"]["diagnostics"]["messages"] if m.startswith("No CUDA events collected")]
    assert said and "[about process 1375, which runs no GPU work; the GPU work is process 1325's]" in said[0]
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
    assert r.returncode == 0 and "which runs no GPU work" in r.stdout and "=> trusted" in r.stdout


# --- nsys's own doubts (DIAGNOSTIC_EVENT, the run record) -------------------------------------------------------

GRAPH_INFER = ROOT / "tests" / "data" / "programs" / "cuda_graph_infer_nsys2024.sqlite.xz"  # complete, no capture range
NOT_ALL_CUDA = "Not all CUDA events might have been collected."
NOT_STARTED = "CUDA profiling might have not been started correctly."


def _nsys_says(path, text, pid, times=1):
    """Add nsys's message about process `pid` to the export's DIAGNOSTIC_EVENT, `times` times, as nsys writes it
    (a host timestamp, source Analysis, severity Warning, the process's own serialized globalPid)."""
    con = sqlite3.connect(path)
    try:
        gpid = con.execute("SELECT globalPid FROM DIAGNOSTIC_EVENT WHERE (globalPid >> 24) & 16777215 = ? LIMIT 1",
                           (pid,)).fetchone()[0]
        last = con.execute("SELECT max(timestamp) FROM DIAGNOSTIC_EVENT").fetchone()[0]
        con.executemany("INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
                        "VALUES (?, 2, 3, 2, ?, ?)", [(last + 1000 + i, text, gpid) for i in range(times)])
        con.commit()
    finally:
        con.close()


def _summary(path):
    from nsys_transfer.analysis.summary import analyze_sections
    with Trace.open(path) as t:
        return analyze_sections(t).summary


def test_nsys_doubting_its_cuda_events_is_not_complete(tmp_path):
    """A complete capture, every check passing, where nsys said "Not all CUDA events might have been collected" of the
    process that holds the GPU work: --check says DOUBTFUL and not trusted; the summary's verdict is doubtful, its
    first finding and its header quote nsys."""
    path = _local_copy(GRAPH_INFER, tmp_path)
    assert _assess(path, pairs=True)["verdict"] == "complete"  # the premise: as captured, nothing to doubt
    _nsys_says(path, NOT_ALL_CUDA, 702)
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DOUBTFUL" in r.stdout and "COMPLETE" not in r.stdout and "=> NOT to be trusted" in r.stdout
    assert f'"{NOT_ALL_CUDA[:-1]}" of process 702, which holds 297 GPU operations' in r.stdout
    s = _summary(path)
    integ = s["trace"]["integrity"]
    assert integ["verdict"] == "doubtful" and NOT_ALL_CUDA[:-1] in integ["evidence"]
    (d,) = integ["figures"]["diagnostics"]["doubts"]
    assert (d["kind"], d["events"], d["pid"], d["explained"]) == ("not-all", "CUDA", 702, None)
    first = s["diagnosis"][0]
    assert first["rule"] == "incomplete-trace" and first["severity"] == "high" and NOT_ALL_CUDA[:-1] in first["evidence"]
    from nsys_transfer.analysis.document import Document
    from nsys_transfer.analysis.render.text import text_report
    head = text_report(Document.from_json(s)).splitlines()
    assert head[1].startswith("!! POSSIBLY INCOMPLETE TRACE") and NOT_ALL_CUDA[:-1] in head[1]
    assert head[2].startswith("verdict: nsys says the trace may be incomplete")


def test_cuda_profiling_not_started_with_two_api_calls_is_not_complete(tmp_path):
    """As on a public PyTorch export (nsys 2025.3): nsys said 27 times that CUDA profiling might not have started and
    that not all CUDA events were collected, and the export holds 2 CUDA API calls and no GPU work. Made from a real
    capture with its GPU rows and all but 2 API calls removed; no check has anything to cross-check, so the verdict
    rests on what nsys said."""
    path = _local_copy(GRAPH_INFER, tmp_path)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        _delete(path, f"DELETE FROM {table}")
    # the first two calls it made (cuModuleGetLoadingMode, cudaStreamIsCapturing): neither puts work on the GPU
    assert _delete(path, "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid NOT IN (SELECT rowid FROM "
                         "CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start LIMIT 2)") > 1000
    _delete(path, "DELETE FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Number of CUDA events collected%'")
    _nsys_says(path, NOT_STARTED, 702, times=27)
    _nsys_says(path, NOT_ALL_CUDA, 702)
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
    assert r.returncode == 1 and "DOUBTFUL" in r.stdout and "=> NOT to be trusted" in r.stdout, r.stdout
    assert f'"{NOT_STARTED[:-1]}" of process 702, 27 times, which holds 2 CUDA API calls and no GPU work' in r.stdout
    s = _summary(path)
    assert s["gpu"] is None and s["trace"]["integrity"]["verdict"] == "doubtful"
    assert s["diagnosis"][0]["rule"] == "incomplete-trace" and NOT_STARTED[:-1] in s["diagnosis"][0]["evidence"]


def test_nsys_doubts_the_rows_or_its_log_explain_keep_the_capture_complete(public_traces):
    """Real exports where nsys said such things and nothing is missing: nsightful and zx3xyy began their capture with
    cudaProfilerStart (nsys then says "Not all ... events" of every process when the range ends), and zx3xyy's
    "CUDA profiling might have not been started correctly" is about a compile worker that made no CUDA call beside
    the main process's GPU work."""
    for prefix in ("nsightful", "zx3xyy"):
        path = next(p for p in public_traces if p.name.startswith(prefix))
        a = _assess(path, pairs=True)
        doubts = a["figures"]["diagnostics"]["doubts"]
        assert a["verdict"] == "complete" and doubts and all(d["explained"] for d in doubts), (prefix, doubts)
        assert any(d["said"] == NOT_ALL_CUDA and "cudaProfilerStart" in d["explained"] for d in doubts)
        r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
        assert r.returncode == 0 and "=> trusted" in r.stdout and "explained: the program's cudaProfilerStart" in r.stdout
    worker = next(d for d in doubts if d["kind"] == "not-started")
    assert worker["pid"] == 2460791 and worker["cuda_calls"] == 0 and "process 2460631's" in worker["explained"]


def test_check_record_with_nsys_doubts_is_not_trusted(tmp_path):
    """The run record beside a complete export kept nsys's console line "Not all CUDA events might have been
    collected": --check does not call it complete. Beside a range capture whose export explains the same words, it
    stays trusted."""
    shutil.copyfile(GRAPH_INFER, tmp_path / "infer.sqlite.xz")
    rec = json.loads((ROOT / "tests" / "data" / "programs" / "cuda_graph_infer_nsys2024.run.json").read_text())
    rec["nsys_messages"] = [{"stage": "capture", "kind": "warning", "text": NOT_ALL_CUDA}]
    (tmp_path / "infer.run.json").write_text(json.dumps(rec))
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(tmp_path / "infer.sqlite.xz"))
    assert r.returncode == 1 and "DOUBTFUL" in r.stdout and "COMPLETE" not in r.stdout, r.stdout
    assert "its output in the run record said" in r.stdout and "=> NOT to be trusted" in r.stdout
    ranged = tmp_path / "ranged"
    ranged.mkdir()
    shutil.copyfile(ROOT / "tests" / "data" / "programs" / "pinned_bf16_nsys2024.sqlite.xz", ranged / "bf16.sqlite.xz")
    (ranged / "bf16.run.json").write_text(json.dumps(rec))
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(ranged / "bf16.sqlite.xz"))
    assert r.returncode == 0 and "COMPLETE" in r.stdout and "=> trusted" in r.stdout, r.stdout


def _api_id_holes_whole(t: Trace, gpu: dict) -> list[dict]:
    """correlation_gaps' processes as the id-gap pass found them before issue 39 (every process with GPU rows checked):
    the runtime table read whole, each process's ids sorted (stable) and its NVTX and OS runtime starts sorted together."""
    from nsys_transfer.analysis.load.frames import pid_of
    from nsys_transfer.analysis.sections import capture_activity as ca
    rt = t.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", {"tid": "globalTid", "corr": "correlationId",
                                                               "start_ns": "start"})
    rt_pid, nvtx, out = pid_of(rt["tid"].to_numpy()), t.host.nvtx, []
    for p in [p for p in ca._pids_in_order(gpu) if p >= 0 and ca._largest_id_gap(gpu, p) is not None]:
        mine = rt_pid == p
        order = np.argsort(rt["corr"].to_numpy()[mine], kind="stable")
        ids, starts = rt["corr"].to_numpy()[mine][order], rt["start_ns"].to_numpy()[mine][order]
        ids, starts = ids[ids > 0], starts[ids > 0]
        if ids.size < 2:
            continue
        holes = np.diff(ids) - 1
        big = np.flatnonzero(holes >= ca.API_ID_GAP_LOST)
        activity = np.sort(np.concatenate((nvtx["start_ns"].to_numpy(np.int64)[pid_of(nvtx["global_tid"].to_numpy(
            np.int64)) == p], ca.OsrtStarts(t)[int(p)])))
        lo, hi = np.minimum(starts[big], starts[big + 1]), np.maximum(starts[big], starts[big + 1])
        running = big[(np.searchsorted(activity, hi) - np.searchsorted(activity, lo, side="right")) > 0]
        span, lost = int(ids[-1] - ids[0] + 1), int(holes[running].sum())
        share = lost / span
        out.append({"pid": int(p), "api_rows": int(ids.size), "id_span": span, "largest_gap": int(holes.max()),
                    "gaps": int(big.size), "gaps_while_running": int(running.size), "ids_lost": lost,
                    "est_missing_calls": int(round(ids.size * share / (1 - share))) if share < 1 else None,
                    "missing_share": round(share, 4)})
    return out


ID_GAP_TRACES = [ROOT / "tests" / "data" / "programs" / "torchvision_loader_nsys2023.sqlite.xz",
                 ROOT / "tests" / "data" / "programs" / "hf_generate_nsys2023.sqlite.xz",
                 ROOT / "reports" / "data" / "h200" / "pinned-long.sqlite.xz",
                 H200X2 / "streams-x2.sqlite.xz", H200X2 / "pinned-cpu8-x2gpu.sqlite.xz"]  # the last two: a process's
# runtime rows with their correlation ids out of rowid order


@pytest.mark.parametrize("chunk_rows", [None, 300])
@pytest.mark.parametrize("lost", [1000, 2])
@pytest.mark.parametrize("path", ID_GAP_TRACES, ids=lambda p: p.name.split(".")[0])
def test_id_gaps_read_the_runtime_and_os_tables_a_chunk_at_a_time(path, lost, chunk_rows, monkeypatch):
    """Integrity's id-gap pass (every process checked; holes from `lost` ids) reads the CUDA runtime and OS runtime
    tables a chunk at a time, never whole (13.5 M and 22 M rows held beside the idle attribution: 1.79 GiB peak on the
    2 GB benchmark export, 0.70 GiB in chunks), and finds what one stable sort of the whole table found: in rowid
    order as the chunks come, and from a bitmap of the ids where a process's ids are out of order."""
    from nsys_transfer.analysis.sections import capture_activity as ca
    from nsys_transfer.analysis.sections.capture_figures import gpu_rows
    monkeypatch.setattr(ca, "GPU_ID_GAP_SUSPECT", -10)
    monkeypatch.setattr(ca, "API_ID_GAP_LOST", lost)
    with Trace.open(path) as t:
        if chunk_rows:
            t.reader.chunk_rows = chunk_rows
        gpu = gpu_rows(t)
        want = _api_id_holes_whole(t, gpu)
        whole = []
        table_columns = t.reader.table_columns
        monkeypatch.setattr(t.reader, "table_columns", lambda table, *a, **k: whole.append(table) or
                            table_columns(table, *a, **k))
        monkeypatch.setattr(ca.OsrtStarts, "__missing__", lambda self, pid: whole.append("OSRT_API"))
        got = ca.id_gaps(t, gpu, ca.OsrtStarts(t))
    assert got["checked"] and got["processes"] == want and want
    assert lost == 1000 or all(p["gaps_while_running"] for p in want)
    assert whole == []
