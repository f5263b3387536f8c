"""The program's Python stacks, sampled by `nsys-transfer run` beside its trace, and the lines the analysis names from
them: on real captures (nsys records a CPU program here without a GPU) and on the sampler itself."""
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli
from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load import python_stacks
from nsys_transfer.analysis.summary import analyze_sections

PROGRAM = ROOT / "tests" / "programs" / "cpu_lines.py"
SAMPLER = ROOT / "profiling" / "stack-sampler"
CONCAT = "index = np.concatenate([index, f])"


@pytest.fixture(scope="module")
def captured(nsys, tmp_path_factory):
    """cpu_lines.py traced with run's defaults (OS runtime and NVTX: no GPU here) and the stack sampler."""
    out = tmp_path_factory.mktemp("lines") / "lines"
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(out), "--trace", "nvtx,osrt", "--",
                sys.executable, str(PROGRAM), "--batches", "24", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_run_samples_every_python_process_and_packs_one_file(captured):
    stacks = captured.with_name("lines.pystacks.gz")
    assert stacks.is_file() and not captured.with_name("lines.pystacks.d").exists()
    record = json.loads(captured.with_name("lines.run.json").read_text())
    assert record["files"]["python_stacks"] == str(stacks) and record["recorded"]["python_stacks_ms"] == 10
    heads = [line for line in gzip.open(stacks, "rt") if line.startswith("H ")]
    assert len(heads) >= 3  # the program and its two pool workers (forked: each starts its own sampler)


def test_a_cpu_capture_names_its_lines_with_their_role(captured):
    with Trace.open(captured.with_name("lines.sqlite")) as t:
        code = analyze_sections(t).summary["code"]
    assert code["missing"] is None and "every 10 ms" in code["source"]
    top = code["cpu"][0]
    assert top["code"] == CONCAT and top["file"].endswith("cpu_lines.py") and top["line"] == 34
    assert top["role"] == "accumulation" and top["share"] > 0.3 and top["function"] == "main"
    text = run_cli("-m", "nsys_transfer.analysis", str(captured.with_name("lines.sqlite"))).stdout
    assert f"cpu_lines.py:34  {CONCAT}  [accumulation]" in text


def test_the_stacks_land_on_the_traces_clock(captured):
    """The samples fall inside the capture: the program's first and last lines within the trace's own span."""
    with Trace.open(captured.with_name("lines.sqlite")) as t:
        stacks = python_stacks.read(python_stacks.beside(t.source), t.session_start_utc_ns)
        last_osrt = int(t.query("SELECT MAX(end) AS e FROM OSRT_API")["e"][0])
    s = stacks.samples
    assert s["start_ns"].min() > 0 and s["end_ns"].max() <= last_osrt + 50_000_000


def test_a_trace_without_stacks_says_so_in_one_line(captured, tmp_path):
    lone = tmp_path / "lone.sqlite"
    lone.write_bytes(captured.with_name("lines.sqlite").read_bytes())
    text = run_cli("-m", "nsys_transfer.analysis", str(lone)).stdout
    said = [line for line in text.splitlines() if line.startswith("program lines:")]
    assert len(said) == 1 and "no Python stacks beside this trace" in said[0] and "nsys-transfer run" in said[0]


def test_a_damaged_stacks_file_is_one_line_not_a_traceback(captured, tmp_path):
    trace = tmp_path / "cut.sqlite"
    trace.write_bytes(captured.with_name("lines.sqlite").read_bytes())
    whole = captured.with_name("lines.pystacks.gz").read_bytes()
    (tmp_path / "cut.pystacks.gz").write_bytes(whole[:40])  # a real file cut short
    r = run_cli("-m", "nsys_transfer.analysis", str(trace))
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "program lines: " in r.stdout and "capture the program again" in r.stdout


def test_run_can_leave_the_sampler_out(nsys, tmp_path):
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "off"), "--trace", "nvtx,osrt",
                "--python-stacks-ms", "0", "--", sys.executable, "-c", "print(1)", timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    assert not list(tmp_path.glob("*.pystacks*"))


