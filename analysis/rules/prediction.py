"""What each fix will buy, said before it is made: every high and medium finding's fix replayed on the trace's own
timeline (analysis/replay), as a speed-up range of the steady state and of the whole loop, with the limit that binds
next, what the figures assume, and the findings that share the gain. Then the findings ranked by what their fixes buy.

    finding --(rule.fix / the line's role: rules/role_fixes.py)--> Fix (the most and least it buys, as Edits)
    replay(timeline, edit) for each end, with and without nsys's own cost taken out   -> the range
    the GPU's own work (its kernels) over the same span                               -> the ceiling, never exceeded

The range's two ends: the fix's high and low Edits, each replayed as captured and at the program's unprofiled pace
(nsys's cost of each CUDA call, PROFILER_CALL_NS, and CPU_SHARE_UNPROFILED of the thread's own work taken out: what the
program's own clock does not pay). A prediction the trace cannot support says why instead (NoFigure)."""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass, replace

from ..common import defaults
from ..common.typed_json import known_keys, to_json
from ..replay.edits import NONE, Edit
from ..replay.engine import Replayed, replay
from ..replay.fixes import Fix, NoFigure
from ..sections.timeline import Timeline

PREDICTED = ("high", "medium", "low")  # the severities that get a prediction (every costed finding)
# nsys's cost of each traced CUDA call, and the share of the thread's own work left unprofiled: per_sample_metrics (a
# loop of 3,800 CUDA calls an iteration) ran at 44.3 ms an iteration captured and 29.3-31.6 ms unprofiled, its fix at
# 15.6 and 12.7-13.6 (H200/H100, docs/benchmarks.md): 2 us a call and 90% of the CPU work fit both. Where nsys also
# sampled the CPU, its backtraces slow CPU work more: audio_mel's numpy ran at 93 ms an iteration captured so, 58 ms
# unprofiled (0.62); image_loop_fixed at 0.66 of its unprofiled pace (issue 37)
PROFILER_CALL_NS = defaults.NSYS_CALL_COST_NS
CPU_SHARE_UNPROFILED = 0.9
CPU_SHARE_UNPROFILED_SAMPLED = 0.65
# the host work a CUDA call carries beyond its own timestamps in a capture (torch's dispatch to CUDA and nsys's
# hooks), which goes with a call a fix removes: the same pair's per-element reads, 2.7 us a call
CALL_HOST_NS = 2_700
GPU_SHARE_LOW = 0.9  # a loop the GPU sets the pace of keeps it this busy at the low end (launch gaps between kernels)
MIN_ITERATIONS = 2.0  # fewer steady iterations than this replayed: too few to say what a fix buys
PREDICTION_KEYS = ("steady_x", "whole_x", "next_limit", "ceiling_x", "assumptions", "shares_with", "why_not", "parts",
                   "on_gpu")  # a prediction's JSON (Prediction.as_dict)
SHARED = 1.25  # two findings share their gain where their gains added exceed their joint gain this much


