"""The `code` section: the lines of the program behind the GPU's idle time and the copies, from the Python stacks
sampled beside the trace (load/python_stacks.py), with what each line's work is for (its role, sections/roles.py).

Each sample of a launching thread stands for a stretch of time; the GPU idle time inside that stretch is given to the
sample's line, under the cause the idle attribution gave that gap (sections/idle.py: a long gap's dominant cause; the
short gaps are `launch`), and the time of each copy's CUDA call under its direction. The line is the innermost frame
of the program's own code (not a library's, not Python's); the path is how the loop's line reached it. Without a
launching thread (a CPU-only capture), the main thread's time is given to its lines, idle or not."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsys_transfer.analysis.common.intervals import Coverage, union
from nsys_transfer.analysis.common.schema import Part
from nsys_transfer.analysis.load import kineto_stacks, python_stacks
from nsys_transfer.analysis.load.frames import pid_of
from nsys_transfer.analysis.load.python_stacks import Frame, PythonStacks, place_of
from nsys_transfer.analysis.sections import roles
from nsys_transfer.analysis.sections.base import declare
from nsys_transfer.analysis.sections.gap_sides import GapSides

PROFILER_ROLE = roles.PROFILER
TOP = 3            # lines kept per cause
PATH_STEPS = 6     # frames shown between the loop's line and the work
SHORT_GAPS = "launch"
GROWTH_VISITS = 6  # visits needed to call a line's cost growing


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


@dataclass
class CodeLines:
    """The section's typed value: the lines behind each idle cause and each copy direction, the lines of a CPU-only
    capture, and where the stacks came from (or why there are none)."""
    by_cause: dict[str, list[CodeSite]] = field(default_factory=dict)
    by_copy: dict[str, list[CodeSite]] = field(default_factory=dict)
    cpu: list[CodeSite] = field(default_factory=list)
    source: str | None = None
    missing: str | None = None
    stacks: PythonStacks | None = None  # the samples behind the lines, for the replay's work at a line (not in the JSON)

    def places(self, stack: int) -> tuple[str | None, str | None, str]:
        """A stack's (the loop's line, the innermost line of the program, role): places as `main.py:31`, None where
        the stack holds no line of the program."""
        info = self._sites().of(stack)
        if info.leaf < 0:
            return None, None, info.role
        leaf = self.stacks.frames[info.leaf].place
        return (info.path[0].split("  ")[0] if info.path else leaf), leaf, info.role

    def _sites(self) -> "_Sites":
        sites = self.__dict__.get("_sites_cache")
        if sites is None:
            sites = self.__dict__["_sites_cache"] = _Sites(self.stacks)
        return sites

    def sites(self, causes, roles=None) -> list[CodeSite]:
        """The lines of these causes (idle causes or copy directions), of these roles where given, costliest first."""
        found = [s for c in causes for s in self.by_cause.get(c, []) + self.by_copy.get(c, [])
                 if roles is None or s.role in roles]
        return sorted(found, key=lambda s: -s.ns)

    def top(self, causes, roles=None) -> CodeSite | None:
        """The costliest line of the role that holds the most of these causes' time (two lines that gather and
        copy one input outweigh one that runs the model), of these roles where given."""
        found = self.sites(causes, roles)
        if roles is None:  # the profiler's own work (prof.step()) is the capture's cost: never the program's line
            found = [site for site in found if site.role != PROFILER_ROLE]
        if not found:
            return None
        by_role: dict[str, int] = {}
        for site in found:
            by_role[site.role] = by_role.get(site.role, 0) + site.ns
        role = max(by_role, key=lambda r: by_role[r])
        return next(site for site in found if site.role == role)

    def summary(self) -> dict:
        """The section's JSON."""
        return {"source": self.source, "missing": self.missing,
                "idle": {c: [s.as_dict() for s in v] for c, v in self.by_cause.items()},
                "copies": {c: [s.as_dict() for s in v] for c, v in self.by_copy.items()},
                "cpu": [s.as_dict() for s in self.cpu]}


def _package(file: str) -> str:
    m = re.search(r"/(?:site|dist)-packages/([A-Za-z0-9_]+)", file)
    return m.group(1) if m else "python"


