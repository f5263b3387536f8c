"""A newcomer's verify of their own CPU programs and fixes (the detection, segmentation and image programs of the
second newcomer's hour): a line the fix did not write is never `new`, one statement the fix moved is one row named at
both places, a change within the sampling's spread is no change, the loop's end is named by its thread, never a bare
id, and the throughput of traces without steps is said as loops a second. Real traces only: tests/data/newcomer/
(cpu_roll and its fix; seg_numpy.py and seg_numpy_fixed.py, RESULTS.txt there)."""
import json

import pytest

from conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "newcomer"
ROLL, ROLL_FIXED = DATA / "cpu_roll_nsys2024.sqlite.xz", DATA / "cpu_roll_fixed_nsys2024.sqlite.xz"
SEG, SEG_FIXED = DATA / "seg_numpy_nsys2024.sqlite.xz", DATA / "seg_numpy_fixed_nsys2024.sqlite.xz"
TEXT, TEXT_FIXED = DATA / "textcls_nsys2024.sqlite.xz", DATA / "textcls_fixed_nsys2024.sqlite.xz"


def _verify(tmp_path, before, after, *extra):
    out = tmp_path / "v.json"
    r = run_cli("-m", "nsys_transfer", "verify", str(before), str(after), "--json", str(out), *extra)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r, json.loads(out.read_text())


def test_a_line_the_before_side_ran_under_the_threshold_is_not_new(tmp_path):
    """cpu_roll_fixed.py:42 `for step, batch in enumerate(loader):` is cpu_roll.py:48 (the fixed program is another
    file): it became a finding only because the fix removed the lines that outranked it."""
    r, doc = _verify(tmp_path, ROLL, ROLL_FIXED, "--fail-on-new", "any")
    row = next(f for f in doc["findings"] if f["after_subject"] == "cpu_roll_fixed.py:42")
    assert row["status"] == "grown" and row["before_subject"] == "cpu_roll.py:48", row
    assert row["subject"] == "cpu_roll.py:48 -> cpu_roll_fixed.py:42" and row["before_ns"] is not None
    assert "cpu_roll_fixed.py:42" not in " ".join(doc["gates"]["failed"]), doc["gates"]
    new = [f["after_subject"] for f in doc["findings"] if f["status"] == "new"]
    assert new == ["cpu_roll_fixed.py:23"], new  # the fix's own line (its cumsum) is new: the change wrote it


def test_a_call_the_fix_moved_is_one_row_named_at_both_places(tmp_path):
    """seg_numpy.py:37 `logits = model(x).numpy()` became seg_numpy_fixed.py:27 `outputs.submit(s, model(x))`: the
    same call into the model, one row, before's place first (never `resolved` beside `new`)."""
    _, doc = _verify(tmp_path, SEG, SEG_FIXED)
    names = {f["subject"]: f for f in doc["findings"]}
    row = names["seg_numpy.py:37 -> seg_numpy_fixed.py:27"]
    assert row["status"] not in ("new", "resolved") and row["before_ns"] and row["after_ns"], row
    assert "seg_numpy.py:37" not in names and "seg_numpy_fixed.py:27" not in names


def test_a_change_within_the_samplings_spread_is_unchanged(tmp_path):
    """seg_numpy.py:36 `x = torch.randn(...)`: 6 samples of 10 ms before, 13 after: twice the time, but within three
    standard deviations of two counts that small, so unchanged, not worse."""
    _, doc = _verify(tmp_path, SEG, SEG_FIXED)
    row = next(f for f in doc["findings"] if f["subject"] == "seg_numpy.py:36 -> seg_numpy_fixed.py:26")
    assert row["after_ns"] > 1.25 * row["before_ns"] and row["status"] == "unchanged", row


def test_the_loops_end_is_named_by_its_thread_never_a_bare_id(tmp_path):
    r, doc = _verify(tmp_path, SEG, SEG_FIXED)
    end = doc["loop"]["sides"]["after"]["end_from"]
    assert end == "OS runtime calls of another thread of the program", end  # its name is the process's: python
    assert "(process " not in r.stdout