@dataclass(frozen=True)
class Prediction:
    """What fixing a finding buys: speed-up ranges (low, high) of the steady state and of the whole loop (warm-up
    iterations included; None where the trace does not show them), what binds next and how far the GPU's own work
    (its kernels) then is (x: the further speed-up it leaves), what the figures assume, the findings whose fixes share
    this one's gain; or, instead of figures, why the trace cannot say (why_not)."""
    steady: tuple[float, float] | None = None
    whole: tuple[float, float] | None = None
    next_limit: str | None = None
    ceiling_x: float | None = None
    assumptions: tuple[str, ...] = ()
    shares_with: tuple[str, ...] = ()
    why_not: str | None = None
    parts: tuple[tuple[str, "Prediction"], ...] = ()  # a fix of several parts (one job): what each alone buys
    on_gpu: "Prediction | None" = None  # the advice's other route: the work done on the GPU (its steady and whole)

    @property
    def gain(self) -> float:
        """The midpoint of the steady range (geometric; the whole loop's where the trace shows no steady state), what
        the ranking reads; 1 without figures."""
        r = self.steady or self.whole
        return (r[0] * r[1]) ** 0.5 if r else 1.0

    @property
    def said(self) -> bool:
        """Whether it gives figures."""
        return bool(self.steady or self.whole)

    def __str__(self) -> str:
        """The prediction as the text prints it under its finding (text())."""
        return text(self)

    def as_dict(self) -> dict:
        """The prediction as JSON (rounded: the text prints from these values, Prediction.of)."""
        r = lambda v: None if v is None else [round(v[0], 2), round(v[1], 2)]  # noqa: E731
        return {"steady_x": r(self.steady), "whole_x": r(self.whole), "next_limit": self.next_limit,
                "ceiling_x": None if self.ceiling_x is None else round(self.ceiling_x, 2),
                "assumptions": list(self.assumptions), "shares_with": list(self.shares_with), "why_not": self.why_not,
                "parts": [{"part": name, **p.as_dict()} for name, p in self.parts],
                "on_gpu": None if self.on_gpu is None else {"steady_x": r(self.on_gpu.steady),
                                                            "whole_x": r(self.on_gpu.whole)}}

    @classmethod
    def of(cls, d: dict) -> "Prediction":
        """A prediction from its JSON (as_dict)."""
        pair = lambda v: None if v is None else (float(v[0]), float(v[1]))  # noqa: E731
        return cls(pair(d.get("steady_x")), pair(d.get("whole_x")), d.get("next_limit"), d.get("ceiling_x"),
                   tuple(d.get("assumptions") or ()), tuple(d.get("shares_with") or ()), d.get("why_not"),
                   tuple((x["part"], cls.of(x)) for x in d.get("parts") or ()),
                   cls.of(d["on_gpu"]) if d.get("on_gpu") else None)

    def as_written(self) -> "Prediction":
        """The prediction as its JSON gives it back (of(as_dict())): rounded as the text prints it, the other route
        its ranges alone; what the document holds, so that the document made and the document read are one."""
        r = lambda v: None if v is None else (round(v[0], 2), round(v[1], 2))  # noqa: E731
        return Prediction(r(self.steady), r(self.whole), self.next_limit,
                          None if self.ceiling_x is None else round(self.ceiling_x, 2), tuple(self.assumptions),
                          tuple(self.shares_with), self.why_not, tuple((n, p.as_written()) for n, p in self.parts),
                          None if self.on_gpu is None else Prediction(r(self.on_gpu.steady), r(self.on_gpu.whole)))

    __to_json__ = as_dict  # its JSON form is its own (the ranges as steady_x and whole_x, rounded): common/typed_json.py

    @classmethod
    def __from_json__(cls, d: dict) -> "Prediction":
        for p in [d, *(d.get("parts") or ())]:
            known_keys(p, PREDICTION_KEYS + (("part",) if p is not d else ()), "Prediction")
        if d.get("on_gpu") is not None:
            known_keys(d["on_gpu"], ("steady_x", "whole_x"), "Prediction.on_gpu")
        return cls.of(d)


def x_range(r: tuple[float, float]) -> str:
    """A speed-up range as text: 1.3-1.5x, 12-18x, or 1.4x where its ends round alike."""
    lo, hi = (f"{v:.1f}" if v < 10 else f"{v:.0f}" for v in r)
    return f"{lo}x" if lo == hi else f"{lo}-{hi}x"


