"""How a section declares itself: what it provides (its key in the JSON, or a value the sections share: the window,
the device pass), what it needs (values the analysis is given -- trace, opts, say -- or that other sections provide)
and the function that makes it from them. analysis/schedule.py runs the declared sections in the order their needs
set; summary.analyze_sections assembles the JSON from the Parts they make.

    @declare("kernels", needs=("digest", "opts", "trace"), part=True, json_at=70, tables_at=50)
    def _kernels(digest, opts, trace) -> Part: ...

A Part's place in the JSON (json_at) and among the tables (tables_at, the --csv files' order) are declared with it:
section_keys() and table_keys() order the Parts by them (a Part that declares none comes after those that do, by
name), the document's frame (common/schema.py) holds them between `window` and `diagnosis`, and the schema check
runs on every document, one GPU or several.

A section whose function starts work on the trace's background threads (trace.background) says background=True: it
runs as soon as its needs are there, so that the work overlaps everything after it; one that should let such work
run beside something else first names that in `after`. Adding a section is one module under sections/ (imported by
declared()), its test and its golden answers (and its row in docs/json-schema.md)."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    """One declared section: make(**{need: value}) -> the value of `provides[0]`, or a tuple, one value for each name
    of `provides`. part: its value is a Part of the summary, under its name (the others are values the sections
    share); after: names to run after without reading them; background: it starts background reads; json_at,
    tables_at: a Part's place in the JSON and among the tables (None: after the Parts that declare one)."""
    provides: tuple[str, ...]
    needs: tuple[str, ...]
    make: Callable
    part: bool = False
    after: tuple[str, ...] = ()
    background: bool = False
    json_at: int | None = None
    tables_at: int | None = None

    @property
    def name(self) -> str:
        """The section's name: the first value it provides (the JSON key of a section of the summary)."""
        return self.provides[0]


REGISTRY: dict[str, Section] = {}


def declare(provides: str | tuple[str, ...], needs: tuple[str, ...] = (), part: bool = False,
            after: tuple[str, ...] = (), background: bool = False, json_at: int | None = None,
            tables_at: int | None = None):
    """A decorator: the function makes the declared section (registered under its name); the function is returned
    unchanged."""
    names = (provides,) if isinstance(provides, str) else tuple(provides)

    def register(make: Callable) -> Callable:
        add(Section(names, tuple(needs), make, part, tuple(after), background, json_at, tables_at))
        return make
    return register


def add(section: Section) -> Section:
    """Register a section (a second one providing the same name is an error)."""
    taken = {n: s.name for s in REGISTRY.values() if s.name != section.name for n in s.provides}
    clash = [n for n in section.provides if n in taken]
    if clash:
        raise ValueError(f"section {section.name!r}: {clash} already provided by {[taken[n] for n in clash]}")
    REGISTRY[section.name] = section
    return section


def remove(name: str) -> None:
    """Unregister the section of that name (tests' toy sections)."""
    REGISTRY.pop(name, None)


def declared() -> list[Section]:
    """Every declared section: each module of this package is imported, so that its declarations have run."""
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{info.name}")
    return list(REGISTRY.values())


def section_keys() -> tuple[str, ...]:
    """The Parts' keys in the JSON's order (json_at; the Parts without one after, by name)."""
    return _ordered(lambda s: s.json_at)


def table_keys() -> tuple[str, ...]:
    """The Parts' keys in their tables' order (tables_at; the Parts without one after, by name)."""
    return _ordered(lambda s: s.tables_at)


def _ordered(at: Callable[[Section], int | None]) -> tuple[str, ...]:
    parts = [s for s in declared() if s.part]
    return tuple(s.name for s in sorted(parts, key=lambda s: (at(s) is None, at(s) or 0, s.name)))
