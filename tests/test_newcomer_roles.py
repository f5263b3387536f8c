"""A newcomer's CPU programs and their fixes (issue 57's second round, items 4, 7, 8): the role of a line follows where
its samples' time went, and the advice fits the machine the trace was recorded on. Real traces only: the newcomer's
own captures on a 2-core machine without a GPU (tests/data/newcomer: seg_numpy.py runs `logits = model(x).numpy()`
then NumPy post-processing on the main thread; seg_numpy_fixed.py hands each output to
OutputPipeline(process, workers=4); detect_post_fixed.py converts the kept detections once a step), and a GPU capture
of a stranger's program (tests/data/strangers/feature_export). Their analyses are the stored answers
(tests/test_same_answers.py keeps them those of today's code). The role tests on code strings below are of
roles.role_of alone: code strings, not traces."""
import re
from pathlib import Path

import golden_answers as answers
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load.python_stacks import Frame
from nsys_transfer.analysis.rules import code_advice
from nsys_transfer.analysis.sections import machine, roles
from nsys_transfer.analysis.sections.code_lines import CodeSite

ROOT = Path(__file__).resolve().parents[1]
NEWCOMER = "tests/data/newcomer/"


@pytest.fixture(scope="module")
def stored():
    return answers.load()


def _line(summary, number):
    return next(s for s in summary["code"]["cpu"] if s["line"] == number)


def _finding(summary, subject):
    return next(f for f in summary["diagnosis"] if f["rule"] == "cpu-hotspot" and f["subject"] == subject)


def test_a_model_call_converted_to_numpy_on_the_line_is_the_model_not_the_output(stored):
    """seg_numpy.py:37 `logits = model(x).numpy()` on the CPU: `.numpy()` of a CPU tensor is free and the samples are
    inside Conv2d's forward, so the line is the model's, advised as the model (no OutputPipeline: followed on 2 cores
    it made the program 2x slower, the newcomer's item 6)."""
    s = stored[NEWCOMER + "seg_numpy_nsys2024.sqlite.xz"]
    site = _line(s, 37)
    assert site["code"] == "logits = model(x).numpy()"
    assert site["role"] == "model" and any("_conv_forward" in step for step in site["path"])
    advice = _finding(s, "seg_numpy.py:37")["suggestion"]
    assert "runs the model" in advice and "OutputPipeline" not in advice


def _said_workers(finding) -> list[int]:
    """The worker counts a finding's advice names, the program's own code it quotes aside (`workers=4` of the line)."""
    text = finding["suggestion"] or ""
    if finding.get("line"):
        text = text.replace(finding["line"]["code"].strip(), "")
    return [int(n) for n in re.findall(r"\b(?:num_)?workers=(\d+)", text)]


def test_no_more_workers_are_advised_than_the_capture_machine_has_cores(stored):
    """Every newcomer capture was recorded on a 2-core machine (nsys's TARGET_INFO_SYSTEM_ENV CpuCores): no advice
    names more DataLoader or OutputPipeline workers than that (torch warns of more than the cores for a
    DataLoader), and the cores are named where the advice says to add workers."""
    counted = 0
    for key, s in stored.items():
        if not key.startswith(NEWCOMER) or ".sqlite" not in key:
            continue
        with Trace.open(ROOT / key) as t:
            cores = machine.cpu_cores(t)
        assert cores == 2, key
        for f in s["diagnosis"]:
            said = _said_workers(f)
            assert all(n <= cores for n in said), (key, f["suggestion"])
            counted += len(said)
            if "more workers" in (f["suggestion"] or ""):
                assert "the 2 cores of the machine the trace was recorded on" in f["suggestion"], f["suggestion"]
    assert counted >= 3  # cpu_roll's input lines and detect_post_fixed's output line name a count


def test_the_worker_count_is_capped_at_the_cores_only_where_the_trace_says_them():
    assert code_advice.worker_count(8, 2) == 2 and code_advice.worker_count(4, 64) == 4
    assert code_advice.worker_count(8, None) == 8 and code_advice.worker_count(4, 1) == 1
    site = CodeSite("/p/main.py", 12, "main", "x = load(i)", (), roles.INPUT, 10, 0.5)
    assert "num_workers=2," in code_advice._advice(site, cores=2)  # a GPU capture's advice too
    assert "num_workers=8," in code_advice._advice(site)
    assert "num_workers=2," in code_advice.cpu_advice(site, 2) and "num_workers=4," in code_advice.cpu_advice(site)


def test_waiting_inside_the_output_pipeline_is_the_output_workers_pace_not_host_compute(stored):
    """seg_numpy_fixed.py:24 `with ..., OutputPipeline(process, workers=4) as outputs:` holds the loop while the
    pipeline drains (OutputPipeline.__exit__ -> selectors' select): the workers' pace, advised as such (more workers,
    cheaper work each), with no more workers than the 2 cores the capture machine had (TARGET_INFO_SYSTEM_ENV
    CpuCores), and not the advice for the program's own array work."""
    s = stored[NEWCOMER + "seg_numpy_fixed_nsys2024.sqlite.xz"]
    site = _line(s, 24)
    assert site["role"] == "waiting for the output workers"
    assert any("OutputPipeline.__exit__" in step for step in site["path"])
    advice = _finding(s, "seg_numpy_fixed.py:24")["suggestion"]
    assert "waits inside the OutputPipeline for its output workers" in advice and "2 cores" in advice
    assert "give it more workers" in advice and "cheaper" in advice
    assert "program's own computation" not in advice and "do it on whole arrays" not in advice
    assert _line(s, 27)["role"] == "model"  # `outputs.submit(s, model(x))`: the samples are in the model's forward