def text(p: Prediction) -> str:
    """The prediction as the text prints it under its finding."""
    if p.why_not:
        return f"what fixing this buys: not said ({p.why_not})"
    parts = [f"{x_range(p.whole)} over the whole loop"] if p.whole else []
    if p.steady:
        parts.append(f"{x_range(p.steady)} in the steady state")
    else:
        parts.append("no steady state apart: the trace shows no repeating iterations")
    nxt = f"next limit: {p.next_limit}"
    if p.ceiling_x and p.ceiling_x > 1.05:
        nxt += f"; the kernels alone take {1 / p.ceiling_x:.0%} of the fixed loop's time"
    shared = f"; shares its gain with {', '.join(p.shares_with)}" if p.shares_with else ""
    alone = "; ".join(f"the {name} alone: {x_range(q.steady or q.whole)}" for name, q in p.parts if q.said)
    best = (p.steady or p.whole)[1]
    g = p.on_gpu
    gpu = f"; the work done on the GPU instead: {_range_of(g)}" if g is not None and g.said and \
        (g.steady or g.whole)[1] > best * 1.05 else ""
    return f"fixing this: {', '.join(parts)} ({nxt}){shared}{gpu}" + (f"; {alone}" if alone else "")


@dataclass(frozen=True)
class Loop:
    """What the whole loop holds besides the steady window: its warm-up iterations (count, ns), from the set-up
    section; the window's own length (ns)."""
    warmup_count: int
    warmup_ns: int
    window_ns: int
    # the trace holds a few of the run's steps, not its whole loop (torch.profiler's schedule records from a step on,
    # after the program's set-up): a start the fix adds, paid once a run, is not set against these steps alone
    part_of_run: bool = False


def why_not(t: Timeline | None, complete: bool) -> str | None:
    """Why no finding of this trace can get figures (None: they can)."""
    if t is None:
        return "the trace holds no CUDA calls of a launching thread in the steady window to replay"
    if not complete:
        return "the capture lost events, so its timeline cannot be replayed as it ran"
    if t.counted and t.iterations < MIN_ITERATIONS:
        return f"only {t.iterations:.1f} steady iterations to replay; capture more steps"
    return None


