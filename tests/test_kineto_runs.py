"""Several torch.profiler traces (issue 58, item 6): a schedule's cycles, one file each, are one run with one verdict;
traces of several processes are ranks, analysed side by side with --jobs. Real traces: tests/programs/kineto_loop.py
recorded here with repeat=3 (three cycles, tensorboard_trace_handler's file per cycle), the two H100 runs of
kineto_min.py, and the two processes of tests/programs/strangers58/rank_text_preproc.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

PROGRAM = ROOT / "tests" / "programs" / "kineto_loop.py"
KINETO = ROOT / "tests" / "data" / "kineto"
RANKS = [KINETO / "strangers58" / f"rank_text_preproc_cpu.rank{r}.json.gz" for r in (0, 1)]
GPU_RUNS = [KINETO / "kineto_min_gpu.pt.trace.json.gz", KINETO / "kineto_min_gpu_b.pt.trace.json.gz"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    return {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path_factory.mktemp("cache")), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def cycles(tmp_path_factory) -> Path:
    """The folder tensorboard_trace_handler wrote three cycles of one run into (schedule(..., repeat=3))."""
    folder = tmp_path_factory.mktemp("cycles")
    subprocess.run([sys.executable, str(PROGRAM), str(folder / "tb"), "--tensorboard", "--cycles", "3", "--steps", "5"],
                   cwd=folder, check=True, capture_output=True, text=True, timeout=300)
    return folder / "tb"


def test_a_schedule_s_cycles_are_one_run_with_one_verdict(cycles, env, tmp_path):
    files = sorted(cycles.glob("*.pt.trace.json.gz"))
    assert len(files) == 3, files
    out = tmp_path / "run.json"
    proc = run_cli("-m", "nsys_transfer.analysis", str(cycles), "--json", str(out), env=env)  # the folder itself
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("3 torch.profiler traces of one run"), proc.stdout[:300]
    assert "no GPU activity" not in proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    run = doc["cycles"]  # the steady cycle with the median step is the document; `cycles` the run
    assert doc["schema"] == "nsys-transfer.analysis/2" and doc["trace"]["path"].endswith(run["detail_cycle"])
    assert [c["label"] for c in run["cycles"]] == [f.name for f in files]
    assert [c["first_step"] for c in run["cycles"]] == ["ProfilerStep#2", "ProfilerStep#7", "ProfilerStep#12"]
    assert all(c["steps"] == 3 for c in run["cycles"])
    assert run["detail_cycle"] in {c["label"] for c in run["cycles"] if c["steady"]}
    # the files named one by one (the README's glob) read the same, and so in two worker processes
    jobs = tmp_path / "jobs.json"
    proc = run_cli("-m", "nsys_transfer.analysis", *map(str, files), "--jobs", "2", "--json", str(jobs), env=env)
    assert proc.returncode == 0, proc.stderr
    again = json.loads(jobs.read_text())["cycles"]
    assert again["verdict"] == run["verdict"] and again["cycles"] == run["cycles"]


def test_the_one_verdict_is_computed_once_and_printed_from_it(cycles, env, tmp_path):
    """The cycles' verdict (its share of the steady cycles' GPU time) is one value: the JSON's and the text's agree."""
    from nsys_transfer.analysis import facade
    os.environ["NSYS_TRANSFER_CACHE"] = env["NSYS_TRANSFER_CACHE"]
    run = facade.analyze_cycles(sorted(cycles.glob("*.pt.trace.json.gz")))
    assert run.document()["cycles"]["verdict"]["share"] == run.verdict.share
    assert [c.first_step for c in run.cycles] == ["ProfilerStep#2", "ProfilerStep#7", "ProfilerStep#12"]


def test_two_processes_are_ranks_not_cycles():
    """rank_text_preproc.py run as rank 0 and rank 1: two processes, so ranks (their GPUs compared), never cycles."""
    from nsys_transfer.analysis import facade
    assert not facade.one_run(RANKS)
    assert not facade.one_run(GPU_RUNS)  # two runs of one program: two processes as well


def test_per_rank_kineto_traces_are_read_as_ranks_with_jobs(env, tmp_path):
    """Two torch.profiler GPU traces of two processes (kineto_min.py run twice on an H100) go the per-rank way, in two
    worker processes: each GPU's row, as per-rank nsys traces get."""
    out = tmp_path / "ranks.json"
    proc = run_cli("-m", "nsys_transfer.analysis", *map(str, GPU_RUNS), "--jobs", "2", "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(out.read_text())["ranks"]
    assert len(ranks["gpus"]) == 2 and all(g["steps"] == 8 for g in ranks["gpus"]), ranks["gpus"]  # ProfilerStep#N
    assert [t["nsys_version"].startswith("torch.profiler") for t in ranks["traces"]] == [True, True]
    assert ranks["limit"]["rule"] == "not-concurrent" and "make profile" not in ranks["limit"]["suggestion"]
