"""A newcomer without a GPU (issue 57, items 1, 2, 6, 7): their own CPU programs traced on the 2-core machine
(tests/programs/cpu_roll.py and its fix cpu_roll_fixed.py, tests/data/newcomer/RESULTS.txt): the set-up counted apart
from the loop, each costly line with its role's advice, the way from the loop through the DataLoader to the line in
`__getitem__`, and `verify` comparing the two loops as the programs' own clocks do, on nsys captures and on two
torch.profiler traces of CPU work alike. Real traces only."""
import json
import re

import pytest

from conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "newcomer"
BEFORE, AFTER = DATA / "cpu_roll_nsys2024.sqlite.xz", DATA / "cpu_roll_fixed_nsys2024.sqlite.xz"
K_BEFORE, K_AFTER = DATA / "cpu_roll_torch.pt.trace.json.gz", DATA / "cpu_roll_fixed_torch.pt.trace.json.gz"
WORKERS = DATA / "loader_roll_lost_nsys2024.sqlite.xz"


def _own_clock(trace) -> float:
    """The loop's time the traced program printed (its run record keeps the last lines of its output)."""
    rec = json.loads(trace.with_name(trace.name.replace(".sqlite.xz", ".run.json")).read_text())
    return float(next(re.search(r"loop_s=([\d.]+)", x).group(1) for x in rec["last_lines"] if "loop_s=" in x))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    out = {}
    for trace in (BEFORE, WORKERS, K_BEFORE):
        path = tmp_path_factory.mktemp("a") / "s.json"
        r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--json", str(path))
        assert r.returncode == 0, r.stderr[-2000:]
        out[trace.name] = (r.stdout, json.loads(path.read_text()))
    return out


def test_imports_and_model_construction_are_set_up_not_the_loops_lines(analysed):
    text, s = analysed[BEFORE.name]
    setup, lines = s["code"]["setup"], s["code"]["cpu"]
    assert setup["until"] == "the first step's start" and setup["by_kind"]["imports"] > 5e9  # `import torch`: seconds
    assert setup["lines"][0]["code"] == "import torch"
    assert all("import" not in site["code"] for site in lines), lines
    assert [site["line"] for site in lines][:2] == [28, 52]  # np.roll in __getitem__, then the model
    assert "set-up before the loop (until the first step's start; paid once a run" in text


def test_each_costly_line_of_a_cpu_capture_gets_its_roles_advice(analysed):
    _, s = analysed[BEFORE.name]
    found = {f["subject"]: f for f in s["diagnosis"] if f["rule"] == "cpu-hotspot"}
    roll = found["cpu_roll.py:28"]
    assert roll["severity"] == "high" and roll["line"]["role"] == "input"
    # the capture machine had 2 cores (its TARGET_INFO_SYSTEM_ENV): no more workers are advised than it has
    assert "num_workers=2" in roll["suggestion"] and "one NumPy or torch call" in roll["suggestion"]
    assert "GPU" not in roll["suggestion"]
    assert "inference_mode" in found["cpu_roll.py:52"]["suggestion"]
    assert roll["impact_fraction"] == roll["line"]["share"]  # one value for one figure


def test_the_way_from_the_loop_runs_through_the_dataloader_to_getitem(analysed):
    """num_workers=0: the main thread's own stack; two workers: the loop waits, the work is in the worker processes."""
    _, s = analysed[BEFORE.name]
    path = next(site for site in s["code"]["cpu"] if site["line"] == 28)["path"]
    assert path[0].startswith("cpu_roll.py:48  for step, batch in enumerate(loader):")
    assert path[1:] == ["_BaseDataLoaderIter.__next__ (torch)", "Shifted.__getitem__ (cpu_roll.py:28)", "roll (numpy)"]
    _, s = analysed[WORKERS.name]
    wait = next(f for f in s["diagnosis"] if f["rule"] == "cpu-hotspot" and f["line"]["line"] == 28)
    assert wait["line"]["path"][1:] == ["_BaseDataLoaderIter.__next__ (torch)", "2 DataLoader worker processes",
                                        "Frames.__getitem__ (infer_w.py:18)", "roll (numpy)"], wait["line"]["path"]
    assert "its 2 DataLoader workers make them slower than the loop takes them" in wait["suggestion"]


