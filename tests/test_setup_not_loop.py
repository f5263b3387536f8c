"""The set-up before the loop never lists the loop's own work (the newcomer's item 2): a DataLoader fetching the first
batch before the first step's range starts (a Dataset's `__getitem__`, the workers' first batch), or a lazy import in
the first step that moves the set-up's end past it, reaches its work through the loop's line, so it is the loop's.
Real captures only: the newcomer's CPU programs on the 2-core machine (tests/data/newcomer), read as stored answers
(tests/test_same_answers.py keeps them those of today's code)."""
import golden_answers as answers
import pytest

NEWCOMER = "tests/data/newcomer/"


@pytest.fixture(scope="module")
def stored():
    return answers.load()


def test_no_set_up_line_is_reached_through_a_line_of_the_loop(stored):
    """On every stored answer with a set-up: no set-up line's path starts at a line the loop's own lines start at."""
    checked = 0
    for key, s in stored.items():
        code = s.get("code") or {}
        setup = code.get("setup") or {}
        loop_heads = {c["path"][0] for c in code.get("cpu") or [] if c["path"]}
        for line in setup.get("lines") or []:
            assert not (line["path"] and line["path"][0] in loop_heads), (key, line["path"])
            checked += 1
    assert checked >= 15  # the newcomer's and the CPU programs' set-ups


def test_a_datasets_getitem_before_the_first_step_is_not_set_up(stored):
    """cpu_roll.py: `for step, batch in enumerate(loader):` (line 48) fetches the first batch before `step 0`'s range
    starts; its `Shifted.__getitem__` (`acc += np.roll(x, k, axis=1)`, line 28) ran in the loop, not in the set-up,
    which is its imports and model construction alone."""
    setup = stored[NEWCOMER + "cpu_roll_nsys2024.sqlite.xz"]["code"]["setup"]
    assert [line["line"] for line in setup["lines"]][:2] == [16, 14]  # import torch, import numpy
    assert not any("__getitem__" in line["function"] or "np.roll" in line["code"] for line in setup["lines"])
    assert set(setup["by_kind"]) == {"imports", "model construction"}


def test_the_wait_for_the_workers_first_batch_is_not_set_up(stored):
    """infer_w.py (loader_roll_lost): the loop's line `for step, batch in enumerate(loader):` waits 0.3 s for its 2
    workers' first batch before the first step: the loop's, so the set-up is its imports alone."""
    s = stored[NEWCOMER + "loader_roll_lost_nsys2024.sqlite.xz"]
    setup = s["code"]["setup"]
    assert [line["code"] for line in setup["lines"]] == ["import torch", "import numpy as np"]
    assert set(setup["by_kind"]) == {"imports"}
    assert any(c["code"] == "for step, batch in enumerate(loader):" for c in s["code"]["cpu"])  # a loop line still
