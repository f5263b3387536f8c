"""Traces recorded by real nsys during the test run (NVTX + OS runtime; no GPU needed), then analysed."""
import json
import sys

import pytest

from conftest import ROOT, run_cli

PROGRAM = ROOT / "tests" / "programs" / "nvtx_steps.py"


@pytest.fixture(scope="module")
def recorded(nsys, tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")  # every default: the whole program (no capture range), cuda,nvtx,osrt
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(d / "steps"),
                sys.executable, str(PROGRAM), "4", str(d / "files"), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return d


def test_profile_run_writes_report_sqlite_and_record(recorded):
    assert (recorded / "steps.nsys-rep").stat().st_size > 0
    rec = json.loads((recorded / "steps.run.json").read_text())
    assert rec["program_exit_code"] == 0 and rec["nsys"]["version"].startswith("20")
    assert rec["durations_s"]["profile"] > 0 and "export" in rec["durations_s"]
    assert (recorded / "files" / "batch_3.bin").stat().st_size == 32 << 20


def test_recorded_trace_analysis(recorded, nsys, tmp_path):
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(recorded / "steps.sqlite"), "--json", str(out), "--plots", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert s["gpu"] is None and s["memcpy"]["dtoh"]["count"] == 0
    assert s["steps"]["count"] == 4 and s["steps"]["per_second"] > 0
    ranges = {r["name"]: r for r in s["nvtx"]["ranges"]}
    assert ranges["get batch"]["count"] == 4 and ranges["process output"]["count"] == 4
    # each 'process output' sleeps 20 ms and fsyncs 32 MB
    assert ranges["process output"]["total_ns"] >= 4 * 20e6
    assert s["trace"]["counts"]["osrt_calls"] > 0


def test_recorded_osrt_and_nesting(recorded):
    from nsys_transfer.analysis import Trace
    with Trace.open(recorded / "steps.sqlite") as t:
        n = t.host.nvtx
        inner = n[n["name"].isin(["get batch", "process output"])]
        assert (inner["depth"] == 1).all()
        assert n.loc[inner["parent"], "name"].str.match(r"Batch \d").all()
        calls = set(t.osrt.frame["name"].astype(str))
        assert {"fsync", "nanosleep"} & calls or {"clock_nanosleep"} & calls, calls
        main = n["global_tid"].iloc[0]
        pid = (int(main) >> 24) & 0xFFFFFF
        assert pid in set(t.host.threads["pid"])


def test_recorded_matches_nsys_nvtx_sum(recorded, nsys, tmp_path):
    import csv
    import shutil
    import subprocess
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.sections.cpu import nvtx_summary
    copy = tmp_path / "c.sqlite"
    shutil.copyfile(recorded / "steps.sqlite", copy)
    p = subprocess.run([nsys.path, "stats", "--report", "nvtx_sum", "--format", "csv", "--output", str(tmp_path / "n"),
                        str(copy)], capture_output=True, text=True, env=nsys.env())
    assert p.returncode == 0, p.stderr
    ref = {r["Range"].lstrip(":"): r for r in csv.DictReader(open(tmp_path / "n_nvtx_sum.csv"))}
    with Trace.open(recorded / "steps.sqlite") as t:
        ours = nvtx_summary(t.host.nvtx)
    assert len(ours) == len(ref)
    for r in ours.itertuples():
        assert int(ref[r.name]["Total Time (ns)"]) == r.total_ns and int(ref[r.name]["Instances"]) == r.count


def test_numbered_runs_never_overwrite(recorded, nsys):
    before = (recorded / "steps.sqlite").read_bytes()
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(recorded / "steps"), "--trace", "nvtx,osrt", "--no-capture-range",
                sys.executable, str(PROGRAM), "1", str(recorded / "files2"), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (recorded / "steps-2.sqlite").exists()
    assert (recorded / "steps.sqlite").read_bytes() == before


def test_capture_range_never_started(nsys, tmp_path):
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "x"), "--trace", "nvtx,osrt", "--capture-range",
                sys.executable, str(PROGRAM), "1", str(tmp_path / "f"), timeout=300)
    assert r.returncode == 1
    assert "capture range never started" in r.stderr and "Traceback" not in r.stderr
    assert "--profile" not in r.stderr  # the user's program, not this toolkit's workloads


def test_program_failing_under_nsys_shows_its_last_lines(nsys, tmp_path):
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "y"), "--trace", "nvtx,osrt", "--no-capture-range",
                sys.executable, "-c", "import sys; print('about to fail'); sys.exit(7)", timeout=300)
    rec = json.loads((tmp_path / "y.run.json").read_text()) if (tmp_path / "y.run.json").exists() else None
    # nsys still writes a report for a program that ran and failed: its exit code is recorded
    if r.returncode == 0:
        assert rec and rec["program_exit_code"] == 7
    else:
        assert "about to fail" in r.stderr


