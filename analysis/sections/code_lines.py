"""The `code` section: the lines of the program behind the GPU's idle time and the copies, from the Python stacks
sampled beside the trace (load/python_stacks.py), with what each line's work is for (its role, sections/roles.py).

Each sample of a launching thread stands for a stretch of time; the GPU idle time inside that stretch is given to the
sample's line, under the cause the idle attribution gave that gap (sections/idle.py: a long gap's dominant cause; the
short gaps are `launch`), and the time of each copy's CUDA call under its direction. The line is the innermost frame
of the program's own code (not a library's, not Python's); the path is how the loop's line reached it (line_paths.py).
Without a launching thread (a CPU-only capture), the main thread's time is given to its lines, idle or not."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from ..common.intervals import Coverage, union
from ..common.schema import Part
from ..load import kineto_stacks, python_stacks
from ..load.frames import pid_of
from ..load.python_stacks import PythonStacks
from ..load.trace import Trace
from . import copies, gpu, idle_summary, launchers, machine, roles, setup_lines, window
from .base import SAY, TRACE, Say, declare
from .code_sites import CodePart, CodeSite, SetupLines
from .gap_sides import GapSides
from .line_paths import (LoaderWork, StackPath, heaviest_path, loader_work, shortened,
                         stack_path, through_loader)

PROFILER_ROLE = roles.PROFILER
TOP = 3            # lines kept per cause
SETUP_NOTED = 0.01  # a CPU-only capture's set-up below this share of its loop's time is not said apart
SHORT_GAPS = "launch"
GROWTH_VISITS = 6  # visits needed to call a line's cost growing


@dataclass
class CodeLines:
    """The section's typed value: the lines behind each idle cause and each copy direction, the lines of a CPU-only
    capture's loop and of its set-up apart, and where the stacks came from (or why there are none)."""
    by_cause: dict[str, list[CodeSite]] = field(default_factory=dict)
    by_copy: dict[str, list[CodeSite]] = field(default_factory=dict)
    cpu: list[CodeSite] = field(default_factory=list)
    source: str | None = None
    missing: str | None = None
    setup: SetupLines | None = None
    cpu_ns: int = 0  # the loop's sampled time on the main thread, of which `cpu` gives the top lines (a CPU capture)
    stacks: PythonStacks | None = None  # the samples behind the lines, for the replay's work at a line (not in the JSON)
    cores: int | None = None  # the capture machine's CPU cores, which cap the workers advised (not in the JSON)

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

    def part(self) -> CodePart:
        """The `code` section's value: its lines as the JSON writes them (CodeSite.as_written)."""
        def written(sites) -> tuple[CodeSite, ...]:
            return tuple(s.as_written() for s in sites)
        return CodePart(source=self.source, missing=self.missing,
                        idle={c: written(v) for c, v in self.by_cause.items()},
                        copies={c: written(v) for c, v in self.by_copy.items()},
                        cpu=written(self.cpu), cpu_ns=self.cpu_ns,
                        setup=replace(self.setup, lines=written(self.setup.lines)) if self.setup else None)


class _Sites:
    """Per-stack facts, made once per distinct stack."""

    def __init__(self, stacks: PythonStacks):
        self.stacks = stacks
        self.info: dict[int, StackPath] = {}

    def of(self, stack: int) -> StackPath:
        got = self.info.get(stack)
        if got is None:
            got = self.info[stack] = stack_path(self.stacks.stacks[stack], self.stacks.frames)
        return got

    def place_of(self, frame: int) -> int:
        """One frame for each line of the program: a line's frames of several functions (a comprehension on it is a
        function of its own, `<listcomp>`, beside the line's `<module>` or `main`) are one line to the reader. A frame
        whose line is unknown (0: a torch.profiler trace without call sites, each call its own frame) stays its own."""
        if frame < 0 or self.stacks.frames[frame].line <= 0:
            return frame
        places = self.__dict__.setdefault("_places", {})
        f = self.stacks.frames[frame]
        return places.setdefault((f.file, f.line), frame)

    def rank(self, samples: pd.DataFrame, ns: np.ndarray, gaps: GapSides | None = None) -> list[CodeSite]:
        """The TOP lines by the time ns (one value per sample) the samples give them; gaps: the GPU's idle gaps this
        time lies in, one a step: a line's share of each says whether its cost grows, and, for work of no role of its
        own, what the copies around its gaps say it is for."""
        keep = ns > 0
        if not keep.any():
            return []
        s, ns = samples[keep], ns[keep]
        info = [self.of(int(k)) for k in s["stack"].to_numpy()]
        leaf = np.array([self.place_of(i.leaf) for i in info])
        df = pd.DataFrame({"leaf": leaf, "ns": ns, "i": np.arange(len(info))})
        df = df[df["leaf"] >= 0]
        total = float(ns.sum())
        out = []
        for fid, g in df.groupby("leaf")["ns"].sum().sort_values(ascending=False).head(TOP).items():
            rows = df.index[df["leaf"] == fid]
            mine = [info[i] for i in df.loc[rows, "i"]]
            weights = ns[df.loc[rows, "i"].to_numpy()]
            path = heaviest_path([m.path for m in mine], weights)
            role = pd.Series(weights, index=[m.role for m in mine]).groupby(level=0).sum().idxmax()
            f = self.stacks.frames[int(fid)]
            mine_rows = s.iloc[df.loc[rows, "i"].to_numpy()]
            visits, growth = _visits(mine_rows, ns[df.loc[rows, "i"].to_numpy()], self.stacks.period_ns)
            if gaps is not None:
                per = gaps.covered_ms(mine_rows)
                growth = growth or _growth(per[per > 0])
                role = gaps.role(per) if role == roles.COMPUTE else role
            threads = len(mine_rows[["pid", "tid"]].drop_duplicates())
            out.append(CodeSite(f.file, f.line, f.function, f.code, shortened(through_loader(path, self.loader)),
                                str(role), int(g), g / total, visits, growth, threads))
        return out

    @cached_property
    def loader(self) -> LoaderWork | None:
        """What the program's DataLoader worker processes spent their time on (line_paths.loader_work), read once."""
        return loader_work(self.stacks)


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


