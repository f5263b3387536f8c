"""Advice that was tried (issue 49): every analyze-trace option line a finding advises runs on the trace it was advised
for, on the bundled traces and the public exports beside the checkout."""
import json
import re

import pytest

import golden_answers
from conftest import ROOT, SHARED_TRACES, run_cli
from nsys_transfer.analysis.cli.analyze import main as analyze_trace

BUNDLED = sorted(p for d in ("reports/data", "tests/data") for p in (ROOT / d).rglob("*.sqlite.xz")
                 if "linkprobe" not in p.name)
PUBLIC = sorted(SHARED_TRACES.glob("*.sqlite")) if SHARED_TRACES.is_dir() else []
OPTIONS = {o for p in analyze_trace.params for o in p.opts if o.startswith("--")}
ADVISED = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)(?:[ =]([^\s,;)`']+))?")  # an option and the value after it


def advised_options(doc: dict) -> list[list[str]]:
    """The analyze-trace option lines the findings advise ('--steps 1:' -> ['--steps', '1:'])."""
    lines = []
    for f in doc["diagnosis"]:
        for option, value in ADVISED.findall(f["suggestion"] or ""):
            if option not in OPTIONS:
                continue  # nsys's and other tools' options (--capture-range=...) are not analyze-trace's
            takes = next(p for p in analyze_trace.params if option in p.opts).is_flag is False
            lines.append([option, value] if takes and value else [option])
    return lines


def test_a_cpu_only_trace_is_advised_nothing_of_a_gpu():
    """The CPU-only warm-up capture: no GPU idle time cited, no GPU window option, no CUDA profiler API."""
    r = run_cli("-m", "nsys_transfer.analysis", str(ROOT / "tests/data/programs/cpu_warmup_nsys2024.sqlite.xz"),
                "--all", check=True)
    said = r.stdout.split("warmup-in-capture", 1)[1]
    assert "idle time" not in said and "--steps" not in said and "torch.cuda.profiler" not in said


@pytest.mark.parametrize("trace", BUNDLED + PUBLIC, ids=lambda p: p.name)
def test_every_advised_option_runs(trace):
    """Each trace's findings are its stored answer (tests/test_same_answers.py holds them to analyze-trace's JSON of
    today): only the advised command lines run here, each as a user would type it."""
    key = f"shared/traces/{trace.name}" if trace.parent == SHARED_TRACES else str(trace.relative_to(ROOT))
    doc = json.loads((golden_answers.STORE / golden_answers.file_name(key)).read_text())
    for line in advised_options(doc):
        if line[0] in ("--json", "--csv", "--plots", "--probe", "--workload", "--run", "--dask"):
            continue  # a file or a cluster of the user's
        tried = run_cli("-m", "nsys_transfer.analysis", str(trace), *line, "-q", timeout=600)
        assert tried.returncode == 0, (line, tried.stderr[-1000:])
