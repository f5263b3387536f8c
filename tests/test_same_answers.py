"""A change to loading or speed must not move any answer: the JSON of every bundled and public trace equals the
stored one (tests/golden_answers.py; `python tests/golden_answers.py --update` after a change meant to move them)."""
from __future__ import annotations

import pytest

import golden_answers as answers

STORED = answers.load()


@pytest.mark.parametrize("names", answers.keys(), ids=lambda k: " + ".join(k))
def test_same_answer(names, analyze_trace):
    key = " + ".join(names)
    if key not in STORED:
        pytest.skip(f"no stored answer for {key} (a public trace added since they were stored)")
    _, summary = analyze_trace(*names)  # answers.answer's run, shared with tests/test_one_figure.py
    assert answers.without_paths(summary) == STORED[key]


def test_every_bundled_trace_has_a_stored_answer():
    missing = [n for n in answers.bundled() if n not in STORED]
    assert not missing, f"store their answers: python tests/golden_answers.py --update ({missing})"


@pytest.mark.parametrize("names", answers.keys(), ids=lambda k: " + ".join(k))
def test_no_section_contradicts_another(names):
    """On every bundled and public trace (their stored answers, which test_same_answer keeps current): shares stay
    shares, the per-GPU rows agree with the header, and no step range is a PyTorch operator range."""
    s = STORED.get(" + ".join(names))
    if s is None:
        pytest.skip("no stored answer")
    for f in s["diagnosis"]:
        assert 0 <= f["impact_fraction"] <= 1, f
    g = s["gpu"]
    if g:
        assert sum(d["busy_ns"] for d in g["devices"]) == g["busy_ns"]
        assert g["compute_ns"] is None or g["compute_ns"] <= g["busy_ns"]
        assert 0 <= g["utilization"] <= 1
    regex = (s["steps"] or {}).get("regex") or ""
    assert not any(w in regex for w in ("op_id", "seq =", "::", "Backward")), regex
    if s["trace"] and s["memcpy"]:
        kinds = sum(s["memcpy"][k]["count"] for k in ("dtoh", "htod", "dtod"))
        assert kinds <= s["trace"]["counts"]["memcpys"]
    ranks = s.get("ranks") or {}
    header = {d["device"]: d for d in (g or {}).get("devices", [])}
    for row in ranks.get("gpus", []):
        assert 0 <= row["compute_utilization"] <= row["utilization"] <= 1, row
        dev = header.get(row.get("device"))
        if dev is not None and dev["utilization"] >= 0.5:  # a busy GPU is never reported idle over its own steps
            assert row["utilization"] >= 0.05, (row, dev)
