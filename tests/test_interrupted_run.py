"""An interrupted run leaves nothing in the way (issue 57, item 4): Ctrl-C (SIGINT to the foreground group) or SIGTERM
(`timeout`, a scheduler) while `nsys-transfer run` traces a program ends it promptly, leaves no process, no file and no
folder of that run, keeps an earlier trace of the name (--force) as it was, and never blocks the name for the next
run. Real captures of a small CPU program."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SLOW = """import time, nvtx
print("READY", flush=True)
for i in range(int(__import__("sys").argv[1])):
    with nvtx.annotate(f"step {i}"):
        time.sleep(0.05)
"""


def _run(folder, name, steps, *opts):
    """`nsys-transfer run` of the program into folder/runs/NAME/NAME, in its own process group as a terminal's
    foreground job is (SIGINT's default action back: a background shell job would have it ignored)."""
    return subprocess.Popen([sys.executable, "-m", "nsys_transfer.profiling", "run", "-o",
                             str(folder / "runs" / name / name), "--sample", "none", "--python-backtrace", "none", *opts,
                             "--", sys.executable, str(folder / "slow.py"), str(steps)],
                            cwd=folder, env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(folder / "tmp")},
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(p))
    return alive


@pytest.fixture
def folder(tmp_path, nsys):
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "tmp").mkdir()  # the run's TMPDIR: where nsys writes its capture before the import
    return tmp_path


def _stop_mid_capture(p: subprocess.Popen, sig: int) -> tuple[int, str, float]:
    """The signal to the run's whole group once the traced program runs; (exit code, stderr, seconds it took)."""
    deadline = time.time() + 120
    while time.time() < deadline and p.stderr.readline().strip() != "READY":  # the program's output, echoed
        assert p.poll() is None, p.stderr.read()
    time.sleep(1.0)
    t0 = time.time()
    os.killpg(p.pid, sig)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("the run went on for 30 s after the stop")
    return p.returncode, err, time.time() - t0


def test_ctrl_c_leaves_nothing_and_the_name_free(folder):
    p = _run(folder, "ctrlc", 2000, "--keep-name")
    rc, err, took = _stop_mid_capture(p, signal.SIGINT)
    assert rc == 130 and took < 15, (rc, took, err[-2000:])
    assert err.strip().splitlines()[-1] == "run: interrupted: nothing written under runs/ctrlc/ctrlc (the name stays free)"
    assert "Traceback" not in err
    assert not (folder / "runs").exists(), sorted(map(str, (folder / "runs").rglob("*")))
    assert not list((folder / "tmp").iterdir())  # nsys's .qdstrm of the stopped capture too (newcomer repeat #16)
    deadline = time.time() + 5
    while _group_alive(p.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _group_alive(p.pid)
    again = _run(folder, "ctrlc", 3, "--keep-name")  # the name is free: the same command runs
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert sorted(f.name for f in (folder / "runs" / "ctrlc").iterdir()) == [
        "ctrlc.nsys-rep", "ctrlc.pystacks.gz", "ctrlc.run.json", "ctrlc.sqlite"]
    rec = json.loads((folder / "runs" / "ctrlc" / "ctrlc.run.json").read_text())
    assert rec["files"]["sqlite"].endswith("runs/ctrlc/ctrlc.sqlite") and ".part" not in json.dumps(rec["files"])


def test_sigterm_keeps_the_earlier_trace_of_a_forced_name(folder):
    first = _run(folder, "again", 3, "--python-stacks-ms", "10")
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    runs = folder / "runs" / "again"
    before = {f.name: f.read_bytes() for f in runs.iterdir()}
    assert "again.pystacks.gz" in before and "again.sqlite" in before
    p = _run(folder, "again", 2000, "--force")
    rc, err, took = _stop_mid_capture(p, signal.SIGTERM)
    assert rc == 143 and took < 15, (rc, took, err[-2000:])
    assert err.strip().splitlines()[-1] == ("run: stopped by SIGTERM: nothing written under runs/again/again (the "
                                            "earlier trace of that name is kept)")
    assert {f.name: f.read_bytes() for f in runs.iterdir()} == before  # no hidden file left either
    assert not list((folder / "tmp").iterdir())
