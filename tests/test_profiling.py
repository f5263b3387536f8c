"""profiling/: finding nsys, the checks that explain failures, and refusing what cannot work here."""
import json
import os
import stat
import subprocess

import pytest

from conftest import run_cli
from nsys_transfer.nsys_core import nsys as locate
from nsys_transfer.profiling.checks import nvtx_unrecorded_warning


def test_find_nsys_order_and_report(nsys, monkeypatch, tmp_path):
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\nexec {nsys.path} \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NSYS", str(fake))
    n = locate.find_nsys()
    assert n.path == str(fake) and n.source == "$NSYS" and n.version == nsys.version


def test_no_nsys_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("NSYS", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(locate, "PROJECT_NSYS", tmp_path / "none" / "nsys")
    monkeypatch.setattr(locate.glob, "glob", lambda pattern: [])
    try:
        locate.find_nsys()
    except locate.NsysNotFound as e:
        assert "make nsys" in str(e) and "NSYS=" in str(e)
    else:
        raise AssertionError("expected NsysNotFound")


def test_cli_without_nsys_is_one_line(tmp_path):
    env = {**os.environ, "NSYS": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    # hide the project's own install by pointing the module at an empty folder via a wrapper
    code = ("import nsys_transfer.nsys_core.nsys as l, pathlib, sys; l.PROJECT_NSYS = pathlib.Path('/nonexistent/nsys'); "
            "l.glob.glob = lambda p: []; from nsys_transfer.cli import main; sys.argv = ['profile', 'where']; main()")
    r = run_cli("-c", code, env=env)
    assert r.returncode == 2 and "no working nsys" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("words", [["--sampel", "none"], ["--sampel=none"]])
def test_run_names_an_unknown_option_as_one(words, tmp_path):
    """issue 57, item 3: an option run does not know is said as one, with the nearest it knows; never read as the
    program to run (click passes unknown options on, for the program's own)."""
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "x"), *words, "--", "python", "post.py")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "nsys-transfer run: No such option '--sampel'. Did you mean '--sample'? (see nsys-transfer run --help)"], r.stderr
    assert not list(tmp_path.iterdir())


def test_nvtx_version_rule():
    assert "not recorded" in nvtx_unrecorded_warning((2023, 4), "0.2.12")
    assert nvtx_unrecorded_warning((2023, 4), "0.2.11") is None
    assert nvtx_unrecorded_warning((2024, 2), "0.2.14") is None


def test_stage_without_gpu_is_refused_clearly(nsys):
    from nsys_transfer.profiling.checks import has_gpu
    if has_gpu():
        return  # on a GPU machine this path is the real profile, covered by docs/benchmarks.md
    r = run_cli("-m", "nsys_transfer.profiling", "stage", "baseline")
    assert r.returncode == 2 and "no NVIDIA GPU" in r.stderr and "Traceback" not in r.stderr


def test_unknown_stage_is_refused(nsys):
    r = run_cli("-m", "nsys_transfer.profiling", "stage", "warp-speed")
    assert r.returncode == 2 and "unknown stage" in r.stderr


def test_multi_gpu_command_uses_torchrun():
    from nsys_transfer.profiling.runner import workload_command
    one = workload_command("pinned", ["--steps", "3"], python="py")
    two = workload_command("pinned", ["--steps", "3"], python="py", gpus=2)
    assert one == ["py", "-m", "nsys_transfer.workloads", "--stage", "pinned", "--profile", "--steps", "3"]
    assert two[:5] == ["py", "-m", "torch.distributed.run", "--nproc-per-node", "2"] and two[5:] == one[1:]


