"""torch.profiler traces in torch.profiler's own terms (issue 58, items 3, 4, 7), on traces nobody here recorded: the
programs of tests/programs/strangers58 (written by a helper who had not read the project's rules, with the answer
key KEY.md written before any analysis), run on the CPU with their own profiler set-up; their traces scrubbed
(tools/scrub_kineto.py) into tests/data/kineto/strangers58. Public Kineto traces of the older formats and GPU traces of
these programs are read in docs/diagnosis-evidence.md.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "kineto" / "strangers58"
PROGRAMS = ROOT / "tests" / "programs" / "strangers58"
NSYS_WORDS = re.compile(r"NVTX|nvtx|--trace|nsys |--capture-range|--delay|make profile")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    return {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path_factory.mktemp("cache")), "PYTHONPATH": str(ROOT)}


def _analyse(trace: Path, env: dict, tmp: Path, *extra: str) -> tuple[str, dict]:
    out = tmp / f"{trace.name}.json"
    proc = run_cli("-m", "nsys_transfer.analysis", str(trace), "--json", str(out), "--all", *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(out.read_text())


def test_a_trace_without_ranges_gets_record_function_advice_not_nvtx(env, tmp_path):
    """tiny_mlp_serving.py profiles everything in one `with profile(...)`, no record_function, no prof.step(): the
    note on the missing ranges speaks record_function and prof.step(), never NVTX or nsys's --trace."""
    text, s = _analyse(DATA / "tiny_mlp_serving_cpu.json.gz", env, tmp_path)
    note = next(f for f in s["diagnosis"] if f["rule"] == "nvtx-missing")
    assert "record_function" in note["suggestion"] and "prof.step()" in note["suggestion"], note
    assert "record_function ranges" in note["evidence"]
    assert not NSYS_WORDS.search(note["suggestion"] + note["evidence"]), note


def test_warm_up_advice_is_the_schedule_s(env, tmp_path):
    """rank_text_preproc.py's rank 1 (schedule(wait=2, warmup=1, active=4)): its first recorded step is twice the
    others (the CPU box was shared); the warm-up note tells the schedule how to skip it, not nsys --delay."""
    _, s = _analyse(DATA / "rank_text_preproc_cpu.rank1.json.gz", env, tmp_path)
    note = next(f for f in s["diagnosis"] if f["rule"] == "warmup-in-capture")
    assert "torch.profiler.schedule(wait=1, warmup=1" in note["suggestion"], note
    assert not NSYS_WORDS.search(note["suggestion"]), note


def test_a_missing_file_names_torch_profiler_files_too(env, tmp_path):
    proc = run_cli("-m", "nsys_transfer.analysis", str(tmp_path / "traces" / "host_1.1.pt.trace.json"), env=env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no such file" in proc.stderr and "torch.profiler trace" in proc.stderr
    assert "tensorboard_trace_handler" in proc.stderr


def test_an_empty_folder_says_what_a_trace_is(env, tmp_path):
    proc = run_cli("-m", "nsys_transfer.analysis", str(tmp_path), env=env)
    assert proc.returncode == 2 and "is a directory with no trace in it" in proc.stderr
    assert "torch.profiler" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cpu_only_ranks_are_told_to_record_cuda_in_torch_profiler_s_terms(env):
    """Two processes' traces (rank_text_preproc.py run as rank 0 and rank 1, on the CPU): ranks, not one run's
    cycles; with no GPU work in either, one line says how torch.profiler records the GPU."""
    proc = run_cli("-m", "nsys_transfer.analysis", str(DATA / "rank_text_preproc_cpu.rank0.json.gz"),
                   str(DATA / "rank_text_preproc_cpu.rank1.json.gz"), env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "ProfilerActivity.CUDA" in proc.stderr and "--trace=cuda" not in proc.stderr


def _def_lines(program: Path) -> set[int]:
    return {i for i, line in enumerate(program.read_text().splitlines(), 1) if line.lstrip().startswith("def ")}


def test_a_function_s_first_line_is_never_the_line(env):
    """Kineto names each Python call `file(N): function`, N its `def` line; the innermost call's own line is never
    recorded. Every innermost frame is read with an unknown line (0: the place names its function), and no line the
    analysis names is a `def` of the program (transformer_sync_timing.py, with_stack=True, torch 2.14)."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.load import kineto_stacks
    os.environ["NSYS_TRANSFER_CACHE"] = env["NSYS_TRANSFER_CACHE"]
    trace = DATA / "transformer_sync_timing_cpu.pt.trace.json.gz"
    with Trace.open(trace) as t:
        stacks = kineto_stacks.read(t)
    innermost = {stack[-1] for stack in stacks.stacks}
    assert innermost and all(stacks.frames[f].line == 0 for f in innermost)
    defs = _def_lines(PROGRAMS / "transformer_sync_timing.py")
    named = [f for f in stacks.frames if f.file == "transformer_sync_timing.py" and f.line]
    assert named and not {f.line for f in named} & defs, sorted({f.line for f in named} & defs)


def test_prof_step_is_the_profiler_s_work(env):
    """prof.step() (torch/profiler/profiler.py: step) is the profiler's, whatever line of the program called it: its
    role is the profiler, never host compute, and no finding names it as the program's line."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.load import kineto_stacks
    from nsys_transfer.analysis.sections import roles
    os.environ["NSYS_TRANSFER_CACHE"] = env["NSYS_TRANSFER_CACHE"]
    with Trace.open(DATA / "transformer_sync_timing_cpu.pt.trace.json.gz") as t:
        stacks = kineto_stacks.read(t)
    at_step = [s for s in stacks.stacks if any(stacks.frames[f].file.endswith("torch/profiler/profiler.py")
                                               for f in s)]
    assert at_step, "the trace holds prof.step()'s calls"
    for s in at_step:
        frames = [stacks.frames[f] for f in s]
        leaf = next((f for f in reversed(frames) if f.in_program), None)
        assert roles.role_of(frames, leaf) == roles.PROFILER
    assert any(stacks.frames[f].code == "calls step()" and stacks.frames[f].line == 95 for s in at_step for f in s)


def _one_kernel() -> dict:
    """The H100 trace of kineto_min.py cut to its first kernel, its copies dropped (a real trace altered)."""
    import gzip
    src = ROOT / "tests" / "data" / "kineto" / "kineto_min_gpu.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    first = min((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
                          ] + [first]
    return doc


def test_a_handful_of_kernels_is_too_little_to_judge_and_gets_no_compute_advice(env, tmp_path):
    """One kernel fills its own window, which read "gpu-bound, 100%" with precision advice: now the verdict says there
    is too little GPU work, how to record more in torch.profiler's terms, and no other finding speaks."""
    doc = _one_kernel()
    path = tmp_path / "one_kernel.json"
    path.write_text(json.dumps(doc))
    text, s = _analyse(path, env, tmp_path)
    rules = [f["rule"] for f in s["diagnosis"] if f["severity"] != "info"]
    assert rules == ["too-little-to-judge"], s["diagnosis"]
    f = s["diagnosis"][0]
    assert f["subject"] == "GPU work" and "schedule(wait=1, warmup=1, active=5, repeat=1)" in f["suggestion"]
    assert "verdict: too little to judge (too little GPU work" in text and "gpu-bound" not in text
