"""The verdict is about the program's steady state (analysis/sections/steady.py): past the set-up and the warm-up
steps, or, without step ranges, from where the kernel stream repeats; what came before is the `setup` section, and
`--whole` keeps the old whole-capture window. Real traces only: H200 captures and public exports, some altered with
sqlite3 for one case each."""
import json
import lzma
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.sections import steady
from nsys_transfer.analysis.summary import Options, analyze_sections

DATA = Path(__file__).parent / "data" / "programs"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def summary(path: Path, **kw) -> dict:
    with Trace.open(path) as t:
        return analyze_sections(t, Options(**kw)).summary


def unpacked(tmp_path: Path, name: str) -> Path:
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}_nsys2024.sqlite.xz").read_bytes()))
    return out


def test_warmup_is_the_slow_steps_at_the_start():
    assert steady.warmup_count(np.array([746, 12, 13, 12, 11, 12])) == 1
    assert steady.warmup_count(np.array([50, 40, 12, 13, 12, 11, 12])) == 2
    assert steady.warmup_count(np.array([12, 40, 12, 13])) == 0  # a slow step later is not warm-up
    assert steady.warmup_count(np.array([90, 12])) == 0  # too few steps to tell
    assert steady.warmup_count(np.array([90, 80, 12, 12, 12, 12])) == 2
    assert steady.warmup_count(np.array([90, 90, 90, 12, 12, 12])) == 3  # at most half of them


def test_the_kernel_stream_of_a_loop_without_ranges_repeats():
    """image_loop has no NVTX: its 249 kernels an iteration (ResNet-50, cuDNN) repeat from the first batch on; the
    first iteration is the warm-up outlier (cuDNN's algorithm search), the model load before it set-up."""
    with Trace.open(DATA / "image_loop_nsys2024.sqlite.xz") as t:
        starts, ids = t.device.kernel_sequence(steady.SEQUENCE_LIMIT)
    found = steady.from_kernels(starts, ids)
    assert found.period == 249 and found.source == "kernel stream" and found.warmup == 1
    s = summary(DATA / "image_loop_nsys2024.sqlite.xz")
    assert s["window"]["start_ns"] == found.start_ns == s["setup"]["end_ns"]
    assert s["window"]["source"].startswith("steady state: the repeating kernel stream (249 kernels an iteration)")
    assert s["setup"]["source"] == "kernel stream" and s["setup"]["warmup"]["kernels_per_iteration"] == 249


def test_a_stream_that_does_not_repeat_has_no_steady_state():
    rng = np.random.default_rng(0)
    assert steady.period(rng.integers(0, 500, 4000)) is None
    assert steady.from_kernels(np.arange(10), np.arange(10)) is None


@pytest.mark.skipif(not SHARED.is_dir(), reason="the public exports lie beside the checkout")
def test_a_public_trace_without_ranges():
    """CloverLeaf (no NVTX): 125 kernels an iteration; the steady state is GPU-bound as the whole capture was."""
    s = summary(SHARED / "pipit_cloverleaf_cuda_v2024.5.1.sqlite")
    assert "125 kernels an iteration" in s["window"]["source"]
    assert s["diagnosis"][0]["rule"] == "gpu-bound"


def test_the_setup_never_supplies_the_verdict_when_steps_exist():
    """sleepy_weights: 1.4 s of its 1.8 s capture is set-up (model build, weights copied): over the whole capture the
    set-up's CPU work comes first and the sleep is a fifth of the window; over the steady steps the sleep in
    ensure_layer_weights is 92%, and the figures are the steady steps' own."""
    whole = summary(DATA / "sleepy_weights_nsys2024.sqlite.xz", whole=True)
    s = summary(DATA / "sleepy_weights_nsys2024.sqlite.xz")
    assert whole["setup"] is None and s["setup"]["duration_ns"] > 0.7 * whole["window"]["duration_ns"]
    top, top_whole = s["diagnosis"][0], whole["diagnosis"][0]
    assert top["rule"] == "host-sleep" and top_whole["rule"] == "gpu-idle-cpu-bound"
    sleep_whole = next(f for f in whole["diagnosis"] if f["rule"] == "host-sleep")
    assert top["impact_fraction"] > 0.85 > 0.3 > sleep_whole["impact_fraction"]
    assert s["steps"]["count"] == whole["steps"]["count"] - 1 == 7
    assert s["gpu"]["busy_ns"] <= s["window"]["duration_ns"]


def test_compile_ranges_are_never_steps(tmp_path):
    """XLA's compile ranges (XlaCompileBackend:#module=jit_step_N#) and torch.compile's recur with a counter: they are
    one-off work, not the loop's steps. The sleepy trace's step ranges renamed so."""
    path = unpacked(tmp_path, "sleepy_weights")
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = 'XlaCompileBackend:#module=jit_step_' || rowid || '#' "
                "WHERE text LIKE 'step %'")
    con.commit()
    con.close()
    s = summary(path)
    assert s["steps"]["count"] == 0 and s["steps"]["source"] == "none found"


