"""How a section declares itself: what it provides (its key in the JSON, or a value the sections share: the window,
the device pass), what it needs (values the analysis is given -- trace, opts, say -- or that other sections provide)
and the function that makes it from them. analysis/schedule.py runs the declared sections in the order their needs
set; summary.analyze assembles the JSON from the Parts they make.

    @declare("kernels", needs=("digest", "opts", "trace"), part=True)
    def _kernels(digest, opts, trace) -> Part: ...

A section whose function starts work on the trace's background threads (trace.background) says background=True: it
runs as soon as its needs are there, so that the work overlaps everything after it; one that should let such work
run beside something else first names that in `after`. Adding a section is one module under sections/ (imported by
declared()), its test and its golden answers."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    """One declared section: make(**{need: value}) -> the value of `provides[0]`, or a tuple, one value for each name
    of `provides`. part: its value is a Part of the summary, under its name (the others are values the sections
    share); after: names to run after without reading them; background: it starts background reads."""
    provides: tuple[str, ...]
    needs: tuple[str, ...]
    make: Callable
    part: bool = False
    after: tuple[str, ...] = ()
    background: bool = False

    @property
    def name(self) -> str:
        """The section's name: the first value it provides (the JSON key of a section of the summary)."""
        return self.provides[0]


REGISTRY: dict[str, Section] = {}


def declare(provides: str | tuple[str, ...], needs: tuple[str, ...] = (), part: bool = False,
            after: tuple[str, ...] = (), background: bool = False):
    """A decorator: the function makes the declared section (registered under its name); the function is returned
    unchanged."""
    names = (provides,) if isinstance(provides, str) else tuple(provides)

    def register(make: Callable) -> Callable:
        add(Section(names, tuple(needs), make, part, tuple(after), background))
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
