"""On a GPU machine only (skipped elsewhere; CI has no GPU): torchrun on one GPU and on every GPU, the link probe,
and a multi-rank capture analysed per device. docs/benchmarks.md records the runs on the lent H200 machines."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SMALL = ["--batch", "8", "--steps", "4", "--warmup", "1"]


def _torchrun(n: int, tmp_path, *args):
    out = tmp_path / f"ranks{n}.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "-m", "nsys_transfer.workloads",
                        "--stage", "pinned", *SMALL, *args, "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def test_torchrun_world_size_one_on_gpu(tmp_path):
    rec = _torchrun(1, tmp_path)
    assert rec["throughput"]["world_size"] == 1 and len(rec["ranks"]) == 1
    assert rec["ranks"][0]["config"]["output_workers"] == 8  # the single-GPU default, not a share of it
    assert rec["integrity"]["ok"] and rec["integrity"]["expected_batches"] == 5


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_torchrun_every_gpu_each_rank_its_own_device(tmp_path):
    n = torch.cuda.device_count()
    rec = _torchrun(n, tmp_path)
    assert sorted(r["environment"]["gpu_index"] for r in rec["ranks"]) == list(range(n))
    assert rec["integrity"]["ok"] and rec["integrity"]["per_rank_ok"] == [True] * n


def test_linkprobe_pinned_beats_pageable(tmp_path):
    out = tmp_path / "probe.json"
    r = subprocess.run([sys.executable, "-m", "nsys_transfer.workloads.linkprobe", "--mb", "256", "--repeat", "3", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    v = json.loads(out.read_text())["verdict"]
    assert min(v["pinned"]["solo_gbps"]) > max(v["pageable"]["solo_gbps"])


def test_capture_of_every_gpu_is_analysed_per_device(tmp_path):
    from nsys_transfer.nsys_core.nsys import NsysNotFound, find_nsys
    try:
        find_nsys()
    except NsysNotFound as e:
        pytest.skip(str(e))
    n = torch.cuda.device_count()
    r = subprocess.run([sys.executable, "-m", "nsys_transfer.profiling", "stage", "pinned", "--gpus", str(n), "--steps", "3",
                        "--warmup", "1", "--out-dir", str(tmp_path), "--batch", "8"],
                       cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.rank_summary import analyze_ranks
    with Trace.open(r.stdout.strip().splitlines()[-1]) as t:
        ranks = analyze_ranks([t])
    assert sorted(ranks.devices["device"]) == list(range(n))
    assert (ranks.devices["dtoh_bytes"] > 0).all()


def test_output_pipeline_sets_up_its_cuda_side_before_the_first_batch():
    """With CUDA in use, __enter__ makes the copy stream (made at the first submit, it waited for the GPU to finish
    that batch); the first submit pins its own buffer and no other; every batch arrives intact."""
    import time
    from nsys_transfer.fixes import OutputPipeline
    from nsys_transfer.fixes.copier import CudaCopier
    x = torch.ones(1 << 20, device="cuda")
    with OutputPipeline(lambda i, a: None, workers=2, buffers=4, verify=True) as pipe:
        early = pipe._copier
        assert isinstance(early, CudaCopier) and early.device == x.device
        pipe.submit(0, x * 0)
        assert pipe._copier is early and len(pipe._slots.registered) == 1
        pipe.flush()
        time.sleep(0.5)  # the pin-ahead, had the first submit started one, has long finished
        assert len(pipe._slots.registered) == 1
        pipe.submit(1, x * 1)
    assert pipe.report().ok and pipe.report().processed == 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_output_pipeline_refuses_outputs_on_two_gpus():
    """One pipeline copies from one GPU: outputs on cuda:1 with device=cuda:0 get one clear error, not a copy ordered
    after the wrong GPU's stream."""
    from nsys_transfer.fixes import LayoutError, OutputPipeline
    with pytest.raises(LayoutError, match="on 2 GPUs"):
        with OutputPipeline(lambda i, a: None, workers=1, device="cuda:0") as pipe:
            pipe.submit(0, torch.ones(8, device="cuda:1"))


def test_output_pipeline_entered_in_inference_mode_takes_batches_outside_it():
    """The checksum rows are made at __enter__ now: made there under inference_mode, a submit outside it would be an
    in-place update of an inference tensor, which torch refuses."""
    from nsys_transfer.fixes import OutputPipeline
    with torch.inference_mode():
        pipe = OutputPipeline(lambda i, a: None, workers=1, verify=True).__enter__()
    try:
        pipe.submit(0, torch.ones(8, device="cuda"))
        with torch.inference_mode():
            pipe.submit(1, torch.ones(8, device="cuda"))
    finally:
        pipe.__exit__(None, None, None)
    assert pipe.report().ok and pipe.report().processed == 2