def code_lines(trace, window, passed, tids: dict, gaps: pd.DataFrame, idle_part, copies,
               step_rows: pd.DataFrame | None = None) -> CodeLines:
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
        return _cpu_lines(sites, stacks, source, step_rows)
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


def _cpu_lines(sites: _Sites, stacks: PythonStacks, source: str, step_rows: pd.DataFrame | None) -> CodeLines:
    """A capture without GPU work: the main thread's time by line, the loop's apart from the set-up before it (the
    first step's start where the program marks steps, else where its imports and model construction end:
    setup_lines.setup_end), which is paid once a run and would otherwise top a short run's lines."""
    main = _main_thread_samples(stacks)
    kind = setup_lines.kinds(stacks.frames, stacks.stacks)
    start, until = loop_start(main, kind, step_rows)
    loop = main if start is None else main[main["end_ns"].to_numpy() > start]
    lo = start if start is not None else 0
    ns = (loop["end_ns"].to_numpy() - np.maximum(loop["start_ns"].to_numpy(), lo)).clip(0)
    out = CodeLines(cpu=sites.rank(loop, ns), source=source, cpu_ns=int(ns.sum()))
    if start is None:
        return out
    before = main[main["start_ns"].to_numpy() < start]
    before = before[~setup_lines.in_loop(before["stack"].to_numpy(), loop, ns, stacks.stacks, stacks.frames,
                                         lambda k: sites.of(k).loop)]  # the loop's own work before its start
    setup_ns = (np.minimum(before["end_ns"].to_numpy(), start) - before["start_ns"].to_numpy()).clip(0)
    if setup_ns.sum() < SETUP_NOTED * max(out.cpu_ns, 1):  # nothing of note: a torch.profiler trace records no set-up
        return out
    what = [kind[k] or "the program's own" for k in before["stack"].to_numpy()]
    by_kind = pd.Series(setup_ns, index=what, dtype="int64").groupby(level=0).sum().sort_values(ascending=False)
    out.setup = SetupLines(int(setup_ns.sum()), int(start), until, {str(k): int(v) for k, v in by_kind.items()},
                           tuple(sites.rank(before, setup_ns)))
    return out


def loop_start(main: pd.DataFrame, kind: np.ndarray, step_rows: pd.DataFrame | None) -> tuple[int | None, str]:
    """Where a CPU-only program's loop starts on its main thread (trace ns), and what says so: its first step's start,
    else the end of its set-up (imports, model construction) read from the stacks; (None, "") when neither is known."""
    if step_rows is not None and len(step_rows):
        return int(step_rows["start_ns"].min()), "the first step's start"
    end = setup_lines.setup_end(main, kind)
    return (end, "the end of its imports and model construction") if end is not None else (None, "")


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


def program_lines(trace: Trace, window_ns: tuple[int, int] | None, passed: gpu.DevicePass | None, tids: dict,
                  gaps_table: pd.DataFrame, idle_part: idle_summary.IdlePart | None, memcpy: Part,
                  step_rows: pd.DataFrame, say: Say) -> CodeLines:
    """The program's lines (code_lines()) behind the GPU's idle time and the copies, with the machine's cores."""
    say("naming the program's lines")
    copies = memcpy.tables.get("memcpy") if memcpy is not None else None
    out = code_lines(trace, window_ns, passed, tids, gaps_table, idle_part, copies, step_rows)
    out.cores = machine.cpu_cores(trace)
    return out


declare(program_lines, needs=lambda: (TRACE, window.window_ns, gpu.PassedOver.passed, launchers.tids, gpu.gaps_table,
                                      idle_summary.idle_part, copies.memcpy_part, window.step_rows, SAY))


def _code(code_lines: CodeLines) -> Part:
    return Part(code_lines.part(), {})


declare(_code, needs=(program_lines,), part="code", json_at=90)
