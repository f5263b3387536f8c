"""The verdict a person reading each trace reaches, written down before the analysis was changed (issue 35): six
programs written for the four patterns the verdict used to get wrong, captured on the H200 with `nsys-transfer run`'s
default (CPU samples of the process tree, nsys 2024.2; tests/programs/, `bash benchmarks/gpu.sh programs`).

EXPECT: trace -> (first costed finding's rule, a word its subject holds, words its suggestion holds, words it must
not hold), and why a person says so from the trace's own evidence:

- seg_fast: fp16 channels_last DeepLabV3 with cudnn.benchmark. Steps 1-15 run 97% kernels with no idle gap of 1 ms;
  step 0 takes 3.6 s of cuDNN autotuning (1,017 kernels, 74% of the samples in libnvrtc), the model build before it
  4 s. GPU-bound; its top kernels are already FP16 and NHWC, so no autocast or channels_last advice.
- seg_cpu_argmax: `.cpu()` of 352 MB of logits, then `argmax(1)` on the CPU. 73% of the steady state is GPU idle
  while the launching thread is in THPVariable_argmax -> argmax_kernel_impl; the only syncs are the copy's own.
  The CPU argmax holds the GPU (not `.item()`): move it to the GPU before the copy.
- tokenize_embed: BERT embeddings of long sentences tokenized on the main thread (no NVTX). 81% idle, 86% of the
  launching thread's samples in the tokenizers crate (normalizer, WordPiece): tokenize in DataLoader workers.
- resnet_no_nvtx: ResNet-50, no NVTX, cudnn.benchmark. The kernel stream repeats every 247 kernels; after batch 0's
  autotuning (4 s, 82% in libnvrtc) the loop runs 85% kernels: GPU-bound, the set-up is autotuning.
- compiled_server: torch.compile(mode="reduce-overhead") serving small requests. 18 s of compilation are set-up;
  in the steady state graph replays carry 97% of the GPU work and each request is 0.28 ms of host turnaround (syncs,
  pageable input) around a 44 us replay: the host's turnaround, never "use CUDA graphs". Each turnaround follows the
  request's `.cpu()` of its 512-byte scores (a copy and a cudaStreamSynchronize), so it reads as host-sync since the
  scalar reads' syncs count as syncs (issue 58: a 512-byte copy is no data copy), its advice the replays' own.
- cupy_numpy_post: CuPy computes, cp.asnumpy, numpy sorts and counts on the main thread: 93% idle, 91% of the
  samples in numpy's _multiarray_umath; the only sync is the copy's.
"""
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.summary import analyze_sections

DATA = Path(__file__).parent / "data" / "programs"

EXPECT = {
    "seg_fast": ("gpu-bound", "", ["torch.compile", "already run in reduced precision and NHWC"],
                 ["autocast", "channels_last for"]),
    "seg_cpu_argmax": ("gpu-idle-cpu-bound", "torch.argmax", ["on the GPU before the copy", "OutputPipeline"],
                       [".item()"]),
    "tokenize_embed": ("gpu-idle-cpu-bound", "tokenizing", ["DataLoader worker"], [".item()"]),
    "resnet_no_nvtx": ("gpu-bound", "", ["torch.compile"], []),
    "compiled_server": ("host-sync", "cudaStreamSynchronize", ["already runs as CUDA graphs", "pinned"],
                        ["capture the step in a CUDA graph"]),
    "cupy_numpy_post": ("gpu-idle-cpu-bound", "numpy", ["on the GPU before the copy"], [".item()"]),
}
SETUP = {  # what the set-up section must say it was (its CPU samples' first owner, or a cause)
    "seg_fast": "compiling kernels", "resnet_no_nvtx": "compiling kernels", "compiled_server": "Python code",
    "seg_cpu_argmax": "PyTorch CPU ops",
}


@pytest.fixture(scope="module")
def verdicts(summary_of):
    return {name: summary_of(DATA / f"{name}_nsys2024.sqlite.xz") for name in EXPECT}


def first(s: dict) -> dict:
    return next(f for f in s["diagnosis"] if f["severity"] != "info")