def test_one_trace_given_twice_is_refused_in_one_line(tmp_path):
    """newcomer #13: `verify runs/det-before/det-before.sqlite runs/det-before/det-before.sqlite` said 'about as fast
    (+0.0%)', rc=0. The same path, its run folder beside it, or a copy of the same bytes: one line, exit 2."""
    folder = tmp_path / "seg-before"
    folder.mkdir()
    copy = folder / "seg-before.sqlite.xz"
    copy.write_bytes(SEG.read_bytes())
    for before, after, said in ((SEG, SEG, "both sides are the same trace ("),
                                (folder, copy, "both sides are the same trace ("),
                                (SEG, copy, "have the same content (a copy)")):
        r = run_cli("-m", "nsys_transfer", "verify", str(before), str(after))
        assert r.returncode == 2 and r.stdout == "", (before, after, r.stdout[-500:])
        assert r.stderr.startswith("verify: ") and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    # two traces of one name in two folders are compared (test_verify.py: two runs of one program keep their charts)


def test_the_throughput_of_loops_without_steps_is_loops_a_second(tmp_path):
    """newcomer #18: `throughput (1/s)  0.144  0.18` read as 0.14 steps a second; it is one over each loop's time.
    Without steps (seg_numpy) the row and the loop say loops/s; with steps (cpu_roll, 24 NVTX steps) steps/s."""
    r, doc = _verify(tmp_path, SEG, SEG_FIXED)
    row = doc["metrics"][0]
    assert row["key"] == "throughput" and row["unit"] == "loops/s", row
    assert row["before"] == 1e9 / doc["loop"]["sides"]["before"]["duration_ns"]
    assert {s["unit"] for s in doc["loop"]["sides"].values()} == {"loops/s"}
    assert "throughput (loops/s)" in r.stdout and "(1/s)" not in r.stdout, r.stdout
    r, doc = _verify(tmp_path, ROLL, ROLL_FIXED)
    assert doc["metrics"][0]["unit"] == "steps/s" and "throughput (steps/s)" in r.stdout


DIFFERENT = "these look like different programs: "


def test_two_different_programs_are_warned_of(tmp_path):
    """newcomer #12: `verify runs/det-before runs/img-after` (detect_post.py vs imgcls_fixed.py) said '60% slower',
    rc=0, though the traces record their command lines. A warning, not a refusal (a fix often has a new name): from
    the run records beside the traces, else from the export itself (nsys's META_DATA_CAPTURE: what it launched)."""
    r, doc = _verify(tmp_path, ROLL, SEG_FIXED)
    said = f"{DIFFERENT}cpu_roll.py vs seg_numpy_fixed.py; verify compares two runs of one program"
    assert doc["warnings"][0] == said and f"warning: {said}" in r.stdout and r.returncode == 0, doc["warnings"]
    for trace in (ROLL, TEXT_FIXED):  # the traces alone: no run record beside them
        (tmp_path / trace.name).write_bytes(trace.read_bytes())
    _, doc = _verify(tmp_path, tmp_path / ROLL.name, tmp_path / TEXT_FIXED.name)
    assert doc["warnings"][0] == f"{DIFFERENT}cpu_roll.py vs textcls_fixed.py; verify compares two runs of one program"


@pytest.mark.parametrize("before, after", [(ROLL, ROLL_FIXED), (SEG, SEG_FIXED), (TEXT, TEXT_FIXED)])
def test_a_fix_under_its_own_name_is_one_program(tmp_path, before, after):
    """cpu_roll.py -> cpu_roll_fixed.py (full paths), seg_numpy.py -> seg_numpy_fixed.py, textcls.py 30 ->
    textcls_fixed.py 30: one program each (the held-out pairs are checked in test_verify_held_out.py)."""
    _, doc = _verify(tmp_path, before, after)
    assert not [w for w in doc["warnings"] if w.startswith(DIFFERENT)], doc["warnings"]
