"""A change to loading or speed must not move any answer: the JSON of every bundled and public trace equals the
stored one (tests/golden_answers.py; `python tests/golden_answers.py --update` after a change meant to move them)."""
from __future__ import annotations

import pytest

import golden_answers as answers

STORED = answers.load()


@pytest.mark.parametrize("names", answers.keys(), ids=lambda k: " + ".join(k))
def test_same_answer(names):
    key = " + ".join(names)
    if key not in STORED:
        pytest.skip(f"no stored answer for {key} (a public trace added since they were stored)")
    assert answers.answer(*names) == STORED[key]


def test_every_bundled_trace_has_a_stored_answer():
    missing = [n for n in answers.bundled() if n not in STORED]
    assert not missing, f"store their answers: python tests/golden_answers.py --update ({missing})"