def test_no_precision_or_layout_advice_the_kernels_already_take():
    """pinned_bf16's top kernels are cuDNN's bf16 NHWC convolutions: autocast and channels_last are taken; the TF32
    stage's are NHWC but not 16-bit: autocast is still a lever, channels_last not."""
    bf16 = next(f for f in summary(DATA / "pinned_bf16_nsys2024.sqlite.xz")["diagnosis"] if f["rule"] == "gpu-bound")
    assert "autocast" not in bf16["suggestion"] and "channels_last" not in bf16["suggestion"]
    assert "already run in reduced precision and NHWC" in bf16["suggestion"]
    tf32 = next(f for f in summary(Path(__file__).parents[1] / "reports" / "data" / "h200" / "pinned-long.sqlite.xz")
                ["diagnosis"] if f["rule"] == "gpu-bound")
    assert "autocast" in tf32["suggestion"] and "channels_last" not in tf32["suggestion"]


def test_whole_on_the_command_line(tmp_path):
    trace = DATA / "lightning_predict_nsys2024.sqlite.xz"
    r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--whole", "--json", str(tmp_path / "w.json"), "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["setup"] is None and doc["steps"]["count"] == 10
    r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--whole", "--steps", "1:")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--whole and --steps" in r.stderr
    r = run_cli("-m", "nsys_transfer.analysis", str(trace))
    assert r.returncode == 0 and "verdict (steady state): input-bound" in r.stdout
    assert "Set-up before the steady state (left out of the verdict)" in r.stdout


def test_one_early_flush_of_the_pipeline_ends_the_warmup():
    """The step starts of seg_cpu_argmax_fixed as captured on the H200 (issue 37: 14 batches, a flush of its
    OutputPipeline after batch 1, the clock's start, as benchmarks do): the steady state starts at the first step
    after that drain, not at step 1 with the 1 s drain of the warm-up's outputs inside; a pipeline drained every few
    steps keeps its rhythm; too few steps after the flush leave it in."""
    ms = 1_000_000
    begins = np.array([0, 760, 930, 2040, 2170, 2300, 2430, 2560, 2690, 2820, 2950, 3080, 3210, 3340]) * ms
    found = steady.Steady(int(begins[1]), "steps", 1, len(begins), 130.0 * ms, [760 * ms])
    moved = steady.past_flush(found, begins, np.array([2030 * ms, 5400 * ms]))  # the warm-up's flush, the close's
    assert (moved.start_ns, moved.warmup, moved.flushed) == (2040 * ms, 3, True)
    assert steady.past_flush(found, begins, np.array([1500, 2500, 3000, 5400]) * ms) == found
    assert steady.past_flush(found, begins, np.array([3200 * ms, 5400 * ms])) == found


def test_a_range_named_warmup_is_set_up_whatever_its_steps(tmp_path):
    """Issue 58, item 2: a program that marks its own warm-up (`with record_function("warmup")`, an NVTX range
    `warmup`) has its set-up end there. The torchvision DataLoader capture altered with sqlite3 for the case: its
    first five `batch N` ranges renamed `warmup` (a benchmark's warm-up batches). The steady state then starts at the
    first step after the last of them (batch 5), not at batch 1 (past batch 0's warm-up outlier), and the set-up
    before it is the `setup` section."""
    path = unpacked(tmp_path, "torchvision_loader")
    con = sqlite3.connect(path)
    batch5 = con.execute("SELECT start FROM NVTX_EVENTS WHERE text = 'batch 5'").fetchone()[0]
    con.execute("UPDATE NVTX_EVENTS SET text = 'warmup' WHERE text IN ('batch 0', 'batch 1', 'batch 2', 'batch 3', "
                "'batch 4')")
    con.commit()
    con.close()
    s = summary(path)
    assert s["window"]["start_ns"] == batch5 and s["setup"]["end_ns"] == batch5
    assert s["steps"]["count"] == 15 and s["setup"]["source"] == "steps"
    plain = summary(DATA / "torchvision_loader_nsys2024.sqlite.xz")
    assert plain["window"]["start_ns"] < batch5  # unaltered: from batch 1, past batch 0's warm-up


def test_without_steps_the_warm_up_range_s_end_is_the_steady_state_s_start():
    """The same rule on its own, on the steps of a real trace (kineto_min.py on an H100, ProfilerStep#2..#9) and on
    none: past a warm-up range ending inside step 3, the steady state starts at step 4; with no steps, at the range's
    end (source `warm-up range`)."""
    import pandas as pd
    with Trace.open(Path(__file__).parent / "data" / "kineto" / "kineto_min_gpu.pt.trace.json.gz") as t:
        nvtx = t.host.nvtx
    steps = nvtx[nvtx["name"].astype(str).str.startswith("ProfilerStep#")].sort_values("start_ns")
    steps = steps[["start_ns", "end_ns"]].reset_index(drop=True)
    capture = (int(steps["start_ns"].iloc[0]), int(steps["end_ns"].iloc[-1]))
    end = int(steps["start_ns"].iloc[2]) + 1000  # inside the third step
    found = steady.choose(steps, lambda: (np.zeros(0, np.int64), np.zeros(0, np.int64)), capture, None, end)
    assert found.start_ns == int(steps["start_ns"].iloc[3]) and found.source == "steps" and found.warmup == 3
    bare = steady.choose(pd.DataFrame({"start_ns": [], "end_ns": []}),
                         lambda: (np.zeros(0, np.int64), np.zeros(0, np.int64)), capture, None, end)
    assert bare.start_ns == end and bare.source == "warm-up range"