def label(frame: Frame) -> str:
    """A frame as a person names it: `Images.__getitem__ (main.py:17)`, `_BaseDataLoaderIter.__next__ (torch)`."""
    where = frame.place if frame.in_program else _package(frame.file)
    return f"{frame.function} ({where})"


@dataclass(frozen=True)
class _Stack:
    leaf: int            # the innermost user frame (index into frames), -1 when the stack has none
    path: tuple[str, ...]
    role: str


def _stack_info(stack: tuple[int, ...], frames: list[Frame]) -> _Stack:
    user = [i for i, f in enumerate(stack) if frames[f].in_program]
    if not user:
        return _Stack(-1, (), roles.role_of([frames[f] for f in stack], None))
    leaf = user[-1]
    # the path starts at the loop's line: the program's frame that calls into a library first, or, where the work is
    # the program's own functions all the way, the caller of the innermost (`postprocess(d, l)` -> its line)
    first_lib = next((i for i, f in enumerate(stack) if i > user[0] and not frames[f].in_program), len(stack))
    callers = [i for i in user if i < first_lib and frames[stack[i]].function != "<module>"]
    loop = callers[-2] if len(callers) >= 2 and callers[-1] == leaf else (callers[-1] if callers else leaf)
    shown, prev_user = [], True
    for i in range(loop, len(stack)):
        f = frames[stack[i]]
        if f.in_program or prev_user or i == len(stack) - 1:  # user frames, each library entry, and the innermost
            shown.append(label(f) if i != loop else f"{f.place}  {f.code}")
        prev_user = f.in_program
    if len(shown) > PATH_STEPS:
        shown = [*shown[:PATH_STEPS - 1], "...", shown[-1]]
    leaf_frame = frames[stack[leaf]]
    return _Stack(stack[leaf], tuple(shown) if loop != leaf or len(stack) > leaf + 1 else (),
                  roles.role_of([frames[f] for f in stack], leaf_frame))


class _Sites:
    """Per-stack facts, made once per distinct stack."""

    def __init__(self, stacks: PythonStacks):
        self.stacks = stacks
        self.info: dict[int, _Stack] = {}

    def of(self, stack: int) -> _Stack:
        got = self.info.get(stack)
        if got is None:
            got = self.info[stack] = _stack_info(self.stacks.stacks[stack], self.stacks.frames)
        return got

    def rank(self, samples: pd.DataFrame, ns: np.ndarray, gaps: GapSides | None = None) -> list[CodeSite]:
        """The TOP lines by the time ns (one value per sample) the samples give them; gaps: the GPU's idle gaps this
        time lies in, one a step: a line's share of each says whether its cost grows, and, for work of no role of its
        own, what the copies around its gaps say it is for."""
        keep = ns > 0
        if not keep.any():
            return []
        s, ns = samples[keep], ns[keep]
        info = [self.of(int(k)) for k in s["stack"].to_numpy()]
        leaf = np.array([i.leaf for i in info])
        df = pd.DataFrame({"leaf": leaf, "ns": ns, "i": np.arange(len(info))})
        df = df[df["leaf"] >= 0]
        total = float(ns.sum())
        out = []
        for fid, g in df.groupby("leaf")["ns"].sum().sort_values(ascending=False).head(TOP).items():
            rows = df.index[df["leaf"] == fid]
            mine = [info[i] for i in df.loc[rows, "i"]]
            weights = ns[df.loc[rows, "i"].to_numpy()]
            best = max(range(len(mine)), key=lambda k: weights[k])  # the path the most time took
            role = pd.Series(weights, index=[m.role for m in mine]).groupby(level=0).sum().idxmax()
            f = self.stacks.frames[int(fid)]
            mine_rows = s.iloc[df.loc[rows, "i"].to_numpy()]
            visits, growth = _visits(mine_rows, ns[df.loc[rows, "i"].to_numpy()], self.stacks.period_ns)
            if gaps is not None:
                per = gaps.covered_ms(mine_rows)
                growth = growth or _growth(per[per > 0])
                role = gaps.role(per) if role == roles.COMPUTE else role
            threads = len(mine_rows[["pid", "tid"]].drop_duplicates())
            out.append(CodeSite(f.file, f.line, f.function, f.code, mine[best].path, str(role), int(g), g / total,
                                visits, growth, threads))
        return out


