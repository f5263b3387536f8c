"""The program's lines as the `code` section writes them: a line and the time given to it (CodeSite), a CPU-only
capture's set-up before its loop (SetupLines), and the section's object (CodePart). sections/code_lines.py finds them."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..common.typed_json import known_keys, to_json
from ..load.python_stacks import place_of

SITE_KEYS = ("file", "line", "function", "code", "path", "role", "ns", "share", "visits", "threads", "growth_ms")


@dataclass(frozen=True)
class CodeSite:
    """One line of the program and the time given to it: file, line, function and source text; path: how the loop's
    line reaches the work (labels, outermost first); role: what the work is for (roles.ROLES); ns: the time;
    share: of the time the samples give to any line for this cause; growth: (ms a visit at the start, at the end)
    where the line's cost grows with the run, else None; threads: how many threads were sampled at it."""
    file: str
    line: int
    function: str
    code: str
    path: tuple[str, ...]
    role: str
    ns: int
    share: float
    visits: int = 0
    growth: tuple[float, float] | None = None
    threads: int = 1  # how many threads' samples were at the line (a server's request threads: several)

    @property
    def place(self) -> str:
        """`main.py:31`."""
        return place_of(self.file, self.line, self.function)

    def as_dict(self) -> dict:
        """The site as JSON."""
        return {"file": self.file, "line": self.line, "function": self.function, "code": self.code,
                "path": list(self.path), "role": self.role, "ns": self.ns, "share": round(self.share, 3),
                "visits": self.visits, "threads": self.threads,
                "growth_ms": None if self.growth is None else [round(self.growth[0], 2), round(self.growth[1], 2)]}

    @classmethod
    def of(cls, d: dict) -> "CodeSite":
        """A site from its JSON (as_dict)."""
        g = d.get("growth_ms")
        return cls(d["file"], d["line"], d["function"], d["code"], tuple(d["path"]), d["role"], d["ns"], d["share"],
                   d.get("visits", 0), None if g is None else (float(g[0]), float(g[1])), d.get("threads", 1))

    def as_written(self) -> "CodeSite":
        """The site as its JSON gives it back (of(as_dict())): the share and growth rounded, the path a tuple; what
        the document holds, so that the document made and the document read are one."""
        g = self.growth
        return replace(self, path=tuple(self.path), share=round(self.share, 3),
                       growth=None if g is None else (round(g[0], 2), round(g[1], 2)))

    __to_json__ = as_dict  # its JSON form is its own (growth as growth_ms, the share rounded): common/typed_json.py

    @classmethod
    def __from_json__(cls, d: dict) -> "CodeSite":
        return cls.of(known_keys(d, SITE_KEYS, "CodeSite"))


@dataclass(frozen=True)
class SetupLines:
    """A CPU-only capture's set-up on the main thread, before its loop (sections/setup_lines.py): its sampled time,
    where it ends (trace ns) and what ended it, its time by kind (imports, model construction, the program's own),
    and its costliest lines."""
    ns: int
    until_ns: int
    until: str
    by_kind: dict[str, int]
    lines: tuple[CodeSite, ...]

    def as_dict(self) -> dict:
        """The set-up as JSON."""
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class CodePart:
    """The `code` section: the program's lines behind the idle time (by cause) and the copies (by direction), a
    CPU-only capture's loop and its set-up, where the stacks came from, or why there are none."""
    source: str | None
    missing: str | None
    idle: dict[str, tuple[CodeSite, ...]]
    copies: dict[str, tuple[CodeSite, ...]]
    cpu: tuple[CodeSite, ...]
    cpu_ns: int
    setup: SetupLines | None