class Predictor:
    """The replays of one trace: its baseline at each profiler assumption, once, and each fix against it."""

    def __init__(self, t: Timeline, loop: Loop):
        self.t, self.loop = t, loop
        self.cpu_share = CPU_SHARE_UNPROFILED_SAMPLED if t.sampled else CPU_SHARE_UNPROFILED
        self.base = {prof: replay(t, NONE, *self._costs(prof)) for prof in (False, True)}
        self.kernels_ns = _union_ns(t.op_start[t.op_kind == "kernel"], t.op_end[t.op_kind == "kernel"])

    def _costs(self, unprofiled: bool) -> tuple[float, float, float]:
        """(profiler_ns, drop_ns, cpu_share) of the replay: as captured, or at the unprofiled pace."""
        return (PROFILER_CALL_NS, CALL_HOST_NS, self.cpu_share) if unprofiled else (0.0, CALL_HOST_NS, 1.0)

    def _run(self, edit: Edit, unprofiled: bool, low: bool) -> Replayed:
        prof, drop, share = self._costs(unprofiled)
        r = replay(self.t, edit, prof, drop, share)
        if low and r.limit in ("gpu", "copies"):
            return replace(r, duration_ns=max(r.duration_ns, r.gpu_ns / GPU_SHARE_LOW))
        return r

    def predict(self, fix: Fix | NoFigure) -> Prediction:
        """The prediction of one fix."""
        if isinstance(fix, NoFigure):
            return Prediction(why_not=fix.reason)
        runs = {(u, low): self._run(fix.low if low else fix.high, u, low) for u in (False, True) for low in (False, True)}
        ceiling = self.ceiling_x()
        steady = sorted(min(self.base[u].duration_ns / r.duration_ns, ceiling) for (u, _), r in runs.items())
        whole = self._whole(fix, runs)
        if not self.t.counted:  # no iterations found: the window is the loop, warm-up and all; no steady state apart
            whole, steady = (steady[0], steady[-1]), [None]
        best = runs[(True, False)]
        gpu = None
        if fix.on_gpu is not None:  # the other route: its edit at both ends, no workers to start
            route = Fix(fix.on_gpu, fix.on_gpu)
            gpu_runs = {(u, low): self._run(fix.on_gpu, u, low) for u in (False, True) for low in (False, True)}
            ends = sorted(min(self.base[u].duration_ns / r.duration_ns, ceiling) for (u, _), r in gpu_runs.items())
            gw = self._whole(route, gpu_runs)
            gpu = Prediction((ends[0], ends[-1]), gw) if self.t.counted else Prediction(None, (ends[0], ends[-1]))
        return Prediction(None if steady[0] is None else (steady[0], steady[-1]), whole, self._limit(best),
                          self._left(best), fix.assumptions, on_gpu=gpu)

    def ceiling_x(self) -> float:
        """The speed-up at which the span takes only its kernels' time: no prediction goes past it."""
        return max(self.base[False].duration_ns / self.kernels_ns, 1.0) if self.kernels_ns else float("inf")

    def _left(self, r: Replayed) -> float | None:
        """How much faster the fixed loop would be with only its kernels left (None: no kernels replayed)."""
        # at least 1: a replay that moves the work launching some kernels (another thread's, a function's whole
        # body on a torch.profiler trace) can end sooner than the kernels, which still run
        return max(r.duration_ns / self.kernels_ns, 1.0) if self.kernels_ns else None

    def _whole(self, fix: Fix, runs: dict) -> tuple[float, float] | None:
        """The whole loop's range: each iteration of the steady window saves what the replay saved an iteration, plus
        the set-up the fix adds (its workers' start). The warm-up iterations: at the low end as captured and gaining
        nothing; at the high end as long as a steady iteration and gaining as one (a first iteration under nsys pays
        the profiler's cost of module loading and first calls many times over: crop_feature_dump's 1.9 s captured,
        0.4 s unprofiled)."""
        lp, t = self.loop, self.t
        if not lp.window_ns or (lp.part_of_run and fix.setup_ns[1] > 0):
            return None
        captured = self.base[False].duration_ns
        steady_iteration = lp.window_ns / t.window_iterations if t.window_iterations else 0.0
        out = []
        for (u, low), r in runs.items():
            scale = self.base[u].duration_ns / captured if captured else 1.0
            warmup = lp.warmup_ns if low else min(lp.warmup_ns, lp.warmup_count * steady_iteration)
            before = (warmup + lp.window_ns) * scale
            saved = (self.base[u].duration_ns - r.duration_ns) / t.iterations
            gaining = t.window_iterations + (0 if low else lp.warmup_count)
            after = before - saved * gaining + fix.setup_ns[1 if low else 0]
            out.append(min(before / max(after, 1.0), self.ceiling_x()))  # the whole loop no nearer its kernels
        return (min(out), max(out))

    def _limit(self, r: Replayed) -> str:
        """What binds the fixed loop, in words."""
        return {"pace": "the pace of the workers the work moved to", "gpu": "the GPU's work (kernels and copies)",
                "copies": "the GPU's copies", "host": "the launching thread's remaining work",
                "turns": "the launching thread and the GPU taking turns (each waits for the other)"}[r.limit]

    def shared(self, a: Fix, b: Fix) -> bool:
        """Whether two fixes share their gain: the time each saves alone, added, exceeds what both save together by
        SHARED."""
        base = self.base[False].duration_ns
        alone = [base - self._run(f.high, False, False).duration_ns for f in (a, b)]
        both = base - self._run(a.combine(b).high, False, False).duration_ns
        return both > 0 and sum(alone) > SHARED * both


def _union_ns(start: np.ndarray, end: np.ndarray) -> float:
    """The time at least one of the intervals covers: kernels on several streams overlap, and their sum would put the
    GPU's own work above the loop that runs it."""
    if not start.size:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), np.maximum.accumulate(end[order].astype(np.int64))
    starts_new = np.concatenate(([True], s[1:] > e[:-1]))  # an interval past every earlier one's end opens a stretch
    first = np.flatnonzero(starts_new)
    last = np.concatenate((first[1:] - 1, [s.size - 1]))
    return float((e[last] - s[first]).sum())