def _visits(samples: pd.DataFrame, ns: np.ndarray, period_ns: int) -> tuple[int, tuple[float, float] | None]:
    """How many times the thread came to the line (runs of consecutive samples there), and, where the time a visit
    takes grows through the run, the ms of a visit at the start and at the end. Where the line holds the thread so
    that its visits run together, its calls that hold the GIL (a sample standing for more than 1.5 periods each) are
    the visits instead."""
    start, end = samples["start_ns"].to_numpy(), samples["end_ns"].to_numpy()
    order = np.argsort(start, kind="stable")
    start, end, ns = start[order], end[order], ns[order]
    new = np.r_[True, start[1:] > end[:-1] + 1]  # a gap between samples: another visit
    per = np.bincount(np.cumsum(new) - 1, weights=ns) / 1e6
    visits = int(per.size)
    if per.size < GROWTH_VISITS:
        per = ns[(end - start) > 1.5 * period_ns] / 1e6
    return visits, _growth(per)


def _growth(per: np.ndarray) -> tuple[float, float] | None:
    """(ms at the start, ms at the end) of a straight line fitted to the values in time order, where the end is at
    least 1.5 x the start and the values follow the line (correlation >= 0.4); None otherwise."""
    if per.size < GROWTH_VISITS or per.std() == 0:
        return None
    x = np.arange(per.size, dtype=float)
    slope, intercept = np.polyfit(x, per, 1)
    start, end = float(intercept), float(intercept + slope * x[-1])
    r = float(np.corrcoef(x, per)[0, 1])
    return (max(start, 0.0), end) if end >= 1.5 * max(start, 1e-3) and r >= 0.4 else None


def _thread_samples(stacks: PythonStacks, tids) -> pd.DataFrame:
    s = stacks.samples
    keys = {(int(pid_of(t)), int(t) & 0xFFFFFF) for t in tids}
    mask = [(p, t) in keys for p, t in zip(s["pid"].to_numpy(), s["tid"].to_numpy())]
    return s[np.asarray(mask, dtype=bool)] if len(s) else s


def _main_thread_samples(stacks: PythonStacks) -> pd.DataFrame:
    """The first process's main thread (the program the command started)."""
    s = stacks.samples
    if s.empty:
        return s
    first = int(s.loc[s["start_ns"].idxmin(), "pid"])
    return s[(s["pid"] == first) & (s["tid"] == first)]


def _clip(samples: pd.DataFrame, window) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = window
    return np.clip(samples["start_ns"].to_numpy(), lo, hi), np.clip(samples["end_ns"].to_numpy(), lo, hi)


def _idle_lines(sites: _Sites, samples: pd.DataFrame, window, busy, gaps: GapSides, cause_of) -> dict:
    """{cause: lines} for the GPU's idle time in the window, each instant's shared among the launching threads
    sampled then (two threads do not give one idle millisecond twice)."""
    s, e = _clip(samples, window)
    idle = (e - s) - busy.within(s, e)
    sharing = samples.groupby(["pid", "end_ns"])["tid"].transform("size").to_numpy(np.int64)
    idle = idle // sharing
    out, long_idle = {}, np.zeros(len(samples), np.int64)
    if gaps.start.size:
        causes = np.array([c for c, _ in cause_of(list(zip(gaps.start, gaps.end)))], dtype=object)
        for cause in dict.fromkeys(causes):
            mine = gaps.subset(causes == cause)
            ns = Coverage(*union(mine.start, mine.end)).within(s, e) // sharing
            long_idle += ns
            out.setdefault(str(cause), []).extend(sites.rank(samples, ns, mine))
    short = np.maximum(idle - long_idle, 0)
    out.setdefault(SHORT_GAPS, []).extend(sites.rank(samples, short))
    return {c: sorted(v, key=lambda x: -x.ns)[:TOP] for c, v in out.items() if v}


