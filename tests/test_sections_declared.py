"""The sections declare themselves (analysis/sections/base.py) and analysis/schedule.py orders them from their
declarations: every section of the JSON is declared once, the scheduler runs each after what it needs (background
work first, values dropped after their last reader), and a new section is one declaration -- shown here by a toy
section, registered in the test, that reads another section's Part and shows under its key in a real trace's
summary."""
import typing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace, schedule
from nsys_transfer.analysis.common.schema import Part
from nsys_transfer.analysis.sections import base, gpu, kernels, window
from nsys_transfer.analysis.sections.base import OPTS, SAY, TRACE, Given, Section, declare, declared
from nsys_transfer.analysis.summary import KEPT, analyze_sections

ROOT = Path(__file__).resolve().parent.parent
TRACE_PATH = ROOT / "tests" / "data" / "programs" / "seg_logits_fixed_nsys2024.sqlite.xz"


def test_every_section_of_the_json_is_declared_once():
    sections = declared()
    parts = {s.part for s in sections if s.part}
    # trace and window are dicts, not Parts: summary.analyze_sections writes them first (trace_info.part, window.part);
    # the Parts in the order each declares (the answers' order: test_same_answers)
    assert base.section_keys() == ("setup", "gpu", "memcpy", "steps", "gaps", "idle", "kernels", "nvtx", "code")
    assert base.table_keys() == ("setup", "gpu", "memcpy", "steps", "kernels", "idle", "gaps", "nvtx", "code")
    assert parts == set(base.section_keys())
    made = [k for s in sections for k in s.made]
    assert len(made) == len(set(made))
    assert set(KEPT) <= set(made)
    for s in sections:
        assert callable(s.make) and isinstance(s.needs, tuple) and isinstance(s.after, tuple), s.name


def test_needs_are_producers_never_names():
    """Every need and `after` is a producer (a declared function, a field of the NamedTuple one makes) or a Given:
    nothing is looked up by a string."""
    sections = declared()
    made = {k for s in sections for k in s.made}
    for s in sections:
        for n in (*s.needs, *s.after):
            assert not isinstance(n, str) and (n in made or n in (TRACE, OPTS, SAY)), (s.name, n)


def _types(make) -> tuple[list, object]:
    hints = typing.get_type_hints(make)
    params = list(hints)[:-1] if "return" in hints else list(hints)
    return [hints[p] for p in params], hints.get("return")


def _type_of(producer, sections):
    """The type of the value a producer makes: its function's return, its field's, or the Given's kind."""
    if isinstance(producer, Given):
        return producer.kind
    for s in sections:
        if s.provides is not None and producer in s.made:
            field = s.provides._fields[s.made.index(producer)]
            return typing.get_type_hints(s.provides)[field]
    return typing.get_type_hints(producer).get("return")


def test_each_parameter_is_typed_as_its_producer_makes_it():
    """A section's parameters take its needs' values in order, each typed as its producer returns it: what mypy and
    go-to-definition follow from the producer to the parameter (base.py)."""
    sections = declared()
    for s in sections:
        params, returned = _types(s.make)
        assert len(params) == len(s.needs), s.name
        for param, need in zip(params, s.needs):
            assert param == _type_of(need, sections), (s.name, need)
        if s.provides is not None:
            assert returned is s.provides, s.name
        assert returned is not None, s.name


def test_every_need_is_given_or_provided():
    schedule._checked(declared(), {TRACE: None, OPTS: None, SAY: None})  # raises on a need nobody provides


X = Given("x", str)
ran: list[str] = []


def toy(name, needs=(), **kw):
    """A section that records that it ran and makes its name from its needs' values."""
    def make(*values):
        ran.append(name)
        return name + "(" + ",".join(values) + ")"
    make.__name__ = make.__qualname__ = name
    return Section(make, tuple(needs), **kw)


def test_the_scheduler_orders_by_needs_not_by_listing():
    ran.clear()
    a = toy("a", (X,))
    b = toy("b", (a.make,))
    c = toy("c", (b.make, a.make))
    made = schedule.run([c, b, a], {X: "x"}, keep=(c.make,))
    assert ran == ["a", "b", "c"]
    assert made[c.make] == "c(b(a(x)),a(x))"
    assert a.make not in made and b.make not in made  # dropped after their last reader; c kept, x given
    assert made[X] == "x"


