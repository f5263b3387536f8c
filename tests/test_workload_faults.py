"""The workloads under faults, on the CPU with a tiny real model: a worker killed, the main process terminated or
killed, memory that runs out after the up-front check, an option a stage would ignore. Each ends in one line (or, for
SIGKILL, in silence) and leaves no process and no shared-memory segment behind."""
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

# the encoder at its smallest: the run is all pipeline, no model time; 3 output workers and 1 loader worker
LONG_RUN = ["--stage", "bufpool", "--model", "encoder", "--tokens", "16", "--dim", "64", "--layers", "1",
            "--device", "cpu", "--batch", "2", "--steps", "1000000", "--warmup", "1", "--loader-workers", "1",
            "--output-workers", "3"]


def _children(pid: int) -> dict[int, str]:
    """pid -> process name (/proc/PID/comm) of every live child of pid."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = open(f"/proc/{p}/stat").read()
            name = open(f"/proc/{p}/comm").read().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(p)] = name
    return out


def _alive(pids) -> list[int]:
    def running(p):
        try:
            return open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    return [p for p in pids if running(p)]


def _segments_of(pids) -> list[str]:
    """/dev/shm entries named after these processes (torch_<pid>_..., pym-<pid>-...)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names for p in pids if f"_{p}_" in n or f"-{p}-" in n]


def _start_long_run(stage: str = "bufpool"):
    args = [stage if a == "bufpool" else a for a in LONG_RUN]
    p = subprocess.Popen([sys.executable, "-m", "nsys_transfer.workloads", *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)  # its own group, for killpg
    line, deadline = "", time.time() + 120
    while "step 1/" not in line and time.time() < deadline and p.poll() is None:
        line = p.stderr.readline()
    assert "step 1/" in line, "the run did not start"
    named = ["loader-worker-0", "output-worker-0", "output-worker-1", "output-worker-2"]
    deadline = time.time() + 20
    # the loader worker starts with the first batch, and a worker names itself only once it runs (on a loaded machine,
    # a moment after it exists): wait for the four names
    while sorted(_children(p.pid).values()) != named and time.time() < deadline:
        time.sleep(0.1)
    kids = _children(p.pid)
    assert sorted(kids.values()) == named, kids
    return p, kids


@pytest.mark.alone  # timed: the run ends within 10 s of the fault, its four workers named within 20 s of its start
@pytest.mark.parametrize("stage", ["multiproc", "bufpool", "pinned"])
@pytest.mark.parametrize("fault", ["one-worker-killed", "SIGTERM", "SIGKILL", "SIGTERM-group"])
def test_faults_end_the_run_and_leave_nothing_behind(fault, stage):
    """pinned runs on the fixes library (OutputPipeline, prefetch) through its CPU path; SIGTERM-group is what
    `timeout`, Slurm's scancel and `kill -TERM -PGID` send: the loader's and the pipeline's workers get it too."""
    p, kids = _start_long_run(stage)
    victim = next(pid for pid, name in kids.items() if name == "output-worker-1")
    t0 = time.time()
    if fault == "one-worker-killed":  # its two siblings would keep up: the run must notice it anyway
        os.kill(victim, signal.SIGKILL)
    elif fault == "SIGTERM-group":
        os.killpg(p.pid, signal.SIGTERM)
    else:
        os.kill(p.pid, getattr(signal, fault))
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"{fault}: the run went on for 30 s")
    took = time.time() - t0
    errors = [x for x in err.splitlines() if x.startswith("workloads:")]
    assert "Traceback" not in err, err[-3000:]
    if fault == "one-worker-killed":
        assert p.returncode == 1 and took < 10, (p.returncode, took)
        assert errors == [f"workloads: output worker 1 (pid {victim}) was killed by SIGKILL while batches were "
                          "pending; stopping the run"], err[-2000:]
    elif fault.startswith("SIGTERM"):
        assert p.returncode == 1 and took < 10 and errors == ["workloads: terminated (SIGTERM); workers stopped"], err
    else:
        assert p.returncode == -signal.SIGKILL and errors == []
    deadline = time.time() + 5  # the parent-death signal is immediate; allow the kernel a moment to reap
    while _alive(kids) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(kids), f"{fault}: workers left alive: {_alive(kids)}"
    assert not _segments_of([p.pid, *kids]), f"{fault}: shared memory left: {_segments_of([p.pid, *kids])}"


