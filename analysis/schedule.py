"""Runs declared sections (sections/base.py) in an order their declarations set: each after what it needs and what it
names in `after`. Of the sections that can run, first those that start background work (so that it overlaps the
rest), then those that lead to such work soonest; of these, the first by name whose background results are done
(none waits while another could run), or where each waits, the first to have them. A value is dropped once the last
section that needs it has run (a long capture's kernel rows do not outlive the device pass), unless it is kept."""
from __future__ import annotations

from collections.abc import Collection, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait

from .sections.base import Section

INF = 1 << 30


def run(sections: Iterable[Section], given: dict, keep: Collection[str] = ()) -> dict:
    """The sections' values, made in order from the given ones: the Parts of the summary, the values named in keep,
    those nothing needs and the given ones."""
    pending = _checked(list(sections), given)
    lead = _lead(pending)
    values, left = dict(given), _readers(pending)
    keep = {*keep, *(s.name for s in pending if s.part)}
    while pending:
        section = _next(pending, values, lead)
        pending.remove(section)
        made = section.make(**{n: values[n] for n in section.needs})
        values.update(zip(section.provides, made if len(section.provides) > 1 else (made,)))
        for n in section.needs:
            left[n] -= 1
            if not left[n] and n not in given and n not in keep:
                del values[n]
    return values


def _next(pending: list[Section], values: dict, lead: dict[str, int]) -> Section:
    """The section to run next: of those whose needs are made, the background ones first, then those nearest to
    background work; of these, the first by name that waits for no background result; where each waits, the first
    whose background results are done once one of them is."""
    ready = [s for s in pending if all(n in values for n in s.needs) and not _waits_for(s, pending)]
    if not ready:
        raise ValueError(f"sections that need each other: {sorted(s.name for s in pending)}")
    best = min((not s.background, lead[s.name]) for s in ready)
    ready = sorted((s for s in ready if (not s.background, lead[s.name]) == best), key=lambda s: s.name)
    while True:
        running = {s.name: _running(s, values) for s in ready}
        free = [s for s in ready if not running[s.name]]
        if free:
            return free[0]
        wait({f for fs in running.values() for f in fs}, return_when=FIRST_COMPLETED)


def _checked(sections: list[Section], given: dict) -> list[Section]:
    """The sections, once every name they need or run after is given or provided."""
    known = set(given) | {n for s in sections for n in s.provides}
    shadowed = [(s.name, n) for s in sections for n in s.provides if n in given]
    if shadowed:
        raise ValueError(f"sections provide names they are given: {shadowed}")
    for s in sections:
        missing = [n for n in (*s.needs, *s.after) if n not in known]
        if missing:
            raise ValueError(f"section {s.name!r} needs {missing}: no section provides them")
    return sections


def _waits_for(section: Section, pending: list[Section]) -> bool:
    """Whether a section it runs after is still to run."""
    return any(n in s.provides for s in pending for n in section.after)


def _running(section: Section, values: dict) -> list[Future]:
    """The background results it needs that are not done yet."""
    return [values[n] for n in section.needs if isinstance(values[n], Future) and not values[n].done()]


def _readers(sections: list[Section]) -> dict[str, int]:
    """How many sections need each name."""
    count: dict[str, int] = {}
    for s in sections:
        for n in s.needs:
            count[n] = count.get(n, 0) + 1
    return count


def _lead(sections: list[Section]) -> dict[str, int]:
    """Each section's distance to the nearest background section that needs (or runs after) what it provides: 0 for
    a background section, INF where none does."""
    by_name = {n: s.name for s in sections for n in s.provides}
    users: dict[str, set[str]] = {s.name: set() for s in sections}
    for s in sections:
        for n in (*s.needs, *s.after):
            if n in by_name:
                users[by_name[n]].add(s.name)
    lead = {s.name: 0 if s.background else INF for s in sections}
    for _ in sections:  # Bellman-Ford: the graph is small
        for name, after in users.items():
            lead[name] = min(lead[name], min((lead[u] + 1 for u in after), default=INF))
    return lead