@pytest.mark.parametrize("name", list(EXPECT))
def test_the_verdict_is_the_one_a_person_reaches(verdicts, name):
    rule, subject, says, never = EXPECT[name]
    f = first(verdicts[name])
    assert f["rule"] == rule and subject in (f["subject"] or ""), (name, f["rule"], f["subject"])
    assert f["severity"] == "high", name
    for word in says:
        assert word in f["suggestion"], (name, word, f["suggestion"])
    for word in never:
        assert word not in f["suggestion"], (name, word, f["suggestion"])
    if rule != "host-sync":  # no other program's syncs cost much: their sync is the copy's (cupy_numpy_post)
        assert not [g for g in verdicts[name]["diagnosis"] if g["rule"] == "host-sync" and g["severity"] == "high"]


@pytest.mark.parametrize("name", list(EXPECT))
def test_the_verdict_is_about_the_steady_state(verdicts, name):
    s = verdicts[name]
    su = s["setup"]
    assert s["window"]["source"].startswith("steady state") and su["end_ns"] == s["window"]["start_ns"], name
    assert su["duration_ns"] > 0.2 * s["window"]["duration_ns"], name  # short captures of fast programs: set-up heavy
    if name in SETUP:
        assert next(iter(su["cpu_samples"]["kinds"])) == SETUP[name], (name, su["cpu_samples"]["kinds"])


def test_cpu_work_is_named_from_the_samples(verdicts):
    """The samples' owner is the library the work is in, a torch op by its Python entry, a Rust symbol demangled."""
    arg = first(verdicts["seg_cpu_argmax"])
    assert "CPU samples of the launching thread in those gaps" in arg["evidence"]
    assert "PyTorch CPU ops 100%" in arg["evidence"] and "torch.argmax (libtorch_python.so)" in arg["evidence"]
    tok = first(verdicts["tokenize_embed"])
    assert "tokenizers.abi3.so" in tok["evidence"] and "_RNv" not in tok["evidence"] + tok["subject"]
    assert "right after a synchronising call returned" in arg["evidence"]  # the copy's sync serialises it


def test_without_samples_the_cpu_work_is_still_the_finding_not_the_sync():
    """The same argmax program captured with --sample none: the idle after the copy's sync is CPU work outside any
    range, with the advice to sample it; never host-sync."""
    with Trace.open(DATA / "seg_cpu_argmax_nosample_nsys2024.sqlite.xz") as t:
        s = analyze_sections(t).summary
    f = first(s)
    assert f["rule"] == "gpu-idle-cpu-bound" and f["subject"] is None and "--sample=process-tree" in f["suggestion"]
    assert f["impact_fraction"] > 0.5


def test_backtrace_twins_are_counted_once():
    """With CUDA backtraces nsys 2024.2 records some calls twice under one correlation id: the counts are per call,
    as in the same program captured without them."""
    counts = {}
    for name in ("seg_cpu_argmax", "seg_cpu_argmax_nosample"):
        with Trace.open(DATA / f"{name}_nsys2024.sqlite.xz") as t:
            counts[name] = t.calls.launch_stats(set(t.calls.api_by_thread["global_tid"]))[0]
            assert not t.calls.sync_calls.duplicated(["global_tid", "correlation_id"]).any()
    assert counts["seg_cpu_argmax"] == counts["seg_cpu_argmax_nosample"] == 2691


def test_a_compile_workers_unflushed_events_leave_the_capture_complete():
    """torch.compile's workers end at exit before nsys flushes them ("Not all NVTX events might have been collected"
    of one): that process holds no GPU work, CUDA call or NVTX range, so the GPU figures are whole."""
    with Trace.open(DATA / "compiled_server_nsys2024.sqlite.xz") as t:
        s = analyze_sections(t).summary
    integ = s["trace"]["integrity"]
    assert integ["verdict"] == "complete"
    helper = [d for d in integ["figures"]["diagnostics"]["doubts"] if d["kind"] == "not-all"]
    assert helper and all("holds no GPU work" in d["explained"] for d in helper)