# Run the workload under an address-space limit set just above what the interpreter, torch and the workload's
# modules already map: the up-front check (which reads the machine's free memory) passes, and the first output
# buffer (0.8 GB) cannot be allocated.
UNDER_A_LIMIT = """
import resource, runpy, sys
import torch, nsys_transfer.workloads.runtime, nsys_transfer.workloads.stages.bufpool
size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), size + (1 << 30)))
sys.argv = ["workloads", *sys.argv[1:]]
runpy.run_module("nsys_transfer.workloads", run_name="__main__")
"""


def test_allocation_that_fails_after_the_check_is_one_line():
    r = subprocess.run([sys.executable, "-c", UNDER_A_LIMIT, "--stage", "bufpool", "--model", "encoder",
                        "--tokens", "49152", "--dim", "1024", "--layers", "1", "--batch", "4", "--device", "cpu",
                        "--steps", "2", "--warmup", "1", "--loader-workers", "0", "--output-workers", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [x for x in r.stderr.splitlines() if x.startswith("workloads:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(errors) == 1 and "out of host memory: an allocation of 0.81 GB failed" in errors[0], r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == errors[0]


@pytest.mark.parametrize("stage", ["baseline", "multiproc", "bufpool", "ceiling"])
def test_unsafe_refused_where_it_does_nothing(stage):
    r = subprocess.run([sys.executable, "-m", "nsys_transfer.workloads", "--stage", stage, "--device", "cpu", "--unsafe"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"workloads: --unsafe hands buffers to the workers before their asynchronous copy finished, which only "
        f"stages async, streams, pinned do; stage {stage} would ignore it, so drop it"], r.stderr


def test_unsafe_still_accepted_where_it_acts():
    from nsys_transfer.workloads.config import RunConfig
    for stage in ("async", "streams", "pinned"):
        RunConfig(stage=stage, unsafe=True).validate()


def test_nccl_gets_each_ranks_own_device():
    """Under torchrun on GPUs the process group is bound to the rank's GPU (NCCL otherwise guesses it from the
    global rank and warns it may hang); gloo on the CPU takes no device."""
    from nsys_transfer.workloads.distributed import Rank, process_group_args
    args = process_group_args(Rank(rank=3, world=4, local=1), "cuda")
    assert args == {"backend": "nccl", "device_id": torch.device("cuda", 1)}
    assert process_group_args(Rank(rank=1, world=2, local=1), "cpu") == {"backend": "gloo"}


def test_resource_sharer_reset_is_quiet_other_errors_are_not(monkeypatch, capsys):
    """The sharer thread's connection reset (its peer process stopped) prints nothing; the same error elsewhere, and
    any other error from the sharer, still print."""
    import sys

    from nsys_transfer.workloads.lifetime import quiet_resource_sharer

    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    quiet_resource_sharer()

    def raised(kind, filename):
        code = compile(f"raise {kind}('peer gone')", filename, "exec")
        try:
            exec(code, {})
        except Exception:
            return sys.exc_info()

    sys.excepthook(*raised("ConnectionResetError", "/usr/lib/python3/multiprocessing/resource_sharer.py"))
    assert capsys.readouterr().err == ""
    sys.excepthook(*raised("ConnectionResetError", "/work/mine.py"))
    sys.excepthook(*raised("ValueError", "/usr/lib/python3/multiprocessing/resource_sharer.py"))
    err = capsys.readouterr().err
    assert err.count("Traceback") == 2 and "ValueError" in err
