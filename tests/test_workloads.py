"""The stages on the CPU with small real models: integrity, fail-fast, clean shutdown, refusals."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, run_cli  # noqa: E402

GLOO_ABORT = "terminate called without an active exception"  # a C++ thread's uncaught exception: std::terminate
TINY = ["--device", "cpu", "--batch", "2", "--img", "64", "--classes", "3", "--steps", "3", "--warmup", "1",
        "--loader-workers", "0", "--output-workers", "2"]


def _procs_with(marker: str) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker in open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"):
                    pids.append(int(p))
            except OSError:
                pass
    return pids


def _shm() -> set:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.alone  # reads every /dev/shm entry: another test's processes make some of their own meanwhile
@pytest.mark.parametrize("stage", ["naive-input", "baseline", "multiproc", "bufpool", "pinned", "ceiling"])
def test_cpu_stages_run_with_integrity(stage, tmp_path):
    out = tmp_path / "r.json"
    shm_before = _shm()
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", stage, *TINY, "--seed", "4242", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["stage"] == stage and rec["throughput"]["steps"] == 3 and rec["throughput"]["steps_per_s"] > 0
    integ = rec["integrity"]
    if stage == "ceiling":
        assert not integ["checked"]
    else:
        assert integ["ok"] and integ["processed"] == integ["expected_batches"] == 4
    assert rec["environment"]["torch"] == torch.__version__
    assert 0 < rec["host_cpu"]["busy"] <= 1 and rec["host_cpu"]["cpus"] == len(os.sched_getaffinity(0))
    assert not _procs_with("--seed\x004242"), "output workers left behind"
    assert _shm() <= shm_before, "shared-memory segments left behind"


def test_encoder_model_through_worker_stage(tmp_path):
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "bufpool", "--model", "encoder", "--tokens", "16", "--dim", "64",
                "--layers", "1", "--device", "cpu", "--batch", "4", "--steps", "2", "--warmup", "1",
                "--loader-workers", "0", "--output-workers", "2", "--json", str(tmp_path / "e.json"))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "e.json").read_text())
    assert rec["output_bytes_per_batch"] == 4 * 16 * 64 * 4 and rec["integrity"]["ok"]


def test_npy_postprocess_writes_exact_outputs(tmp_path):
    d = tmp_path / "npy"
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "multiproc", *TINY, "--postprocess", f"npy:{d}")
    assert r.returncode == 0, r.stderr[-2000:]
    files = sorted(d.glob("batch_*.npy"))
    assert len(files) == 4
    a = np.load(files[0])
    assert a.shape == (2, 3, 64, 64) and a.dtype == np.float32 and np.isfinite(a).all()


def test_batches_split_across_workers_keep_integrity(tmp_path):
    """Each batch cut into 3 slices that 3 workers serialise at once; slice checksums must add up per batch."""
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "bufpool", *TINY[:-2], "--output-workers", "3", "--split", "3",
                "--steps", "5", "--json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr[-2000:]
    integ = json.loads((tmp_path / "s.json").read_text())["integrity"]
    assert integ["ok"] and integ["processed"] == integ["expected_batches"] == 6


def test_slice_bounds_cover_the_batch_once():
    from nsys_transfer.workloads.workers import slice_bounds
    for nbytes in (8, 100, 4620, 1 << 20):
        for n in (1, 2, 3, 8):
            parts = [slice_bounds(nbytes, k, n) for k in range(n)]
            assert parts[0][0] == 0 and parts[-1][1] == nbytes
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
            assert all(lo % 8 == 0 or lo == nbytes for lo, _ in parts)  # empty tail slices are allowed


@pytest.mark.parametrize("stage,extra", [("baseline", []), ("bufpool", []), ("bufpool", ["--split", "2"])])
def test_integrity_checker_catches_corruption(stage, extra, tmp_path):
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", stage, *TINY, *extra, "--fault", "corrupt:2",
                "--json", str(tmp_path / "c.json"))
    assert r.returncode == 1
    integ = json.loads((tmp_path / "c.json").read_text())["integrity"]
    assert integ["mismatched"] == [2] and not integ["missing"] and not integ["duplicated"]
    assert "integrity FAILED" in r.stdout


def test_dead_worker_fails_fast_and_cleans_up():
    t0 = time.time()
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "bufpool", *TINY, "--fault", "die:1", "--seed", "5151", timeout=120)
    assert r.returncode != 0 and time.time() - t0 < 60
    last = r.stderr.strip().splitlines()[-1]
    assert "output worker" in last and "exited with code 17" in last and "Traceback" not in r.stderr
    assert not _procs_with("--seed\x005151")


def test_ctrl_c_leaves_no_children(tmp_path):
    cmd = [sys.executable, "-m", "nsys_transfer.workloads", "--stage", "multiproc", "--device", "cpu", "--batch", "2", "--img", "64",
           "--classes", "3", "--steps", "400", "--warmup", "1", "--loader-workers", "1", "--output-workers", "2",
           "--seed", "6161"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    deadline = time.time() + 120
    while "step 1/" not in line and time.time() < deadline:
        line = p.stderr.readline()
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "interrupted" in err and "Traceback" not in err
    time.sleep(0.5)
    assert not _procs_with("--seed\x006161")


def test_gpu_stage_on_cpu_and_bad_sizes_are_refused():
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "streams", "--device", "cpu")
    assert r.returncode != 0 and "needs --device cuda" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "bufpool", "--device", "cpu", "--batch", "100000", "--img", "1024")
    assert r.returncode != 0 and "host memory" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("-m", "nsys_transfer.workloads", "--stage", "baseline", "--device", "cpu", "--batch", "0")
    assert r.returncode != 0 and "--batch must be at least 1" in r.stderr


def test_checksums_agree_between_torch_and_numpy_and_chunks():
    from nsys_transfer.fixes.checksums import as_unsigned, checksum_tensor, checksum_update
    from nsys_transfer.workloads.postprocess import Sink
    x = torch.randn(3, 5, 7, 11)  # 4620 bytes: not a multiple of 8 in every chunking
    whole = checksum_update(0, x.numpy())
    assert as_unsigned(int(checksum_tensor(x))) == whole
    sink = Sink("devnull")
    for chunk in (0, 8, 64, 4096):
        assert sink.write_batch(0, x.numpy(), chunk) == whole
    y = x.clone()
    y.view(-1)[17] += 1.0
    assert checksum_update(0, y.numpy()) != whole


@pytest.mark.parametrize("ranks", [1, 2])
def test_torchrun_ranks_on_cpu(ranks, tmp_path):
    """torchrun with the gloo backend: each rank its share of the output workers, totals and integrity on rank 0."""
    out = tmp_path / "d.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "-m", "nsys_transfer.workloads",
           "--stage", "bufpool", *TINY[:-2], "--output-workers", "4", "--json", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and GLOO_ABORT in r.stderr and "SIGABRT" in r.stderr:
        # seen once in about 30 runs (2026-11-30, a fresh clone's suite): rank 0 aborted in C++ during the warm-up,
        # most likely a gloo connection thread throwing (as in pytorch/gloo#514); not reproduced in 22 runs after.
        # Only that abort is run again, once; any other failure fails at once.
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert [x["rank"] for x in rec["ranks"]] == list(range(ranks))
    assert [x["config"]["output_workers"] for x in rec["ranks"]] == [4 // ranks] * ranks
    assert len({x["config"]["seed"] for x in rec["ranks"]}) == ranks  # every rank reads its own data
    assert rec["throughput"]["world_size"] == ranks and rec["throughput"]["steps"] == 3 * ranks
    assert rec["integrity"]["ok"] and rec["integrity"]["expected_batches"] == 4 * ranks


def test_worker_counts_under_torchrun_default_per_gpu_else_shared():
    from nsys_transfer.workloads.config import RunConfig
    from nsys_transfer.workloads.distributed import Rank, share, worker_totals
    # unset: each of 4 ranks gets the single-GPU default; set: the total is divided among them
    totals = worker_totals(None, None, 4)
    cfg = RunConfig(device="cpu", **totals)
    assert share(cfg, Rank(2, 4, 2)).output_workers == RunConfig().output_workers
    assert share(cfg, Rank(2, 4, 2)).loader_workers == RunConfig().loader_workers
    mine = share(RunConfig(device="cpu", **worker_totals(6, 8, 4)), Rank(1, 4, 1))
    assert (mine.loader_workers, mine.output_workers) == (1, 2)
    assert worker_totals(None, None, 1) == {"loader_workers": RunConfig().loader_workers,
                                            "output_workers": RunConfig().output_workers}


def test_host_cpu_load_is_measured_on_the_allowed_cpus():
    """A process confined to one CPU that spins for 0.5 s reads that CPU as nearly fully busy."""
    code = ("import json, os, time; from nsys_transfer.workloads import hostload; "
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); a = hostload.read(); t = time.time()\n"
            "while time.time() - t < 0.5: pass\nprint(json.dumps(hostload.busy_fraction(a, hostload.read())))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    load = json.loads(r.stdout)
    assert load["cpus"] == 1 and load["busy"] > 0.8


def test_ctrl_c_inside_a_destructor_still_stops_the_run():
    """Python drops an exception raised inside __del__ (a tensor or a shared buffer freed), and a Ctrl-C can land
    there: once, a run went on to exit 0 after SIGINT. The step loop raises the kept signal again."""
    script = textwrap.dedent("""
        import os, signal
        from nsys_transfer.workloads.lifetime import raise_if_stopped, sigterm_as_interrupt
        sigterm_as_interrupt()
        class Freed:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs here, inside the destructor
                    pass
        Freed()
        print("went on", flush=True)
        raise_if_stopped()
        print("not stopped", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "went on" in r.stdout and "Exception ignored" in r.stderr  # the trap is real: the first raise was lost
    assert "not stopped" not in r.stdout and r.returncode != 0 and "KeyboardInterrupt" in r.stderr
