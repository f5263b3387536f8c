"""A run folder as `make trace NAME=det` leaves it (runs/det/det.sqlite with det.pystacks.gz and det.run.json beside
it) stands for its trace in analyze-trace as in verify (the newcomer's item 14): both read a folder with the one
function load/inputs.traces_in (facade.traces_given). A folder without a trace, or with several traces that are not
one GPU run's ranks, is one error line and exit 2. Real traces only: the newcomer's detect_post_fixed capture (2-core
machine, no GPU) and cpu_roll's, copied into the folder."""
from __future__ import annotations

import json
import lzma
import os
import shutil
from pathlib import Path

import golden_answers as answers
import pytest

from conftest import ROOT, run_cli
from nsys_transfer.analysis.cli.verify import trace_in
from nsys_transfer.analysis.facade import traces_given

DATA = ROOT / "tests" / "data" / "newcomer"


def _run_folder(runs: Path, name: str, capture: str) -> Path:
    """runs/NAME/NAME.sqlite (the export uncompressed, as `nsys-transfer run` writes it) with its stacks and run
    record beside it."""
    folder = runs / name
    folder.mkdir(parents=True)
    with lzma.open(DATA / f"{capture}.sqlite.xz") as src, open(folder / f"{name}.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copyfile(DATA / f"{capture}.pystacks.gz", folder / f"{name}.pystacks.gz")
    shutil.copyfile(DATA / f"{capture}.run.json", folder / f"{name}.run.json")
    return folder


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    return {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path_factory.mktemp("cache")), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def det(tmp_path_factory) -> Path:
    return _run_folder(tmp_path_factory.mktemp("runs"), "det", "detect_post_fixed_nsys2024")


def test_analyze_trace_reads_the_trace_inside_a_run_folder(det, env, tmp_path):
    out = tmp_path / "s.json"
    proc = run_cli("-m", "nsys_transfer.analysis", str(det), "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{det / 'det.sqlite'}  (nsys 2024"), proc.stdout[:200]
    s = json.loads(out.read_text())
    assert s["trace"]["path"] == str(det / "det.sqlite")
    stored = answers.load()["tests/data/newcomer/detect_post_fixed_nsys2024.sqlite.xz"]
    # the stacks beside it were read: the same lines and findings as the committed capture's stored answer
    assert s["code"]["source"].startswith("det.pystacks.gz") and s["code"]["cpu"] == stored["code"]["cpu"]
    assert s["diagnosis"] == stored["diagnosis"]


def test_analyze_and_verify_name_the_same_trace_of_a_folder(det):
    assert traces_given([det]) == [trace_in(det)] == [det / "det.sqlite"]


def test_a_folder_without_a_trace_is_one_error_line(det, env, tmp_path):
    empty = tmp_path / "runs" / "det"
    empty.mkdir(parents=True)
    for f in ("det.pystacks.gz", "det.run.json"):  # what is left of a run whose export is gone
        shutil.copyfile(det / f, empty / f)
    proc = run_cli("-m", "nsys_transfer.analysis", str(empty), "-q", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "is a directory with no trace in it" in proc.stderr, proc.stderr


def test_a_folder_of_two_cpu_runs_is_one_error_line_not_gpu_advice(det, env, tmp_path):
    """Two runs of programs without a GPU in one folder: not one GPU run's ranks, so no rank comparison and no
    advice to record CUDA first only: give one of them."""
    both = tmp_path / "both"
    both.mkdir()
    shutil.copyfile(det / "det.sqlite", both / "det.sqlite")
    roll = _run_folder(tmp_path / "runs", "roll", "cpu_roll_nsys2024")
    shutil.copyfile(roll / "roll.sqlite", both / "roll.sqlite")
    proc = run_cli("-m", "nsys_transfer.analysis", str(both), "-q", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "2 traces without GPU activity (det.sqlite, roll.sqlite)" in proc.stderr
    assert "give one of them" in proc.stderr