def test_run_record_splits_capture_and_import(recorded):
    d = json.loads((recorded / "steps.run.json").read_text())["durations_s"]
    assert d["capture"] > 0 and d["import"] >= 0
    assert abs(d["capture"] + d["import"] - d["profile"]) < 0.05


def test_nsys_rep_input_is_exported_to_the_cache(recorded, nsys, tmp_path):
    import os
    from conftest import sha256
    rep = recorded / "steps.nsys-rep"
    before = sha256(rep)
    listing = sorted(p.name for p in recorded.iterdir())
    env = {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path / "cache")}
    r = run_cli("-m", "nsys_transfer.analysis", str(rep), "--json", str(tmp_path / "r.json"), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["steps"]["count"] == 4
    assert list((tmp_path / "cache").glob("*.sqlite")), "the export goes to the cache"
    assert sha256(rep) == before and sorted(p.name for p in recorded.iterdir()) == listing


def test_trace_check_warns_when_nvtx_is_missing(public_traces, nsys):
    from nsys_transfer.profiling.checks import check_trace
    no_nvtx = next(p for p in public_traces if p.name.startswith("ncar"))
    warnings = check_trace(no_nvtx, expect_nvtx=True, nsys=nsys)
    assert any("no NVTX ranges" in w for w in warnings)
    with_nvtx = next(p for p in public_traces if p.name.startswith("nsightful"))
    assert not any("NVTX" in w for w in check_trace(with_nvtx, expect_nvtx=True, nsys=nsys))


def test_make_trace_is_the_whole_path_for_your_own_program(nsys, tmp_path):
    """The README's "your own program" path as written: `make trace PROG=...` traces it with the venv's Python
    (which it names, nvtx included) and analyses it; without a GPU the report shows its steps, ranges and OS calls."""
    import subprocess
    if not (ROOT / ".venv" / ".full").exists():
        pytest.skip("make trace needs the venv `make test` sets up")
    r = subprocess.run(["make", "-s", "trace", f"PROG={PROGRAM} 2 {tmp_path / 'files'}", f"OUT={tmp_path / 'runs'}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nvtx installed" in r.stderr and ".venv/bin/python" in r.stderr
    assert (tmp_path / "runs" / "nvtx_steps" / "nvtx_steps.sqlite").exists()
    assert "steps: 2 matching" in r.stdout and "OS runtime calls (total):" in r.stdout and "clock_nanosleep" in r.stdout


@pytest.mark.parametrize("trace_what", ["nvtx,osrt", "cuda,nvtx,osrt"])
def test_cpu_only_pytorch_capture_says_what_it_can_show(nsys, tmp_path, trace_what):
    """A PyTorch loop run on the CPU, recorded here by real nsys (with CUDA traced and without): the report's first
    line says that no GPU was used, so no transfer can be measured, and which Python ran it on which device; no CUDA C
    advice (nvtxRangePushA) and no idle-GPU wording for a program that never used one. Traced with CUDA on a machine
    without a GPU, nsys says "CUDA profiling might have not been started correctly": the trace explains it."""
    pytest.importorskip("torch")
    from nsys_transfer.profiling.checks import has_gpu
    program = ROOT / "tests" / "programs" / "cpu_infer.py"
    out = tmp_path / "cpu"
    import subprocess
    r = subprocess.run([nsys.path, "profile", f"--trace={trace_what}", "--export=sqlite", "-o", str(out),
                        sys.executable, str(program), "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done 5 steps on cpu" in r.stdout, (r.stdout + r.stderr)[-3000:]
    summary = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(out.with_suffix(".sqlite")), "--json", str(summary))
    assert r.returncode == 0, r.stderr
    s = json.loads(summary.read_text())
    c = s["trace"]["cpu_only"]
    assert s["gpu"] is None and c["python"] and c["program"] == f"{sys.executable} {program} 5"
    assert c["gpu"] == ("unused" if has_gpu() else "none")
    line = r.stdout.splitlines()[1]
    assert line == c["line"] and line.startswith("CPU-only capture: no GPU was used (")
    assert "so no transfer can be measured" in line and f"`{sys.executable} {program} 5` on the CPU" in line
    assert "nvtxRangePushA" not in r.stdout and "idle GPU time" not in r.stdout
    nvtx = next(f for f in s["diagnosis"] if f["rule"] == "nvtx-missing")
    assert "nvtx.annotate" in nvtx["suggestion"]
    integ = s["trace"]["integrity"]
    assert integ["verdict"] == "complete", integ["evidence"]
    if "cuda" in trace_what and not has_gpu():
        (d,) = [d for d in integ["figures"]["diagnostics"]["doubts"] if d["kind"] == "not-started"]
        assert d["explained"].startswith("the machine lists no GPU")
