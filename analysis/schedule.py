"""Runs declared sections (sections/base.py) in an order their declarations set: each after what it needs and what it
names in `after`. Of the sections that can run, first those that start background work (so that it overlaps the
rest), then those that lead to such work soonest; of these, the first by name whose background results are done
(none waits while another could run), or where each waits, the first to have them. Every value is kept under its
producer (the function that makes it, the field of the NamedTuple it comes in, or the Given it is), never under a
name; it is dropped once the last section that needs it has run (a long capture's kernel rows do not outlive the
device pass), unless it is kept."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, TypeVar, overload

from .sections.base import Given, Section

INF = 1 << 30
T = TypeVar("T")


class Made:
    """The values a run made and was given, each under its producer: made[window.part] is what window.part returned,
    typed as it returns it; made[TRACE], the trace given; made.field(gpu.PassedOver.digest), a field's."""

    def __init__(self, values: dict[object, object]) -> None:
        self._values = values

    @overload
    def __getitem__(self, producer: Given[T]) -> T: ...

    @overload
    def __getitem__(self, producer: Callable[..., T]) -> T: ...

    def __getitem__(self, producer: object) -> Any:
        return self._values[producer]

    def field(self, field: T) -> T:
        """The value of a field of the NamedTuple a section makes (made.field(gpu.PassedOver.digest)): the type
        checker reads the field, on its class, as its type, the value's."""
        return self._values[field]  # type: ignore[return-value]

    def __contains__(self, producer: object) -> bool:
        return producer in self._values


def run(sections: Iterable[Section], given: Mapping[Given, object], keep: Collection[object] = ()) -> Made:
    """The sections' values, made in order from the given ones: the Parts of the summary, the values whose producers
    are in keep, those nothing needs and the given ones."""
    pending = _checked(list(sections), given)
    lead = _lead(pending)
    values: dict[object, object] = {k: v for k, v in given.items()}
    left = _readers(pending)
    kept = {*keep, *(s.make for s in pending if s.part)}
    while pending:
        section = _next(pending, values, lead)
        pending.remove(section)
        value = section.make(*[values[n] for n in section.needs])
        if section.provides is not None and not isinstance(value, section.provides):
            raise TypeError(f"section {section.name!r} returned {type(value).__name__}, not {section.provides.__name__}")
        values.update(zip(section.made, value if section.provides is not None else (value,)))
        for n in section.needs:
            left[n] -= 1
            if not left[n] and n not in given and n not in kept:
                del values[n]
    return Made(values)


def _next(pending: list[Section], values: dict, lead: dict[Callable, int]) -> Section:
    """The section to run next: of those whose needs are made, the background ones first, then those nearest to
    background work; of these, the first by name that waits for no background result; where each waits, the first
    whose background results are done once one of them is."""
    ready = [s for s in pending if all(n in values for n in s.needs) and not _waits_for(s, pending)]
    if not ready:
        raise ValueError(f"sections that need each other: {sorted(s.name for s in pending)}")
    best = min((not s.background, lead[s.make]) for s in ready)
    ready = sorted((s for s in ready if (not s.background, lead[s.make]) == best), key=lambda s: s.name)
    while True:
        running = [_running(s, values) for s in ready]
        free = [s for s, fs in zip(ready, running) if not fs]
        if free:
            return free[0]
        wait({f for fs in running for f in fs}, return_when=FIRST_COMPLETED)


def _checked(sections: list[Section], given: Mapping[Given, object]) -> list[Section]:
    """The sections, once every producer they need or run after is given or among them, and none is made twice."""
    made = [k for s in sections for k in s.made]
    twice = sorted({s.name for s in sections for k in s.made if made.count(k) > 1})
    if twice:
        raise ValueError(f"sections that make the same value: {twice}")
    known = set(given) | set(made)
    for s in sections:
        missing = [_label(n) for n in (*s.needs, *s.after) if n not in known]
        if missing:
            raise ValueError(f"section {s.name!r} needs {missing}: no section makes them")
    return sections


def _label(producer: object) -> str:
    """How a message names a producer: module.function, or the Given's name."""
    if isinstance(producer, Given):
        return repr(producer)
    name = getattr(producer, "__qualname__", None)
    return f"{producer.__module__.rsplit('.', 1)[-1]}.{name}" if name else repr(producer)


def _waits_for(section: Section, pending: list[Section]) -> bool:
    """Whether a section it runs after is still to run."""
    return any(n in s.made for s in pending for n in section.after)


def _running(section: Section, values: dict) -> list[Future]:
    """The background results it needs that are not done yet."""
    return [values[n] for n in section.needs if isinstance(values[n], Future) and not values[n].done()]


def _readers(sections: list[Section]) -> dict[object, int]:
    """How many sections need each producer's value."""
    count: dict[object, int] = {}
    for s in sections:
        for n in s.needs:
            count[n] = count.get(n, 0) + 1
    return count


def _lead(sections: list[Section]) -> dict[Callable, int]:
    """Each section's distance to the nearest background section that needs (or runs after) what it makes: 0 for a
    background section, INF where none does."""
    maker = {k: s.make for s in sections for k in s.made}
    users: dict[Callable, set[Callable]] = {s.make: set() for s in sections}
    for s in sections:
        for n in (*s.needs, *s.after):
            if n in maker:
                users[maker[n]].add(s.make)
    lead = {s.make: 0 if s.background else INF for s in sections}
    for _ in sections:  # Bellman-Ford: the graph is small
        for make, after in users.items():
            lead[make] = min(lead[make], min((lead[u] + 1 for u in after), default=INF))
    return lead