def _copy_lines(sites: _Sites, samples: pd.DataFrame, window, copies: pd.DataFrame) -> dict:
    """{direction: lines} for the time the launching threads spent in each direction's copy calls."""
    if copies is None or copies.empty or "api_start_ns" not in copies:
        return {}
    s, e = _clip(samples, window)
    out = {}
    for kind, c in copies.groupby("copy_kind"):
        # calls shorter than half a period fall between samples: a sample's line would be a neighbour's
        ok = (c["api_start_ns"].to_numpy() >= 0) & (c["api_end_ns"].to_numpy() - c["api_start_ns"].to_numpy() >=
                                                     sites.stacks.period_ns // 2)
        cs, ce = union(c["api_start_ns"].to_numpy()[ok], c["api_end_ns"].to_numpy()[ok])
        lines = sites.rank(samples, Coverage(cs, ce).within(s, e))
        if lines:
            out[str(kind)] = lines
    return out


def code_lines(trace, window, passed, tids: dict, gaps: pd.DataFrame, idle_part, copies) -> CodeLines:
    """The section's value for one trace."""
    got = _stacks(trace)
    if isinstance(got, CodeLines):
        return got
    stacks, path = got, got.path
    pids = set(trace.host.threads["pid"].astype(int)) if len(trace.host.threads) else set()
    stacks = stacks.of_processes(pids) if pids else stacks
    if stacks.samples.empty:
        return CodeLines(missing=f"{path.name} holds no sample of this trace's processes: it is another capture's; "
                                 "trace the program again with `nsys-transfer run`")
    sites = _Sites(stacks)
    source = (f"{path.name}: its Python calls (torch.profiler, with_stack=True), read every {stacks.period_ns / 1e6:g} ms"
              + ("" if kineto_stacks.has_call_sites(trace) else
                 "; this PyTorch records no call sites, so a call's line is named by its function (main.py, in run())")
              if trace.profiler == "torch.profiler" else f"{path.name}: Python stacks every {stacks.period_ns / 1e6:g} ms") + \
        (" (the file is cut short: the samples after the cut are missing)" if stacks.cut else "")
    if passed is None or not tids.get("all") or window is None:
        main = _main_thread_samples(stacks)
        ns = (main["end_ns"] - main["start_ns"]).to_numpy()
        return CodeLines(cpu=sites.rank(main, ns), source=source)
    mine = _thread_samples(stacks, tids["all"])
    if mine.empty:
        return CodeLines(source=source, missing=f"{path.name} has no samples of the launching threads")
    dev = next(iter(passed.busy_by_device), None)
    cause_of = (lambda spans: idle_part.gap_causes(dev, spans)) if idle_part is not None else \
        (lambda spans: [("cpu", None)] * len(spans))
    in_window = gaps[(gaps["start_ns"] < window[1]) & (gaps["end_ns"] > window[0])] if len(gaps) else gaps
    sides = GapSides.of(in_window, copies)
    return CodeLines(by_cause=_idle_lines(sites, mine, window, passed.busy, sides, cause_of),
                     by_copy=_copy_lines(sites, mine, window, copies), source=source, stacks=stacks)


def _stacks(trace) -> PythonStacks | CodeLines:
    """The trace's Python stacks: a torch.profiler trace's own calls (load/kineto_stacks.py), else the stacks file
    beside an nsys trace; CodeLines saying why there are none otherwise."""
    if trace.profiler == "torch.profiler":
        try:
            return kineto_stacks.read(trace)
        except ValueError as e:
            return CodeLines(missing=str(e))
    path = python_stacks.beside(trace.source)
    if path is None:
        return CodeLines(missing=f"no Python stacks beside this trace, so no finding names its line; "
                                 f"{python_stacks.CAPTURE_HINT}")
    if trace.session_start_utc_ns is None:
        return CodeLines(missing=f"{path.name}: the trace has no session start to put the stacks on its clock")
    try:
        return python_stacks.read(path, trace.session_start_utc_ns)
    except ValueError as e:
        return CodeLines(missing=str(e))


@declare("code_lines", needs=("trace", "window_ns", "passed", "tids", "gaps_table", "idle_part", "memcpy", "say"))
def _code_lines(trace, window_ns, passed, tids: dict, gaps_table: pd.DataFrame, idle_part, memcpy: Part,
                say) -> CodeLines:
    say("naming the program's lines")
    copies = memcpy.tables.get("memcpy") if memcpy is not None else None
    return code_lines(trace, window_ns, passed, tids, gaps_table, idle_part, copies)


@declare("code", needs=("code_lines",), part=True, json_at=90)
def _code(code_lines: CodeLines) -> Part:
    return Part(code_lines.summary(), {})