def rank_note(by_share: list, by_gain: list) -> str | None:
    """One line where the ranking by what the fixes buy leads with another finding than the idle share does."""
    if not by_share or not by_gain or by_share[0] is by_gain[0]:
        return None
    first, was = by_gain[0], by_share[0]
    p, q = first.prediction, was.prediction
    if p is None or not p.said:
        return None
    theirs = (f"its own {_range_of(q)} ({q.next_limit} binds right after it)" if q is not None and q.said
              else f"a gain the trace cannot say ({q.why_not})" if q is not None and q.why_not else "less")
    return (f"{name_of(first)} leads: fixing it buys {_range_of(p)}, though {name_of(was)} holds more of the idle "
            f"time ({was.impact_fraction:.0%}) and its fix buys {theirs}")


def _range_of(p: Prediction) -> str:
    """A prediction's headline figure: the steady state's range, else the whole loop's."""
    return f"{x_range(p.steady)} in the steady state" if p.steady else f"{x_range(p.whole)} over the whole loop"






@dataclass(frozen=True)
class Overall:
    """What fixing every predicted finding buys together, and the line that says why the ranking by gain leads with
    another finding than the idle share does (None where they agree)."""
    all_fixed: Prediction | None
    rank_note: str | None

    def as_dict(self) -> dict:
        """As JSON (common/typed_json.py)."""
        return to_json(self)

    def as_written(self) -> "Overall":
        """As its JSON gives it back (Prediction.as_written)."""
        return Overall(self.all_fixed.as_written() if self.all_fixed else None, self.rank_note)


def name_of(f) -> str:
    """A finding as the predictions name it: its rule and subject."""
    return f"{f.rule} ({f.subject})" if f.subject else f.rule


def together(fixes: list) -> Fix | NoFigure:
    """Several fixes made at once: the usable ones combined; the first's reason where none is usable."""
    usable = [x for x in fixes if isinstance(x, Fix)]
    if not usable:
        return fixes[0] if fixes else NoFigure("no fix to replay")
    out = usable[0]
    for x in usable[1:]:
        out = out.combine(x)
    return out


def attach(findings: list, parts_of, t: Timeline | None, complete: bool, loop: Loop) -> Overall:
    """Each high and medium finding's prediction (set on it; a fix of several parts says what each alone buys), the
    findings that share their gains, and what fixing all of them buys; parts_of(finding) -> [(name, Fix or
    NoFigure)]."""
    targets = [f for f in findings if f.severity in PREDICTED]
    reason = why_not(t, complete)
    if reason or not targets:
        for f in targets:
            f.prediction = Prediction(why_not=reason)
        return Overall(None, None)
    predictor = Predictor(t, loop)
    parts = {id(f): parts_of(f) for f in targets}
    made = {id(f): together([x for _, x in parts[id(f)]]) for f in targets}
    for f in targets:
        p = predictor.predict(made[id(f)])
        if len(parts[id(f)]) > 1 and p.said:
            p = replace(p, parts=tuple((name, predictor.predict(x)) for name, x in parts[id(f)]))
        f.prediction = p
    _mark_shared(targets, made, predictor)
    usable = [made[id(f)] for f in targets if isinstance(made[id(f)], Fix)]
    return Overall(predictor.predict(together(usable)) if len(usable) > 1 else None, None)


def _mark_shared(targets: list, made: dict, predictor: Predictor) -> None:
    """Each prediction's shares_with: the other findings whose fixes share its gain (the top few findings only: each
    pair costs two replays)."""
    top = [f for f in targets if isinstance(made[id(f)], Fix)][:SHARE_PAIRS]
    for i, a in enumerate(top):
        for b in top[i + 1:]:
            if predictor.shared(made[id(a)], made[id(b)]):
                a.prediction = replace(a.prediction, shares_with=a.prediction.shares_with + (name_of(b),))
                b.prediction = replace(b.prediction, shares_with=b.prediction.shares_with + (name_of(a),))


SHARE_PAIRS = 3  # findings whose pairs are checked for a shared gain (the top three: three pairs)
