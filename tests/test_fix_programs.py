"""Three programs written the way their users write them (tests/programs: hf_embed, seg_logits, image_loop), each
fixed with nsys_transfer.fixes in at most 10 changed lines (NAME_fixed.py). On the CPU, the fixed program's outputs
are the same bytes as the original's, and its pipeline says every batch arrived intact. The GPU before/after figures
are benchmarks/fixes.py's (docs/benchmarks.md)."""
import re
import ast
import difflib
import json
import os

import numpy as np
import pytest

from conftest import ROOT, run_cli

PROGRAMS = ROOT / "tests" / "programs"
PAIRS = ["hf_embed", "seg_logits", "image_loop"]


def code_lines(path) -> list[str]:
    """The program's lines after its module docstring."""
    src = path.read_text()
    first = ast.parse(src).body[0]
    skip = first.end_lineno if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else 0
    return src.splitlines()[skip:]


def changed_lines(a, b) -> int:
    """Lines changed between two versions: each differing hunk counts its longer side."""
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


@pytest.mark.parametrize("name", PAIRS)
def test_the_fix_is_at_most_ten_changed_lines(name):
    before, after = code_lines(PROGRAMS / f"{name}.py"), code_lines(PROGRAMS / f"{name}_fixed.py")
    n = changed_lines(before, after)
    assert 0 < n <= 10, f"{name}: {n} changed lines"
    assert not any("nsys_transfer" in x for x in before)
    assert any(x.startswith("from nsys_transfer.fixes import") for x in after)


def _run(program, *args, tmp_path=None):
    env = {**os.environ, "NSYS_TRANSFER_VERIFY": "1", "PYTHONPATH": str(ROOT)}
    r = run_cli(str(PROGRAMS / f"{program}.py"), "--device", "cpu", *args, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads([x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])
    return result, r.stderr


def _same_files(a, b) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names and names == sorted(p.name for p in b.iterdir())
    for n in names:
        x, y = np.load(a / n), np.load(b / n)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), n
        else:
            assert all(np.array_equal(x[k], y[k]) for k in x.files), n


def test_seg_logits_fixed_saves_the_same_results(tmp_path):
    args = ["--batches", "4", "--warmup", "1", "--batch", "2", "--img", "64", "--workers", "2",
            "--model", "fcn_resnet50"]
    _run("seg_logits", *args, "--out", str(tmp_path / "before"))
    result, err = _run("seg_logits_fixed", *args, "--out", str(tmp_path / "after"))
    assert result["batches"] == 3 and "all 4 batches arrived exactly once, intact" in err, err[-2000:]
    _same_files(tmp_path / "before", tmp_path / "after")


def test_seg_logits_fixed_in_bfloat16_delivers_every_batch(tmp_path):
    args = ["--batches", "3", "--warmup", "1", "--batch", "2", "--img", "64", "--workers", "2",
            "--model", "fcn_resnet50", "--dtype", "bf16", "--channels-last"]
    _run("seg_logits", *args, "--out", str(tmp_path / "before"))
    _, err = _run("seg_logits_fixed", *args, "--out", str(tmp_path / "after"))
    assert "all 3 batches arrived exactly once, intact" in err, err[-2000:]
    _same_files(tmp_path / "before", tmp_path / "after")


def test_image_loop_fixed_counts_the_same():
    args = ["--batches", "4", "--warmup", "1", "--batch", "4", "--img", "32", "--workers", "1", "--model", "resnet18"]
    before, _ = _run("image_loop", *args)
    after, _ = _run("image_loop_fixed", *args)
    assert before["correct"] == after["correct"] and after["batches"] == 3


def test_hf_embed_fixed_saves_the_same_embeddings(tmp_path):
    pytest.importorskip("transformers", reason="the Hugging Face program needs transformers (the GPU machine has it)")
    args = ["--batches", "3", "--warmup", "1", "--batch", "2", "--tokens", "16", "--layers", "1", "--workers", "2"]
    _run("hf_embed", *args, "--out", str(tmp_path / "before"))
    _, err = _run("hf_embed_fixed", *args, "--out", str(tmp_path / "after"))
    assert "all 3 batches arrived exactly once, intact" in err
    _same_files(tmp_path / "before", tmp_path / "after")