@pytest.mark.alone  # counts the samples of a 0.3 s busy loop: a busy machine takes them away
def test_the_sampler_hands_over_to_the_programs_own_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("print('own sitecustomize ran')\n")
    out = tmp_path / "stacks"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{SAMPLER}{os.pathsep}{own}", "NSYS_TRANSFER_PYSTACKS": str(out),
           "NSYS_TRANSFER_PYSTACKS_MS": "2"}
    r = subprocess.run([sys.executable, "-c", "import time; t = time.time()\nwhile time.time() - t < 0.3: pass"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "own sitecustomize ran" in r.stdout
    files = list(out.glob("*.stacks"))
    assert len(files) == 1 and sum(line.startswith("S ") for line in files[0].read_text().splitlines()) > 20


def _sampled(tmp_path, code: str) -> list:
    """The sampler alone (no nsys) on a small program: every S line of every process's file, as (pid, tid)."""
    out = tmp_path / "stacks"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(SAMPLER), "NSYS_TRANSFER_PYSTACKS": str(out),
           "NSYS_TRANSFER_PYSTACKS_MS": "2"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = []
    for f in out.glob("*.stacks"):
        rows += [(int(f.stem), int(line.split()[2])) for line in f.read_text().splitlines() if line.startswith("S ")]
    return rows, r.stdout


def test_each_thread_is_sampled_under_its_own_os_id_though_idents_are_reused(tmp_path):
    code = ("import threading, time\nids = []\n"
            "def busy():\n    ids.append(threading.get_native_id()); t = time.time()\n"
            "    while time.time() - t < 0.15: pass\n"
            "for _ in range(3):\n    th = threading.Thread(target=busy); th.start(); th.join()\nprint(*ids)")
    rows, out = _sampled(tmp_path, code)
    tids = {tid for _, tid in rows}
    assert set(map(int, out.split())) <= tids  # each of the three threads, one after another, under its own id


def test_short_forked_workers_keep_their_samples(tmp_path):
    code = ("import multiprocessing as mp, time\n"
            "def work(_):\n    t = time.time()\n    while time.time() - t < 0.15: pass\n    return 1\n"
            "if __name__ == '__main__':\n    with mp.get_context('fork').Pool(2) as p: print(sum(p.map(work, range(2))))")
    rows, _ = _sampled(tmp_path, code)
    pids = {pid for pid, _ in rows}
    assert len(pids) >= 3  # the parent and both workers, though each worker ends by os._exit()


def test_stacks_of_another_capture_are_not_read_as_this_ones(captured, tmp_path):
    """A stacks file beside a trace that holds none of the trace's processes: one line, no line named from it."""
    trace = tmp_path / "other.sqlite"
    trace.write_bytes((ROOT / "tests" / "data" / "strangers" / "audio_mel_nsys2024.sqlite.xz").read_bytes())
    trace = trace.rename(tmp_path / "other.sqlite.xz")
    (tmp_path / "other.pystacks.gz").write_bytes(captured.with_name("lines.pystacks.gz").read_bytes())
    with Trace.open(trace) as t:
        s = analyze_sections(t).summary
    assert "another capture's" in s["code"]["missing"] and all(f["line"] is None for f in s["diagnosis"])


def test_a_base_name_with_dots_finds_its_own_stacks(tmp_path):
    for name in ("bs1.5.sqlite", "bs1.5.sqlite.xz", "bs1.5.nsys-rep"):
        (tmp_path / "bs1.pystacks.gz").write_bytes(b"")
        assert python_stacks.beside(tmp_path / name) is None  # not bs1's
        (tmp_path / "bs1.5.pystacks.gz").write_bytes(b"")
        assert python_stacks.beside(tmp_path / name) == tmp_path / "bs1.5.pystacks.gz"
        (tmp_path / "bs1.5.pystacks.gz").unlink()


def test_a_run_without_stacks_leaves_no_older_runs_stacks_beside_its_trace(nsys, tmp_path):
    base = tmp_path / "again"
    for ms in ("10", "0"):
        r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(base), "--trace", "nvtx,osrt", "--force",
                    "--python-stacks-ms", ms, "--", sys.executable, "-c", "import time; time.sleep(0.3)", timeout=300)
        assert r.returncode == 0, r.stderr[-1000:]
    assert not list(tmp_path.glob("again.pystacks*"))


def test_a_stopped_run_ends_nsys_and_the_program_and_leaves_no_samples_folder(nsys, tmp_path):
    import signal
    import time
    pidfile = tmp_path / "prog.pid"
    prog = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    run = subprocess.Popen([sys.executable, "-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "stopped"),
                            "--trace", "nvtx,osrt", "--", sys.executable, "-c", prog], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not pidfile.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert pidfile.exists(), "the program never started"
    time.sleep(0.5)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) != 0
    program = int(pidfile.read_text())
    for _ in range(50):  # nsys ends the program it runs as it stops
        try:
            os.kill(program, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(program, 9)
        raise AssertionError("the program outlived the stopped run")
    assert not (tmp_path / "stopped.pystacks.d").exists()


def test_the_samplers_thread_is_named_in_the_trace_and_left_out_of_the_programs_work(captured):
    """Its waits and writes run on to each process's exit: verify's loop end must not take them for output work."""
    from nsys_transfer.analysis.sections.loop import SAMPLER_THREAD, _profilers_threads
    with Trace.open(captured.with_name("lines.sqlite")) as t:
        names = set(t.host.threads["thread_name"].astype(str))
        samplers = _profilers_threads(t)
    assert SAMPLER_THREAD in names and len(samplers) >= 3  # the program and its two pool workers