def test_one_batched_conversion_a_step_is_the_output_not_a_per_element_read(stored):
    """detect_post_fixed.py:19 `keep = dets[dets[:, 4] > 0.0].tolist()` converts the kept rows once a step (the fix of
    a loop of `.item()` calls): its role is the output's, with no advice to do what it already does."""
    s = stored[NEWCOMER + "detect_post_fixed_nsys2024.sqlite.xz"]
    site = _line(s, 19)
    assert site["code"] == "keep = dets[dets[:, 4] > 0.0].tolist()"
    assert site["role"] == "output" and site["role"] != "per-element read"
    advice = _finding(s, "detect_post_fixed.py:19")["suggestion"]
    assert "one element at a time" not in advice and "workers=2" in advice  # 2 cores: no more workers than that


def test_a_line_whose_time_is_inside_the_models_forward_is_the_model(stored):
    """feature_export.py:74 `f = model(x).cpu().numpy()` on a GPU: its samples in the short gaps are inside the
    modules' forward (Conv2d._conv_forward), so that time is the model's, not the output copy's."""
    s = stored["tests/data/strangers/feature_export_nsys2024.sqlite.xz"]
    site = next(x for x in s["code"]["idle"]["launch"] if x["line"] == 74)
    assert site["role"] == "model" and any("_conv_forward" in step for step in site["path"])


PROGRAM, TORCH = "/home/u/prog.py", "/venv/lib/python3.11/site-packages/torch/"


def _role(code: str, function: str = "main", below: tuple[tuple[str, str], ...] = ()) -> str:
    """role_of for a stack whose innermost line of the program is `code` (in `function`), calling into `below`
    ((file, function) library frames, outermost first)."""
    leaf = Frame(PROGRAM, 19, function, code)
    stack = [Frame(PROGRAM, 30, "<module>", "main()"), leaf] + [Frame(f, 1, fn, "") for f, fn in below]
    return role_of(stack, leaf)


role_of = roles.role_of


@pytest.mark.parametrize("code, function, role", [
    ("keep = dets[dets[:, 4] > 0.0].tolist()", "main", roles.OUTPUT),   # the kept rows at once: the output
    ("rows = out.cpu().tolist()", "main", roles.OUTPUT),
    ("boxes = preds[keep_mask].tolist()", "main", roles.OUTPUT),
    ("row = dets[i].tolist()", "main", roles.PER_ELEMENT),              # a row at a time, by a loop's counter
    ("x = out[i, :].tolist()", "main", roles.PER_ELEMENT),
    ("rows = [d.tolist() for d in dets]", "main", roles.PER_ELEMENT),   # a comprehension inlined (Python 3.12)
    ("rows = [d.tolist() for d in dets]", "<listcomp>", roles.PER_ELEMENT),
    ("d.tolist()", "<genexpr>", roles.PER_ELEMENT),                     # the comprehension's own frame says it
    ("score = dets[i, 4].item()", "main", roles.PER_ELEMENT),
])
def test_tolist_is_a_per_element_read_only_one_element_or_row_at_a_time(code, function, role):
    assert _role(code, function) == role


def test_a_line_is_the_models_where_its_callees_are_the_models_forward():
    forward = ((TORCH + "nn/modules/module.py", "Module._wrapped_call_impl"), (TORCH + "nn/modules/conv.py",
                                                                              "Conv2d._conv_forward"))
    assert _role("logits = model(x).numpy()", below=forward) == roles.MODEL
    assert _role("logits = model(x).numpy()") == roles.OUTPUT  # a sample in the conversion itself: the output's


def test_only_a_wait_inside_the_output_pipeline_is_waiting_for_its_workers():
    pipeline = "/venv/lib/python3.11/site-packages/nsys_transfer/fixes/pipeline.py"
    drain = ((pipeline, "OutputPipeline.__exit__"), ("/usr/lib/python3.11/selectors.py", "_PollLikeSelector.select"))
    assert _role("with OutputPipeline(process, workers=2) as outputs:", below=drain) == roles.OUTPUT_WAIT
    busy = ((pipeline, "OutputPipeline.submit"), (pipeline, "OutputPipeline._pack"))  # its own work, no wait
    assert _role("outputs.submit(s, y)", below=busy) != roles.OUTPUT_WAIT
    elsewhere = (("/usr/lib/python3.11/selectors.py", "_PollLikeSelector.select"),)  # a wait, not the pipeline's
    assert _role("events = sel.select()", below=elsewhere) != roles.OUTPUT_WAIT