def test_background_sections_start_first_and_after_is_kept():
    ran.clear()
    c = toy("c", (X,))
    schedule.run([toy("a", (X,)), toy("z", (X,), background=True), toy("b", (X,), after=(c.make,)), c], {X: "x"})
    assert ran == ["z", "a", "c", "b"]


class Pair(typing.NamedTuple):
    left: str
    right: str


def test_a_section_that_makes_several_values_gives_each_its_own_reader_and_lifetime():
    ran.clear()
    pair = Section(lambda x: Pair(x + "<", x + ">"), (X,), provides=Pair)
    left = toy("l", (Pair.left,))
    both = toy("both", (Pair.left, Pair.right))
    made = schedule.run([both, left, pair], {X: "x"}, keep=(Pair.right,))
    assert made[both.make] == "both(x<,x>)" and made[left.make] == "l(x<)"
    assert Pair.left not in made and made[Pair.right] == "x>"  # each field dropped after its own last reader
    with pytest.raises(TypeError, match="not Pair"):
        schedule.run([Section(lambda x: (x, x), (X,), provides=Pair)], {X: "x"})


def test_a_section_waiting_on_background_work_yields_to_one_that_does_not():
    gate = threading.Event()
    slow_work = Given("slow", object)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(gate.wait)
        ran.clear()
        waiting = Section(lambda slow: ran.append("a") or slow.result(), (slow_work,))
        free = Section(lambda x: ran.append("b") or gate.set(), (X,))
        schedule.run([waiting, free], {slow_work: slow, X: "x"})
    assert ran == ["b", "a"]


def _cycle():
    a = toy("a", ())
    b = toy("b", (a.make,))
    return [Section(a.make, (b.make,)), b]


def _twice():
    a = toy("a", (X,))
    return [a, Section(a.make, (X,))]


@pytest.mark.parametrize("sections, message", [
    (lambda: [toy("a", (Given("nowhere", str),))], "needs ['NOWHERE']: no section makes them"),
    (lambda: [toy("a", (toy("elsewhere").make,))], "needs ['test_sections_declared.elsewhere']"),
    (_cycle, "need each other"),
    (_twice, "make the same value"),
])
def test_bad_declarations_are_errors(sections, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        schedule.run(sections(), {X: "x"})


def test_a_producer_is_declared_once_and_takes_one_value_per_need():
    declared()
    with pytest.raises(ValueError, match="already provided"):
        base.add(Section(window.nvtx_rows, (TRACE,)))
    with pytest.raises(ValueError, match="already provided"):
        base.add(Section(lambda digest: None, (gpu.PassedOver.digest,), part="kernels"))
    with pytest.raises(ValueError, match="takes 1 values but needs 2"):
        base.add(Section(lambda trace: None, (TRACE, OPTS)))
    assert all(s.part != "kernels" or s.make is kernels.kernels_part for s in base.REGISTRY.values())


def test_a_new_section_is_one_declaration():
    """A toy section: the most time-consuming kernel's share of the kernel time, from the `kernels` Part."""
    def top_kernel(kernels: Part) -> Part:
        top = kernels.summary.top[0]
        return Part({"name": top.name, "share": round(top.total_ns / kernels.summary.total_ns, 4)},
                    {"top_kernel": kernels.tables["kernels_top"].head(1)})
    declare(top_kernel, needs=(kernels.kernels_part,), part="top_kernel")
    try:
        with Trace.open(TRACE_PATH) as t:
            a = analyze_sections(t)
    finally:
        base.remove(top_kernel)
    s = a.summary
    assert list(s)[-8:] == ["nvtx", "code", "top_kernel", "diagnosis", "predicted", "warnings", "ranks", "cycles"]
    assert s["top_kernel"]["name"] == s["kernels"]["top"][0]["name"]
    assert 0 < s["top_kernel"]["share"] <= 1
    assert list(a.tables)[-1] == "top_kernel"
    assert "top_kernel" not in {x.name for x in declared()}
