"""Every Kineto format torch.profiler has written (issue 58, item 1), on real traces: a GPU trace recorded on an H100
(tests/data/kineto/kineto_min_gpu.pt.trace.json.gz, PyTorch 2.11) read as written, and the same events written the
way older PyTorch wrote them. libkineto's output_json.cpp is the reference for each older format:

  2020 (first commits to November 2020): a bare JSON array of events, no schemaVersion; categories Kernel, Runtime,
        Memcpy, Memset, Operator (ops and record_function ranges alike); flows `async`
  2021 (PyTorch 1.8-1.10): {"schemaVersion": 1, "traceEvents": [...]}, the same categories, flows `async_gpu`
  today (PyTorch 1.11 on): kernel, cuda_runtime, gpu_memcpy, gpu_memset, cpu_op, user_annotation, python_function

Python functions came with the current categories (November 2021): the older forms have none, so the figures compared
are the GPU's, the copies', the steps' and the verdict, not the line. Public traces of both older forms (Kineto's own
TensorBoard plugin samples, 2021) are read in docs/diagnosis-evidence.md.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

GPU_TRACE = ROOT / "tests" / "data" / "kineto" / "kineto_min_gpu.pt.trace.json.gz"
OLDER = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cuda_driver": "Runtime", "gpu_memcpy": "Memcpy",
         "gpu_memset": "Memset", "cpu_op": "Operator", "user_annotation": "Operator"}


def _older(doc: dict, form: str) -> dict | list:
    """The trace's events as the older Kineto wrote them (module doc): categories renamed, ProfilerStep#N and the
    record_function ranges as Operator events, no Python functions. The trace was recorded without record_shapes, so
    no event says its input shapes, as no older one did without it."""
    events = []
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        if cat == "python_function" or cat == "gpu_user_annotation":
            continue
        e = dict(e)
        if cat in OLDER:
            e["cat"] = OLDER[cat]
        elif cat == "ac2g":
            e["cat"] = "async" if form == "2020" else "async_gpu"
        events.append(e)
    if form == "2020":
        return events
    return {"schemaVersion": 1, "deviceProperties": doc.get("deviceProperties", []), "traceEvents": events}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> dict:
    return {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path_factory.mktemp("cache")), "PYTHONPATH": str(ROOT)}


def _summary(path: Path, env: dict, tmp: Path) -> tuple[dict, str]:
    out = tmp / f"{path.name}.json"
    proc = run_cli("-m", "nsys_transfer.analysis", str(path), "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def _figures(s: dict) -> dict:
    """What the older formats hold as well as today's: the GPU's work, the copies, the steps and the verdict."""
    verdict = next((f["rule"] for f in s["diagnosis"] if f["severity"] != "info"), None)
    return {"kernels": (s["kernels"]["count"], s["kernels"]["total_ns"]), "busy": s["gpu"]["utilization"],
            "dtoh": {k: s["memcpy"]["dtoh"][k] for k in ("count", "bytes", "total_ns", "kinds", "sync")},
            "steps": s["steps"]["count"], "window": s["window"]["duration_ns"], "verdict": verdict,
            "ranges": sorted(r["name"] for r in s["nvtx"]["ranges"]) if isinstance(s["nvtx"], dict) else None}


@pytest.mark.parametrize("form", ["2021", "2020"])
def test_an_older_format_reads_as_today_s(cache, tmp_path, form):
    """The same events in an older format give the same figures and verdict; the header names the format."""
    doc = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    older = tmp_path / f"older_{form}.json"
    older.write_text(json.dumps(_older(doc, form)))
    now, _ = _summary(GPU_TRACE, cache, tmp_path)
    then, text = _summary(older, cache, tmp_path)
    # a record_function range named like an op (`compute`) is told from one only by its empty input shapes, which
    # only a recording with record_shapes=True writes: without them it reads as an op, the one range lost
    assert _figures(then) == {**_figures(now), "ranges": [r for r in _figures(now)["ranges"] if r != "compute"]}
    assert then["kernels"]["count"] > 0 and then["steps"]["count"] == 8
    header = text.splitlines()[0]
    assert "PyTorch 1.8-1.10 categories" in header
    assert ("no schemaVersion" in header) == (form == "2020")


@pytest.mark.parametrize("gzipped", [False, True])
def test_export_chrome_trace_and_tensorboard_names_gzipped_or_not(cache, tmp_path, gzipped):
    """The content decides: the same trace as export_chrome_trace's `.json` and as tensorboard_trace_handler's
    `.pt.trace.json` (its default) or `.pt.trace.json.gz` (use_gzip=True) gives one answer."""
    raw = gzip.decompress(GPU_TRACE.read_bytes())
    plain = tmp_path / "trace.json"
    plain.write_bytes(raw)
    handler = tmp_path / ("host_1.123.pt.trace.json.gz" if gzipped else "host_1.123.pt.trace.json")
    handler.write_bytes(gzip.compress(raw) if gzipped else raw)
    a, _ = _summary(plain, cache, tmp_path)
    b, _ = _summary(handler, cache, tmp_path)
    assert _figures(a) == _figures(b)


def test_a_chrome_trace_of_no_torch_profiler_events_says_what_it_holds(cache, tmp_path):
    """A Chrome trace whose events are of categories torch.profiler never writes: one line naming what was found (its
    categories and counts) and what is missing, exit 2. The file is the real trace with its categories renamed."""
    doc = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    for e in doc["traceEvents"]:
        if "cat" in e:
            e["cat"] = f"v8.{e['cat']}"
    bad = tmp_path / "chrome_tracing.json"
    bad.write_text(json.dumps(doc))
    proc = run_cli("-m", "nsys_transfer.analysis", str(bad), env=cache)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "v8.python_function" in lines[0] and "none of those torch.profiler writes" in lines[0]
    assert "ProfilerActivity.CUDA" in lines[0]