@pytest.mark.alone  # one rank's pace on the CPU it is confined to: another test's load on that CPU would slow it
def test_scaling_on_one_cpu_names_the_saturated_cores(tmp_path, h200):
    """`profile scaling` for real on CPU (gloo ranks): confined to one core, two ranks cannot double the throughput,
    and both the command and the report say the host's cores are the limit."""
    runs = tmp_path / "runs"
    cpu = str(min(os.sched_getaffinity(0)))
    r = run_cli("-m", "nsys_transfer.profiling", "scaling", "--stage", "bufpool", "--gpus", "2", "--cpus", cpu, "--out",
                str(runs / "scaling.json"), "--device", "cpu", "--batch", "2", "--img", "64", "--classes", "3",
                "--steps", "3", "--warmup", "1", "--loader-workers", "1", "--output-workers", "2", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "host CPU cores" in r.stdout
    sc = json.loads((runs / "scaling.json").read_text())["scenarios"][0]
    assert sc["one"]["host_cpu"]["cpus"] == 1 and sc["all"]["throughput"]["world_size"] == 2
    assert sc["all"]["integrity"]["ok"]
    (runs / "pinned").mkdir()
    (runs / "pinned" / "pinned.sqlite.xz").write_bytes(h200["pinned"].read_bytes())
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Several GPUs" in md and f"| bufpool | CPUs {cpu} |" in md and "host CPU cores: " in md
    r = run_cli("-m", "nsys_transfer.profiling", "scaling", "--stage", "nope")
    assert r.returncode == 2 and "unknown stage" in r.stderr and "Traceback" not in r.stderr


# --- what `run` records by default: CPU samples of the process tree, Python backtraces of CUDA calls ---------------

BURN = """import time
import numpy as np
a = np.random.default_rng(0).standard_normal((300, 300))
t = time.perf_counter()
while time.perf_counter() - t < 1.5:
    np.sort(a, axis=1)
print("burnt")
"""


def _samples_of(sqlite, pid):
    """(samples of the process, callchain frames of them, its top frames' modules) from the export."""
    import sqlite3
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "COMPOSITE_EVENTS" not in tables:
            return 0, 0, set()
        n = con.execute("SELECT COUNT(*) FROM COMPOSITE_EVENTS WHERE (globalTid >> 24) & 0xFFFFFF = ?", (pid,)).fetchone()[0]
        frames = con.execute("SELECT COUNT(*) FROM SAMPLING_CALLCHAINS sc JOIN COMPOSITE_EVENTS ce ON ce.id = sc.id "
                             "WHERE (ce.globalTid >> 24) & 0xFFFFFF = ?", (pid,)).fetchone()[0]
        modules = {r[0] for r in con.execute(
            "SELECT DISTINCT m.value FROM SAMPLING_CALLCHAINS sc JOIN COMPOSITE_EVENTS ce ON ce.id = sc.id "
            "JOIN StringIds m ON m.id = sc.module WHERE (ce.globalTid >> 24) & 0xFFFFFF = ?", (pid,))}
        return n, frames, modules
    finally:
        con.close()


def _program_pid(sqlite):
    """The profiled program's pid: the process with the most OS runtime calls (osrt traces the process tree alone;
    PROCESSES lists every process of the machine)."""
    import sqlite3
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        return con.execute("SELECT (globalTid >> 24) & 0xFFFFFF AS pid FROM OSRT_API GROUP BY pid ORDER BY COUNT(*) DESC "
                           "LIMIT 1").fetchone()[0]
    finally:
        con.close()


def test_run_samples_the_cpu_by_default(nsys, tmp_path):
    """`run` with its defaults records CPU samples with backtraces for a real Python program burning CPU in numpy:
    the export has COMPOSITE_EVENTS and SAMPLING_CALLCHAINS rows for that process, its frames in numpy's module;
    `--sample none` records none. The run record says what was asked of nsys."""
    import sys
    prog = tmp_path / "burn.py"
    prog.write_text(BURN)
    env = {**os.environ, "NSYS": nsys.path}
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "on"), "--trace", "nvtx,osrt", "--",
                sys.executable, str(prog), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "on.run.json").read_text())
    assert "--sample=process-tree" in rec["nsys_command"] and "--cpuctxsw=process-tree" in rec["nsys_command"]
    env_check = subprocess.run([nsys.path, "status", "--environment"], capture_output=True, text=True, timeout=120)
    if "CPU Profiling Environment (process-tree): OK" not in env_check.stdout:
        # no sampling on this machine (perf_event_paranoid, a container): the default degrades to nsys's warning
        assert rec["nsys_messages"] and all(m["kind"] == "warning" for m in rec["nsys_messages"]), rec["nsys_messages"]
        pytest.skip("nsys cannot sample the CPU here (nsys status --environment); the run still succeeded")
    assert rec["recorded"]["sample"] == "process-tree" and rec["recorded"]["cpuctxsw"] == "process-tree"
    # the trace has no cuda: no Python backtraces of CUDA calls asked for, and the record says why
    assert rec["recorded"]["python_backtrace"] is None
    assert any("python-backtrace" in w and "does not trace cuda" in w for w in rec["recorded"]["left_out"])
    assert not any(a.startswith("--python-backtrace") for a in rec["nsys_command"])
    sqlite = rec["files"]["sqlite"]
    n, frames, modules = _samples_of(sqlite, _program_pid(sqlite))
    assert n > 50 and frames > n, (n, frames)  # ~500 samples at nsys's default period for 1.5 s of CPU
    assert any("_multiarray_umath" in m for m in modules), sorted(modules)[:20]

    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "off"), "--trace", "nvtx,osrt",
                "--sample", "none", "--", sys.executable, str(prog), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "off.run.json").read_text())
    assert "--sample=none" in rec["nsys_command"] and "--cpuctxsw=none" in rec["nsys_command"]
    assert rec["recorded"]["sample"] == "none" and rec["recorded"]["cpuctxsw"] == "none"
    sqlite = rec["files"]["sqlite"]
    assert _samples_of(sqlite, _program_pid(sqlite))[0] == 0