def test_hf_embed_fixed_split_saves_every_row_once(tmp_path):
    """--split 3: each batch's 4 rows reach three workers as slices (1, 1 and 2 rows), each its own file; put back
    together they are the original's embeddings, batch by batch."""
    pytest.importorskip("transformers", reason="the Hugging Face program needs transformers (the GPU machine has it)")
    args = ["--batches", "3", "--warmup", "1", "--batch", "4", "--tokens", "16", "--layers", "1", "--workers", "3"]
    _run("hf_embed", *args, "--out", str(tmp_path / "before"))
    _, err = _run("hf_embed_fixed", *args, "--split", "3", "--out", str(tmp_path / "after"))
    assert "all 3 batches arrived exactly once, intact" in err, err[-2000:]
    for whole in sorted((tmp_path / "before").iterdir()):
        parts = sorted((tmp_path / "after").glob(whole.stem + "_*.npy"))
        assert [p.name[-7:-4] for p in parts] == ["000", "001", "002"], whole.name
        assert np.array_equal(np.concatenate([np.load(p) for p in parts]), np.load(whole)), whole.name


# ---- the same programs captured on the H200 (benchmarks/gpu.sh programs, nsys 2024.2), before and after the fix ----
DATA = ROOT / "tests" / "data" / "programs"


@pytest.fixture(scope="module")
def captured(summary_of):
    return {variant: summary_of(DATA / f"{variant}_nsys2024.sqlite.xz")
            for name in PAIRS for variant in (name, f"{name}_fixed")}


def _rules(summary) -> dict:
    """(rule, subject) -> finding, and rule -> its first finding."""
    costed = [f for f in summary["diagnosis"] if f["severity"] != "info"]
    return {**{(f["rule"], f["subject"]): f for f in costed}, **{f["rule"]: f for f in reversed(costed)}}


@pytest.mark.parametrize("name,direction", [("hf_embed", "DtoH"), ("seg_logits", "DtoH"), ("image_loop", "HtoD")])
def test_the_fix_removes_the_pageable_copies_it_addresses(captured, name, direction):
    """(model.to(device)'s own pageable HtoD copies of the weights are set-up: they stay, and are not this finding.)"""
    before, after = _rules(captured[name]), _rules(captured[f"{name}_fixed"])
    finding = before[("pageable-memcpy", direction)]
    assert finding["severity"] == "high" and "nsys_transfer.fixes" in finding["suggestion"]  # it names the fix
    assert ("pageable-memcpy", direction) not in after and "sync-memcpy" not in after


def test_the_output_fixes_take_the_cpu_work_off_the_launching_thread(captured):
    """.cpu() of the logits waits for its copy, and then the launching thread post-processes while the GPU idles:
    the sync is the copy's (its finding is pageable-memcpy), and the idle after it is the post-processing's CPU work
    (63% of seg_logits's steady state, 46% of hf_embed's), never host-sync. Through the pipeline that work runs in
    the workers: the launching thread no longer holds the GPU, and what paces the fixed seg_logits is the workers'
    drain."""
    for name in ("seg_logits", "hf_embed"):
        before, after = _rules(captured[name]), _rules(captured[f"{name}_fixed"])
        cpu = before[("gpu-idle-cpu-bound", None)]
        assert cpu["impact_fraction"] > 0.4 and cpu is costed_first(captured[name]), name
        assert before.get("host-sync", {"impact_fraction": 0})["impact_fraction"] < 0.02, name
        assert after.get(("gpu-idle-cpu-bound", None), {"impact_fraction": 0})["impact_fraction"] < 0.05, name
    assert costed_first(captured["seg_logits_fixed"])["rule"] == "output-bound"


def costed_first(summary) -> dict:
    return next(f for f in summary["diagnosis"] if f["severity"] != "info")


def test_a_pipeline_behind_its_gpu_is_named_with_its_cure(captured):
    """seg_logits's post-processing (numpy argmax of 16 x 21 x 512 x 512 logits) needs more CPU per batch than the
    GPU's forward: after the fix the main thread waits in the pipeline's drain, and the finding says why."""
    f = costed_first(captured["seg_logits_fixed"])
    assert f["rule"] == "output-bound" and f["subject"] == "OutputPipeline workers" and f["severity"] == "high"
    assert "for the workers to drain" in f["evidence"] and "batches/s of GPU time" in f["evidence"]
    gpu, out = (float(x) for x in re.findall(r"([\d.]+) batches/s", f["evidence"]))
    assert gpu > 2 * out  # the GPU could go more than twice as fast as the outputs went
    assert "the output side sets the pace" in f["suggestion"] and "workers=N" in f["suggestion"]
    assert "see stage" not in f["suggestion"] and "DataLoader" not in f["suggestion"]  # not input, not the stage
    assert not [g for g in captured["seg_logits_fixed"]["diagnosis"] if g["rule"] == "input-bound"
                and g["subject"] == "output pipeline: drain"]
