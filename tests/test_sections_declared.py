"""The sections declare themselves (analysis/sections/base.py) and analysis/schedule.py orders them from their
declarations: every section of the JSON is declared once, the scheduler runs each after what it needs (background
work first, values dropped after their last reader), and a new section is one declaration -- shown here by a toy
section, registered in the test, that reads another section's Part and shows under its key in a real trace's
summary."""
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace, schedule
from nsys_transfer.analysis.common.schema import Part
from nsys_transfer.analysis.sections import base
from nsys_transfer.analysis.sections.base import Section, declare, declared
from nsys_transfer.analysis.summary import KEPT, analyze_sections

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "programs" / "seg_logits_fixed_nsys2024.sqlite.xz"


def test_every_section_of_the_json_is_declared_once():
    sections = declared()
    parts = {s.name for s in sections if s.part}
    # trace and window are dicts, not Parts: summary.analyze_sections writes them first (trace_info: `trace` is the Trace); the
    # Parts in the order each declares (the answers' order: test_same_answers)
    assert base.section_keys() == ("setup", "gpu", "memcpy", "steps", "gaps", "idle", "kernels", "nvtx", "code")
    assert base.table_keys() == ("setup", "gpu", "memcpy", "steps", "kernels", "idle", "gaps", "nvtx", "code")
    assert parts == set(base.section_keys())
    provided = [n for s in sections for n in s.provides]
    assert len(provided) == len(set(provided))
    assert {"trace_info", "window"} <= set(provided) and set(KEPT) <= set(provided)
    for s in sections:
        assert callable(s.make) and isinstance(s.needs, tuple) and isinstance(s.after, tuple), s.name


def test_every_need_is_given_or_provided():
    schedule._checked(declared(), {"trace": None, "opts": None, "say": None})  # raises on a need nobody provides


def toy(name, needs=(), **kw):
    """A section that records that it ran and makes its name from its needs' values."""
    return Section((name,), tuple(needs), lambda **v: ran.append(name) or name + "(" + ",".join(v.values()) + ")",
                   **kw)


ran: list[str] = []


def test_the_scheduler_orders_by_needs_not_by_listing():
    ran.clear()
    made = schedule.run([toy("c", ("b", "a")), toy("b", ("a",)), toy("a", ("x",))], {"x": "x"}, keep=("c",))
    assert ran == ["a", "b", "c"]
    assert made["c"] == "c(b(a(x)),a(x))"
    assert "a" not in made and "b" not in made  # dropped after their last reader; c kept, x given


def test_background_sections_start_first_and_after_is_kept():
    ran.clear()
    schedule.run([toy("a", ("x",)), toy("z", ("x",), background=True), toy("b", ("x",), after=("c",)),
                  toy("c", ("x",))], {"x": "x"})
    assert ran == ["z", "a", "c", "b"]


def test_a_section_waiting_on_background_work_yields_to_one_that_does_not():
    gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(gate.wait)
        ran.clear()
        waiting = Section(("a",), ("slow",), lambda slow: ran.append("a") or slow.result())
        free = Section(("b",), ("x",), lambda x: ran.append("b") or gate.set())
        schedule.run([waiting, free], {"slow": slow, "x": "x"})
    assert ran == ["b", "a"]


@pytest.mark.parametrize("sections, message", [
    ([toy("a", ("nowhere",))], "needs ['nowhere']"),
    ([toy("a", ("b",)), toy("b", ("a",))], "need each other"),
    ([toy("x")], "provide names they are given"),
])
def test_bad_declarations_are_errors(sections, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        schedule.run(sections, {"x": "x"})


def test_a_name_is_provided_once():
    declared()
    with pytest.raises(ValueError, match="already provided"):
        base.add(Section(("elsewhere", "kernels"), (), lambda: None))
    assert "elsewhere" not in base.REGISTRY


def test_a_new_section_is_one_declaration():
    """A toy section: the most time-consuming kernel's share of the kernel time, from the `kernels` Part."""
    @declare("top_kernel", needs=("kernels",), part=True)
    def top_kernel(kernels: Part) -> Part:
        top = kernels.summary["top"][0]
        return Part({"name": top["name"], "share": round(top["total_ns"] / kernels.summary["total_ns"], 4)},
                    {"top_kernel": kernels.tables["kernels_top"].head(1)})
    try:
        with Trace.open(TRACE) as t:
            a = analyze_sections(t)
    finally:
        base.remove("top_kernel")
    s = a.summary
    assert list(s)[-8:] == ["nvtx", "code", "top_kernel", "diagnosis", "predicted", "warnings", "ranks", "cycles"]
    assert s["top_kernel"]["name"] == s["kernels"]["top"][0]["name"]
    assert 0 < s["top_kernel"]["share"] <= 1
    assert list(a.tables)[-1] == "top_kernel"
    assert "top_kernel" not in {x.name for x in declared()}
