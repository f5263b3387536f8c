"""Whether one run a side can tell the verdict's change from the machine's noise (newcomer #6): verify compares one
trace of each side, and the same program run twice on a shared machine can differ by more than a fix changes. Where
the change is within what one run's noise could explain, the verdict line says so in one clause and advises the
repeat that settles it (each side traced 3 times, verify run on each before/after pair).

    {"within": bool,            # the change (the verdict's) is within the band: it may be noise
     "band": float,             # a change under this fraction (after/before or before/after, - 1) may be noise
     "source": str,             # "step times" (measured), or why not: "no steps", "6 steps", "a 0.31 s loop",
                                # "GPU work", "step times not read"
     "spread": {"before": float | None, "after": float | None},  # each side's step times' spread, where measured
     "said": str | None}        # the clause the verdict line carries, None where the change is beyond the band

The rule, and why (not a statistical test: one run a side is no sample of runs, so none is claimed):
* With steps on both sides of a capture without GPU work (at least MIN_PERIODS each, over a loop of SHORT_LOOP_S or
  more), each side's spread is
  the interquartile range of its steps' periods (each step's start to the next one's) over their median: the middle
  half of one run's steps differ that much among themselves, under whatever else the machine ran then, and a whole run
  can land as far off for the same reasons. The band is the larger side's spread, at most NO_SPREAD_BAND (a skewed
  spread, a few long steps among short ones, says no more than no steps at all).
* Without steps, with too few of them, or over too short a loop, the trace cannot measure it: the band is
  NO_SPREAD_BAND, what one program's runs differed by on the newcomer's shared 2-core machine. Nor with GPU work: its
  steps' ranges on the CPU start as the CPU runs ahead of the GPU and waits for it, in bursts (the H200's pinned-long
  stage: 12 steady steps whose periods' interquartile range is 0.79 of their median, its pace steady), so they measure
  the pipeline, not the machine.
* A change is within the band where max(r, 1/r) - 1 < band, r the after side's speed over the before side's: a fix
  1.4x faster or one 1.4x slower are as far from noise."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median, quantiles

from .side import Side

# the same seg_numpy.py traced twice on the newcomer's shared 2-core machine: 2.94 s and 1.97 s (1.49x; its fix:
# 2.11 s and 2.63 s), and cpu_roll_fixed.py's three untraced runs 0.89-1.49 s (tests/data/newcomer/RESULTS.txt)
NO_SPREAD_BAND = 0.50
MIN_PERIODS = 10     # fewer step periods give no spread to speak of
SHORT_LOOP_S = 1.0   # a loop shorter than this is a few of the machine's hiccups long: its steps' spread says little
REPEAT = "trace each side 3 times and run verify on each before/after pair"


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Each side's step periods' interquartile range over their median; None where not measured."""
    before: float | None
    after: float | None


@dataclass(frozen=True, kw_only=True)
class Noise:
    """Whether one run a side can tell the verdict's change from the machine's noise (verify's `noise`; the module's
    docstring gives its fields)."""
    within: bool
    band: float
    source: str
    spread: Spread
    said: str | None


def noise(before: Side, after: Side, change: float | None) -> Noise:
    """Whether the verdict's change (after / before - 1 of its speed) is within one run's noise (the module's rule)."""
    spread = Spread(before=_spread(before), after=_spread(after))
    unmeasured = next((why for why in (_unmeasured(before), _unmeasured(after)) if why), None)
    band = NO_SPREAD_BAND if unmeasured else min(max(spread.before or 0.0, spread.after or 0.0), NO_SPREAD_BAND)
    r = 1 + change if change is not None else None
    within = bool(r and r > 0 and max(r, 1 / r) - 1 < band)
    source, why = unmeasured or ("step times", "its steps' times spread as much")
    said = f"one run a side can't tell a change under {100 * band:.0f}% from noise ({why}): {REPEAT}" if within else None
    return Noise(within=within, band=band, source=source, spread=spread, said=said)


def _periods(side: Side) -> list[int]:
    return [p for p in side.step_periods_ns or [] if p > 0]


def _spread(side: Side) -> float | None:
    """The interquartile range of a side's step periods over their median; None with fewer than MIN_PERIODS, or with
    GPU work (its steps' periods measure its pipeline's bursts)."""
    periods = _periods(side)
    if len(periods) < MIN_PERIODS or side.doc.gpu:
        return None
    q1, _, q3 = quantiles(periods, n=4)
    return (q3 - q1) / median(periods)


def _unmeasured(side: Side) -> tuple[str, str] | None:
    """Why a side's steps cannot measure its noise, in a word and in the clause's words ('6 steps', '6 steps are too few
    to measure it by'); None where they can."""
    n = len(_periods(side))
    if side.doc.gpu:
        return "GPU work", "with GPU work, its steps' times on the CPU don't measure it"
    if not n and side.step_periods_ns is None and (side.doc.steps.count if side.doc.steps else 0) > 1:
        return "step times not read", "its steps' times not read"  # a side built from its summary alone (reports)
    if not n:
        return "no steps", "no steps to measure it by"
    if n < MIN_PERIODS:
        return f"{n + 1} steps", f"{n + 1} steps are too few to measure it by"
    ns = (side.loop or {}).get("duration_ns") or (side.doc.window.duration_ns if side.doc.window else 0) or 0
    if ns / 1e9 < SHORT_LOOP_S:
        return f"a {ns / 1e9:.2f} s loop", f"a {ns / 1e9:.2f} s loop is too short to measure it by"
    return None