def test_python_backtrace_only_where_nsys_has_it(nsys, tmp_path):
    """--python-backtrace=cuda goes to nsys with --cudabacktrace (nsys 2024.2 takes the Python stack of a CUDA call
    only with its native one, and that only while sampling: seen on the H200) when nsys lists both options, the trace
    has cuda and the CPU is sampled; otherwise none of them, and the record says why."""
    from nsys_transfer.nsys_core.nsys import Nsys
    from nsys_transfer.profiling.runner import ProfileRequest, nsys_profile_args, recording
    req = ProfileRequest(["prog"], tmp_path / "x", trace="cuda,nvtx,osrt", capture_range=False, sample="process-tree",
                         ctxsw="process-tree", python_backtrace="cuda", python_sampling=True)
    args = nsys_profile_args(nsys, req, "out")
    if nsys.year_release >= (2024, 2):  # both options are in 2024.2's `nsys profile --help` (checked)
        assert "--cudabacktrace=all" in args and "--python-backtrace=cuda" in args and "--python-sampling=true" in args
        rec = recording(nsys, req)
        assert rec["left_out"] == [] and rec["python_backtrace"] == "cuda" and rec["cudabacktrace"] == "all"
        unsampled = ProfileRequest(["prog"], tmp_path / "z", trace="cuda,nvtx,osrt", sample="none", ctxsw="none",
                                   python_backtrace="cuda")
        args = nsys_profile_args(nsys, unsampled, "out")
        assert not any(a.startswith(("--python-backtrace", "--cudabacktrace")) for a in args)
        assert any("needs CPU sampling" in w for w in recording(nsys, unsampled)["left_out"])
    old = tmp_path / "nsys-old"
    old.write_text("#!/bin/sh\necho '\t--trace=\n\t-s, --sample=\n\t--cpuctxsw='\n")
    old.chmod(0o755)
    args = nsys_profile_args(Nsys(str(old), "2021.1.1", "test"), req, "out")
    assert not any(a.startswith(("--python-backtrace", "--python-sampling", "--cudabacktrace")) for a in args)
    assert "--sample=process-tree" in args
    left = recording(Nsys(str(old), "2021.1.1", "test"), req)["left_out"]
    assert len(left) == 2 and all("has no such option" in w for w in left)
    # the stage command keeps its own words: --sample is a flag there, nsys's "cpu"
    legacy = ProfileRequest(["prog"], tmp_path / "y", sample=True, ctxsw=False)
    assert "--sample=cpu" in nsys_profile_args(nsys, legacy, "out") and "--cpuctxsw=none" in nsys_profile_args(
        nsys, legacy, "out")


def test_an_output_place_that_cannot_be_written_is_refused_before_the_program_runs(nsys, tmp_path):
    """`run -o /proc/...`: refused in one line before nsys starts (the program never runs, no report is left in /tmp)."""
    env = {**os.environ, "NSYS": nsys.path}
    ran = tmp_path / "ran"
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", "/proc/nsys-transfer/x", "--trace", "nvtx,osrt",
                "--sample", "none", "--", "touch", str(ran), env=env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "/proc/nsys-transfer: the trace cannot be written there" in r.stderr and "Traceback" not in r.stderr
    assert not ran.exists()


def test_a_failing_program_fails_the_run_and_keeps_its_capture(nsys, tmp_path):
    """`run -- python three.py` (it exits 3): the program's status is the run's, after one line that says so, and the
    capture is kept. (A program that cannot start is refused before nsys: tests/test_failed_runs.py.)"""
    import sys
    env = {**os.environ, "NSYS": nsys.path}
    prog = tmp_path / "three.py"
    prog.write_text("import sys\nsys.exit(3)\n")
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "three"), "--trace", "nvtx,osrt",
                "--sample", "none", "--", sys.executable, str(prog), env=env, timeout=300)
    assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
    said = [line for line in r.stderr.splitlines() if "the program exited with status 3" in line]
    assert len(said) == 1 and "Traceback" not in r.stderr
    rec = json.loads((tmp_path / "three.run.json").read_text())
    assert rec["program_exit_code"] == 3 and os.path.exists(rec["files"]["sqlite"])
