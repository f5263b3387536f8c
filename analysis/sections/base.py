"""How a section declares itself: the function that makes its value (the value's producer, and its only name), what
it needs -- the producers of the values it reads, or the values the analysis is given: TRACE, OPTS, SAY -- and, for
a Part of the summary, its key in the JSON. analysis/schedule.py runs the declared sections in the order their needs
set, and gives each its needs' values in the order it lists them; summary.analyze_sections assembles the JSON from
the Parts they make. No value is looked up by a string: a need is the producing function itself, so go-to-definition
goes from a need to its producer and the type checker reads the value's type from the producer's return and the
parameter that takes it (tests/test_sections_declared.py holds the two the same). The declaration follows the
function, a plain statement rather than a decorator: mypy cannot type a decorated function that a module of an import
cycle names at its top level, and the modules of sections/ import each other.

    def kernels_part(digest: KernelDigest, opts: Options, trace: Trace) -> Part: ...

    declare(kernels_part, needs=lambda: (gpu.PassedOver.digest, OPTS, TRACE), part="kernels", json_at=70,
            tables_at=50)

Needs from the module itself, or only Given ones, are a plain tuple (`needs=(nvtx_rows, OPTS)`); needs from other
modules of sections/ are a lambda returning the tuple, read by declared() once every module is imported: the modules
import each other (`from . import gpu`, never `from .gpu import ...` between them), and a producer elsewhere may not
exist yet while this module runs. A section that makes several values at once returns a NamedTuple, declared as its
`provides` (gpu.PassedOver); a section needs one of them by its field (`gpu.PassedOver.digest`), each value kept only
until its own last reader ran (the kernel rows do not outlive the device pass).

A Part's key in the JSON (part=), its place there (json_at) and among the tables (tables_at, the --csv files' order)
are declared with it: section_keys() and table_keys() order the Parts by them (a Part that declares none comes after
those that do, by key), the document's frame (common/schema.py) holds them between `window` and `diagnosis`, and the
schema check runs on every document, one GPU or several. The key is the JSON's contract, never a way to a value.

A section whose function starts work on the trace's background threads (trace.background) says background=True: it
runs as soon as its needs are there, so that the work overlaps everything after it; one that should let such work
run beside something else first names that producer in `after`. Adding a section is one module under sections/
(imported by declared()), its test and its golden answers (and its row in docs/json-schema.md)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..common import defaults
from ..common.window_spec import Spec
from ..load.trace import Trace

T = TypeVar("T")


@dataclass
class Options:
    """How to analyse one trace (analyze-trace's options); None means detect it from the trace."""
    min_gap_ns: int = defaults.MIN_GAP_NS
    step_regex: str | None = None       # None: detected from the NVTX names (cpu.detect_step_regex)
    window: tuple[int, int] | None = None
    top: int = defaults.TOP
    pipeline_depth: int = defaults.PIPELINE_DEPTH
    bin_ns: int = defaults.BIN_NS   # host DtoH bandwidth timeline
    link_gbps: float | None = None      # None: from the trace's own GPU (machine.host_link)
    run_record: dict | None = None      # this toolkit's run record beside the trace, if any
    whole: bool = False                 # the whole capture, set-up and warm-up included (default: the steady state)
    window_asked: Spec | None = None    # how the user gave `window` (--window or --steps), for its `source`


Say = Callable[[str], None]  # the progress callback: say("loading GPU activity")


class Given(Generic[T]):
    """A value the analysis is given, not made by a section (the trace, the options, the progress callback): a
    section needs it as it needs a producer. name: for messages; kind: its type (the parameter that takes it has
    it)."""
    __slots__ = ("name", "kind")

    def __init__(self, name: str, kind: object) -> None:
        self.name, self.kind = name, kind

    def __repr__(self) -> str:
        return self.name.upper()


TRACE: Given[Trace] = Given("trace", Trace)
OPTS: Given[Options] = Given("opts", Options)
SAY: Given[Say] = Given("say", Say)


@dataclass(frozen=True)
class Section:
    """One declared section: make(*values of needs) -> its value (or, with `provides`, a NamedTuple of several).
    needs, after: producers (functions, fields of a NamedTuple they make) or Given values; after: to run after
    without reading them; part: the JSON key of the Part it makes (None: a value the sections share); background: it
    starts background reads; json_at, tables_at: a Part's place in the JSON and among the tables (None: after the
    Parts that declare one); provides: the NamedTuple it returns, one value per field."""
    make: Callable
    needs: tuple[object, ...] = ()
    part: str | None = None
    after: tuple[object, ...] = ()
    background: bool = False
    json_at: int | None = None
    tables_at: int | None = None
    provides: type | None = None

    @property
    def name(self) -> str:
        """For messages and ties: a Part's key, or the producer's name."""
        return self.part or self.make.__name__

    @property
    def made(self) -> tuple[object, ...]:
        """The values it makes, each by its producer: the function, or each field of the NamedTuple it returns."""
        if self.provides is None:
            return (self.make,)
        return tuple(getattr(self.provides, f) for f in self.provides._fields)  # type: ignore[attr-defined]


REGISTRY: dict[Callable, Section] = {}
Needs = tuple[object, ...] | Callable[[], tuple[object, ...]]
_LATER: dict[Callable, Callable[[], Section]] = {}  # declarations whose needs are read once every module is imported


def declare(make: Callable, needs: Needs = (), *, part: str | None = None, after: Needs = (),
            background: bool = False, json_at: int | None = None, tables_at: int | None = None,
            provides: type | None = None) -> None:
    """Declare the section that function makes, registered under the function itself. needs, after: a tuple, or a
    lambda returning one where they come from other modules of sections/ (read by declared(), once every module is
    imported: the modules import each other's helpers, so a producer elsewhere may not exist yet while this module
    runs)."""
    def section() -> Section:
        return Section(make, _read(needs), part, _read(after), background, json_at, tables_at, provides)
    if callable(needs) or callable(after):
        _LATER[make] = section
    else:
        add(section())


def _read(needs: Needs) -> tuple[object, ...]:
    return tuple(needs() if callable(needs) else needs)


def add(section: Section) -> Section:
    """Register a section: its function takes one parameter per need; a producer declared twice, or a Part's key
    taken twice, is an error."""
    params = inspect.signature(section.make).parameters.values()
    if not any(p.kind == p.VAR_POSITIONAL for p in params) and len(params) != len(section.needs):
        raise ValueError(f"section {section.name!r} takes {len(params)} values but needs {len(section.needs)}")
    made = set(section.made)
    clash = [s.name for s in REGISTRY.values() if made & set(s.made) or (section.part and s.part == section.part)]
    if clash:
        raise ValueError(f"section {section.name!r}: already provided by {clash}")
    REGISTRY[section.make] = section
    return section


def remove(make: Callable) -> None:
    """Unregister the section that function makes (tests' toy sections)."""
    REGISTRY.pop(make, None)
    _LATER.pop(make, None)


def declared() -> list[Section]:
    """Every declared section: each module of this package is imported, so that its declarations have run, and the
    needs declared as lambdas are read."""
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{info.name}")
    while _LATER:
        add(_LATER.pop(next(iter(_LATER)))())
    return list(REGISTRY.values())


def section_keys() -> tuple[str, ...]:
    """The Parts' keys in the JSON's order (json_at; the Parts without one after, by key)."""
    return _ordered(lambda s: s.json_at)


def table_keys() -> tuple[str, ...]:
    """The Parts' keys in their tables' order (tables_at; the Parts without one after, by key)."""
    return _ordered(lambda s: s.tables_at)


def _ordered(at: Callable[[Section], int | None]) -> tuple[str, ...]:
    found = [s for s in declared() if s.part]
    return tuple(s.name for s in sorted(found, key=lambda s: (at(s) is None, at(s) or 0, s.name)))