def test_verify_compares_two_cpu_captures_as_the_programs_clock_does(tmp_path):
    out = tmp_path / "v.json"
    r = run_cli("-m", "nsys_transfer", "verify", str(BEFORE), str(AFTER), "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    clock = _own_clock(BEFORE) / _own_clock(AFTER)  # 3.892 s / 2.050 s: 1.90x
    said = 1 + doc["verdict"]["change"]
    assert abs(said / clock - 1) < 0.10, (said, clock)
    assert re.match(r"1\.\d\dx faster over the whole loop; resolved: cpu-hotspot \(cpu_roll\.py:28\)",
                    doc["verdict"]["line"]), doc["verdict"]["line"]
    assert r.stdout.startswith("VERDICT: " + doc["verdict"]["line"].split(";")[0])
    by = {f["before_subject"] or f["after_subject"]: f["status"] for f in doc["findings"]}
    assert by["cpu_roll.py:28"] == "resolved" and by["cpu_roll.py:52"] in ("unchanged", "reduced")  # the model line,
    assert "not comparable" not in r.stderr                                                  # at :46 after, paired
    slower = run_cli("-m", "nsys_transfer", "verify", str(AFTER), str(BEFORE), "--fail-if-slower", "5", "-q")
    assert slower.returncode == 1 and "slower over the whole loop" in slower.stdout and "GATE FAILED" in slower.stdout


def test_verify_compares_two_torch_profiler_cpu_traces(tmp_path):
    r = run_cli("-m", "nsys_transfer", "verify", str(K_BEFORE), str(K_AFTER), "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.match(r"\d\.\d\dx faster over the whole loop; resolved: cpu-hotspot \(cpu_roll\.py:28\)", r.stdout), \
        r.stdout


def test_one_cpu_capture_against_one_of_each_profiler_is_still_refused():
    r = run_cli("-m", "nsys_transfer", "verify", str(BEFORE), str(K_AFTER))
    assert r.returncode == 2 and "the two profilers record and time different things" in r.stderr, r.stderr


TEXT_BEFORE, TEXT_AFTER = DATA / "textcls_nsys2024.sqlite.xz", DATA / "textcls_fixed_nsys2024.sqlite.xz"


def test_a_line_is_listed_once_however_many_functions_run_on_it(tmp_path):
    """textcls.py:26 `toks = [torch.tensor(tokenize(d)) for d in batch]` runs as the list comprehension's own function
    and as the module's line: one line to the reader, listed once with the time of both."""
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(TEXT_BEFORE), "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    code = json.loads(out.read_text())["code"]
    for sites in (code["cpu"], code["setup"]["lines"]):
        places = [(site["file"], site["line"]) for site in sites]
        assert len(places) == len(set(places)), places
    assert code["cpu"][0]["line"] == 26 and code["cpu"][0]["share"] > 0.4


def test_the_loop_never_ends_at_the_profilers_own_threads():
    """textcls_fixed's loop took 75 ms by its own clock; a CPU sample of nsys's own thread in its process ('[NSys
    Comms]', 1.8 s later) had ended it there, and verify said '56% slower' of a fix 10.9x faster by the clocks."""
    r = run_cli("-m", "nsys_transfer", "verify", str(TEXT_BEFORE), str(TEXT_AFTER), "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    said = float(re.match(r"([\d.]+)x faster over the whole loop", r.stdout).group(1))
    clock = _own_clock(TEXT_BEFORE) / _own_clock(TEXT_AFTER)  # 0.819 s / 0.075 s
    assert abs(said / clock - 1) < 0.25, (said, clock)  # a 75 ms loop, sampled every 10 ms


def test_the_next_run_is_never_verified_against_an_earlier_after(tmp_path):
    """make trace's next command: the newest other trace is the before, but never one named as an after, and a run
    named as a before starts a new pair."""
    from nsys_transfer.profiling.runner import previous_trace
    runs = tmp_path / "runs"

    def traced(name):
        path = runs / name / f"{name}.sqlite"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
        return path
    traced("before")
    assert previous_trace(traced("after")) == (runs / "before" / "before.sqlite").resolve()
    assert previous_trace(traced("b2")) == (runs / "before" / "before.sqlite").resolve()  # not the last `after`
    assert previous_trace(traced("a2")) == (runs / "b2" / "b2.sqlite").resolve()
    assert previous_trace(traced("before3")) is None  # its name starts a new pair
