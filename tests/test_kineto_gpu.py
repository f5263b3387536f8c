"""torch.profiler traces recorded on a GPU by programs written by someone who had not read the rules
(tests/programs/strangers58, KEY.md written before any trace): `bash benchmarks/strangers58_gpu.sh` on an H100, scrubbed
by tools/scrub_kineto.py into tests/data/kineto/strangers58_gpu. Each verdict read against the trace's own rows and the
key in docs/diagnosis-evidence.md; here, that the analysis keeps saying it."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "kineto" / "strangers58_gpu"
TRACES = {"seg_postproc": "seg_postproc_h100.pt.trace.json.gz", "gemm_bound": "gemm_bound_h100.pt.trace.json.gz",
          "transformer_sync_timing": "transformer_sync_timing_h100.pt.trace.json.gz",
          "warmup_range": "warmup_range_h100.pt.trace.json.gz",
          "legacy_event_sync": "legacy_event_sync_h100.pt.trace.json.gz", "kineto_cycles": "kineto_cycles"}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict:
    """(stdout, JSON) of analyze-trace on each recording, once."""
    out = {}
    for name, trace in TRACES.items():
        path = tmp_path_factory.mktemp(name) / "s.json"
        r = run_cli("-m", "nsys_transfer.analysis", str(DATA / trace), "--json", str(path))
        assert r.returncode == 0, (name, r.stderr[-2000:])
        out[name] = (r.stdout, json.loads(path.read_text()))
    return out


def _first(doc: dict) -> dict:
    return doc["diagnosis"][0]


def test_numpy_post_processing_on_the_loop_is_the_verdict_with_what_moving_it_buys(analysed):
    """KEY: host/CPU-bound in post-processing (numpy softmax/argmax of the copied logits)."""
    _, doc = analysed["seg_postproc"]
    f = _first(doc)
    assert f["rule"] == "gpu-idle-cpu-bound" and "postprocess" in f["subject"]
    assert f["prediction"]["steady_x"][0] > 1.5


def test_a_gemm_stack_is_gpu_bound_with_no_host_advice(analysed):
    """KEY: GPU-bound (bf16 GEMMs), no host-side problem."""
    text, doc = analysed["gemm_bound"]
    assert _first(doc)["rule"] == "gpu-bound"
    assert not any(f["severity"] in ("high", "medium") and f["rule"] != "gpu-bound" for f in doc["diagnosis"])


def test_the_warm_up_range_ends_the_set_up_and_the_steady_state_is_gpu_bound(analysed):
    text, doc = analysed["warmup_range"]
    assert _first(doc)["rule"] == "gpu-bound" and "verdict (steady state)" in text
    assert doc["setup"]["duration_ns"] > 0.3e9


def test_a_few_profiled_steps_set_no_workers_start_against_themselves(analysed):
    """The trace holds 3 of the run's steps (50 ms): moving main()'s host work to workers had read '0.0-0.3x over the
    whole loop' (8 workers' start against 50 ms) and a kernels-alone figure of 0.43."""
    text, doc = analysed["transformer_sync_timing"]
    assert "0.0-" not in text
    for f in doc["diagnosis"]:
        p = f.get("prediction") or {}
        for q in [p, *(p.get("parts") or [])]:
            assert not q.get("whole_x") or q["whole_x"][0] >= 0.9, (f["rule"], q)
            assert q.get("ceiling_x") is None or q["ceiling_x"] >= 1, (f["rule"], q)


def test_the_legacy_profiler_api_records_no_gpu_work_and_says_so(analysed):
    """use_kineto=False: the CUDA calls are there, the GPU's operations are not."""
    text, doc = analysed["legacy_event_sync"]
    assert "No GPU work in this trace" in text and doc["kernels"]["count"] == 0


def test_a_schedules_three_cycles_on_the_gpu_read_as_one_run(analysed):
    text, doc = analysed["kineto_cycles"]
    assert "3 torch.profiler traces of one run" in text and "3 of them agree" in text
    assert _first(doc)["rule"] == "gpu-idle-cpu-bound"
