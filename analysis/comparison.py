"""Before and after a fix, for the same program: whether the two analyses can be compared, the figures side by
side, every finding matched by rule and subject, one verdict, and the CI gates. Summaries (analysis JSON) in, one
comparison dict out (docs/json-schema.md, "verify")."""
from __future__ import annotations

from dataclasses import dataclass, field

from nsys_transfer.analysis.load.validate import NO_API_ROWS
from nsys_transfer.analysis.rules.capture import failed_run_evidence
from nsys_transfer.analysis.rules.facts import ProgramEnd
from nsys_transfer.analysis.sections.breakdown import host_memory, main_kind

SCHEMA = "nsys-transfer.verify/1"
SAME_SPEED = 0.03      # within 3%: neither faster nor slower
REDUCED, WORSE = 0.8, 1.25  # a finding's cost after / before
STEP_RATIO = 2.0       # step counts further apart than this: warned
NEAR_ZERO_RATIO = 100.0  # before under 1% of after: near zero, the change said in the unit, not in percent
WORK_TOLERANCE = 0.10  # without steps, the two GPU windows compare only when the kernels' counts agree this well
BACKLOG_ITERATIONS = 2.0  # output work past the steady window longer than this many iterations: a backlog, counted
# findings that say what limits a program that has nothing left to fix: reaching them is the aim, not a regression
LIMITS = {"gpu-bound"}
# rules whose subject is what the finding is about (a copy direction, a range): never paired across subjects
BY_SUBJECT = {"pageable-memcpy", "gpu-idle-cpu-bound", "memory-mapping-in-gaps", "cpu-hotspot"}


GENERIC_KERNELS = {"Kernel", "Kernel2", "kernel", "Kernel3"}


class NotComparable(ValueError):
    """The two traces cannot be compared; the message says why and what to do."""


@dataclass
class Side:
    """One side's analysis summary, its path and, when given, its workload record."""
    path: str
    summary: dict
    workload: dict | None = None
    label: str = ""
    recorded: dict | None = None  # what nsys was asked to record (the run record beside the trace), if known
    loop: dict | None = None      # the loop as the program runs it (facade.side_of; sections/loop.py), if read


@dataclass
class Comparison:
    """What verify() found: the comparison document, its warnings and whether gates failed."""
    document: dict
    warnings: list = field(default_factory=list)


def _gpus(s: dict) -> list[str]:
    return [g.get("name") or "?" for g in s["trace"].get("gpus") or []]


PROFILERS = {"nsys": "an Nsight Systems export", "torch.profiler": "a torch.profiler trace"}


def check_same_profiler(kinds: dict[str, str]) -> None:
    """NotComparable when the traces (name -> "nsys" or "torch.profiler") were not all recorded by one profiler: the
    two record different things (OS runtime calls, CPU samples, the cost of profiling) and their figures differ by
    more than any fix, so a verdict across them would be the profilers' difference."""
    first = next(iter(kinds.items()), None)
    other = next(((n, k) for n, k in kinds.items() if first and k != first[1]), None)
    if first and other:
        raise NotComparable(f"{first[0]} is {PROFILERS.get(first[1], first[1])} and {other[0]} "
                            f"{PROFILERS.get(other[1], other[1])}: the two profilers record and time different "
                            "things; profile both the same way (both with nsys, or both with torch.profiler)")


def profiler_of(summary: dict) -> str:
    """What recorded the trace behind an analysis summary: the trace section's `profiler`, nsys where absent."""
    return summary["trace"].get("profiler") or "nsys"


def check_comparable(before: Side, after: Side) -> list[str]:
    """NotComparable when the two cannot be compared; else the warnings to print."""
    check_same_profiler({"before": profiler_of(before.summary), "after": profiler_of(after.summary)})
    for side in (before, after):
        end = side.summary["trace"].get("program_end") or {}
        if end.get("failed"):  # a failed run's speed is no speed: never a verdict of faster or slower
            raise NotComparable(f"{side.path} is of a failed run: {failed_run_evidence(ProgramEnd.of(end))}; fix the program, "
                                "then trace it again before comparing")
    for side in (before, after):
        integ = side.summary["trace"].get("integrity") or {}
        if integ.get("verdict") not in (None, "complete"):
            what = ("nsys questions the capture's completeness" if integ.get("verdict") == "doubtful"
                    else "the capture lost CUDA events")
            raise NotComparable(f"{side.path}: {what} ({integ.get('verdict')}, analyze-trace --check says why): "
                                "capture it again before comparing")
    lacking = [side.path for side in (before, after) if any(w.startswith(NO_API_ROWS) for w in side.summary["warnings"])]
    if len(lacking) == 1:
        raise NotComparable(f"{lacking[0]}: {NO_API_ROWS}, so its launching thread and its syncs are unknown and its "
                            "idle time is counted differently; capture it again with --trace=cuda")
    gb, ga = _gpus(before.summary), _gpus(after.summary)
    if len(gb) != len(ga) or sorted(gb) != sorted(ga):
        raise NotComparable(f"different GPUs: {', '.join(gb) or 'none'} before, {', '.join(ga) or 'none'} after; "
                            "compare captures from the same machine")
    _same_program(before, after)
    sb, sa = before.summary["steps"], after.summary["steps"]
    if sb.get("count") and sa.get("count") and sb.get("regex") != sa.get("regex"):
        raise NotComparable(f"different steps: {sb['regex']!r} before, {sa['regex']!r} after; pass --step-regex "
                            "to use one definition for both")
    warnings = [w for w in [_sampled_warning(before, after)] if w]
    if bool(sb.get("count")) != bool(sa.get("count")):
        warnings.append("steps were found in only one trace: throughput is compared over the GPU windows")
    elif sb.get("count") and max(sb["count"], sa["count"]) > STEP_RATIO * min(sb["count"], sa["count"]):
        warnings.append(f"{sb['count']} steps before, {sa['count']} after: per-step figures are compared, totals "
                        "are not")
    return warnings


def _sampled_warning(before: Side, after: Side) -> str | None:
    """CPU sampling with stacks costs each side what its CPU work costs: unequal between a program and its fix (on the
    H200, image_loop_fixed ran at 0.66 of its unprofiled pace so, image_loop at 0.95: docs/benchmarks.md)."""
    heavy = [s.label or s.path for s in (before, after) if s.recorded and
             (s.recorded.get("sample") not in (None, "none") or s.recorded.get("python_backtrace"))]
    if not heavy:
        return None
    return (f"{' and '.join(heavy)} captured with CPU sampling and stacks: nsys slows CPU-heavy work most, so the "
            "speed-up can be off; for it, capture both with `nsys-transfer run --sample none --python-backtrace none`")


def _names(s: dict) -> tuple[set[str], set[str]]:
    """The top kernels' names and the NVTX range names of a summary (the program's own marks)."""
    # a library's generic short names (cuBLAS's and CUTLASS's `Kernel`, `Kernel2`) say nothing of the program
    kernels = {str(k["name"]) for k in (s.get("kernels") or {}).get("top") or []} - GENERIC_KERNELS
    ranges = {str(r["name"]) for r in (s.get("nvtx") or {}).get("ranges") or []}
    return kernels, ranges


def _same_program(before: Side, after: Side) -> None:
    """NotComparable when the two share no top kernel and no NVTX range name: two different programs (a fix keeps
    most of a program's kernels, even in another precision its elementwise and copy kernels, or its ranges)."""
    kb, rb = _names(before.summary)
    ka, ra = _names(after.summary)
    if (kb and ka and not kb & ka) and not (rb & ra):
        raise NotComparable(f"different programs: no kernel among the top {len(kb)} before and {len(ka)} after, and "
                            "no NVTX range, is in both; verify compares one program before and after a fix")


def throughput(before: Side, after: Side) -> dict:
    """Steps/s over each trace's steady steps (to the end of their last output: the pipeline's drain counts), else
    from the workload records, else iterations/s of the repeating kernel stream, else the GPU windows' inverse when
    the two did the same GPU work; with where it came from."""
    sb, sa = (_with_teardown(s.summary, s.summary["steps"].get("per_second"), s.summary["steps"].get("count"))
              for s in (before, after))
    if sb and sa:
        return {"before": sb, "after": sa, "unit": "steps/s",
                "source": _steps_source(before, after) + _teardown_said(before, after)}
    wb, wa = (s.workload and s.workload.get("throughput", {}).get("steps_per_s") for s in (before, after))
    if wb and wa:
        return {"before": wb, "after": wa, "unit": "steps/s", "source": "the workload records"}
    ib, ia = _iterations(before.summary), _iterations(after.summary)
    if ib and ia:
        return {"before": ib[0], "after": ia[0], "unit": "iterations/s",
                "source": f"the repeating kernel stream: {ib[1]} and {ia[1]}" + _teardown_said(before, after) +
                          _no_steps(before, after)}
    kb, ka = (s.summary["kernels"].get("count") or 0 for s in (before, after))
    db, da = (s.summary["window"].get("duration_ns") or 0 for s in (before, after))
    if kb and ka and db and da and abs(kb - ka) <= WORK_TOLERANCE * max(kb, ka):
        return {"before": 1e9 / db, "after": 1e9 / da, "unit": "1/s",
                "source": f"the GPU windows ({db / 1e9:.2f} s and {da / 1e9:.2f} s for {kb:,} and {ka:,} kernels: "
                          "the same work" + _no_steps(before, after) + ")"}
    if kb and ka and db and da and _same_kernel_mix(before.summary, after.summary):
        return {"before": kb / (db / 1e9), "after": ka / (da / 1e9), "unit": "kernels/s",
                "source": f"the kernels each GPU ran a second ({kb:,} in {db / 1e9:.2f} s and {ka:,} in "
                          f"{da / 1e9:.2f} s: the same kernels in the same shares, so the same work a kernel)" +
                          _no_steps(before, after)}
    return {"before": None, "after": None, "unit": None,
            "source": f"unknown: {_no_steps(before, after)[2:]}, no workload records, no repeating kernel stream in "
                      f"both, and the two GPU windows ran different work ({kb:,} and {ka:,} kernels)"}


def _same_kernel_mix(b: dict, a: dict) -> bool:
    """Whether the two windows ran the same kernels in the same shares of their count (the top kernels' names, each
    share within WORK_TOLERANCE): then kernels a second measure the same work on both sides."""
    tb, ta = (_kernel_shares(s) for s in (b, a))
    return bool(tb) and tb.keys() == ta.keys() and all(abs(tb[k] - ta[k]) <= WORK_TOLERANCE for k in tb)


def _kernel_shares(s: dict) -> dict[str, float]:
    """Each top kernel's share of the window's kernel count."""
    n = s["kernels"].get("count") or 0
    return {k["name"]: k["count"] / n for k in s["kernels"].get("top") or [] if n and k.get("count")}


def _steady(s: dict) -> bool:
    """Whether a summary's window is its steady state (not the whole capture, not a user's window)."""
    return s["window"].get("source", "").startswith("steady state")


def _steps_source(before: Side, after: Side) -> str:
    span = "from the first steady step" if all(_steady(s.summary) for s in (before, after)) else "from the first step"
    return f"the steps in each trace, {span} to the end of the last one's work (GPU work and output drain included)"


def _iterations(s: dict) -> tuple[float, str] | None:
    """Iterations/s of a steady state found from the repeating kernel stream, and how it was counted."""
    n, ns = _iteration_count(s), s["window"].get("duration_ns") or 0
    if not n or not ns:
        return None
    ns += s["window"].get("teardown_ns") or 0
    period = s["setup"]["warmup"]["kernels_per_iteration"]
    return n / (ns / 1e9), f"{n:.1f} iterations of {period:,} kernels in {ns / 1e9:.2f} s"


def _iteration_count(s: dict) -> float | None:
    """How many iterations of its repeating kernel stream a steady-state window holds; None when it has none."""
    period = ((s.get("setup") or {}).get("warmup") or {}).get("kernels_per_iteration")
    kernels = s["kernels"].get("count") or 0
    return kernels / period if period and kernels and _steady(s) else None


def _with_teardown(s: dict, per_second: float | None, count: int | None) -> float | None:
    """A rate over the window stretched by the output pipeline's close after it (the user's clock runs through it)."""
    teardown = s["window"].get("teardown_ns")
    if not per_second or not count or not teardown:
        return per_second
    return count / (count / per_second + teardown / 1e9)


def _teardown_said(before: Side, after: Side) -> str:
    said = [f"{s.label or 'one side'}'s output pipeline's close ({s.summary['window']['teardown_ns'] / 1e9:.2f} s: "
            "its workers joined, its buffers unpinned and unmapped)"
            for s in (before, after) if s.summary["window"].get("teardown_ns")]
    return ("; counted: " + " and ".join(said)) if said else ""


def _no_steps(before: Side, after: Side) -> str:
    counts = [bool(s.summary["steps"].get("count")) for s in (before, after)]
    return ("; steps in only one trace" if any(counts) else
            "; no steps in the traces (mark each step with an NVTX range 'step N')")


def _ms(ns) -> float | None:
    return ns / 1e6 if ns is not None else None


def _syncs_per_step(s: dict) -> float | None:
    n = s["steps"].get("count")
    setup = s["steps"].get("setup") or {}
    calls = setup.get("sync_calls_in_steps", (s.get("idle") or {}).get("sync_calls"))
    return calls / n if n and calls is not None else None


# key: (label, unit, value of a summary, which way is better); a label's "{per}" and a value's `n`: the work each side
# did (its steps or iterations, as the throughput counts them), so two windows of different lengths compare
METRICS = {
    "gpu_busy": ("GPU busy", "%", lambda s, n: 100 * (s["gpu"] or {}).get("utilization", 0), "higher"),
    "gpu_compute": ("GPU compute (kernels)", "%", lambda s, n: 100 * (s["gpu"] or {}).get("compute_utilization", 0),
                    "higher"),
    "idle_per_step_ms": ("GPU idle per step", "ms", lambda s, n: _ms(s["steps"].get("mean_gpu_idle_ns")), "lower"),
    "dtoh_ms": ("DtoH copy {per}", "ms", lambda s, n: _copy_ms(s["memcpy"]["dtoh"], n), "lower"),
    "dtoh_gbps": ("DtoH speed", "GB/s", lambda s, n: s["memcpy"]["dtoh"].get("gbps"), "higher"),
    "dtoh_memory": ("DtoH host memory", "", lambda s, n: host_memory(s["memcpy"]["dtoh"]), None),
    "htod_ms": ("HtoD copy {per}", "ms", lambda s, n: _copy_ms(s["memcpy"]["htod"], n), "lower"),
    "htod_gbps": ("HtoD speed", "GB/s", lambda s, n: s["memcpy"]["htod"].get("gbps"), "higher"),
    "htod_memory": ("HtoD host memory", "", lambda s, n: host_memory(s["memcpy"]["htod"]), None),
    "overlap": ("DtoH copy under kernels", "%", lambda s, n: _dtoh_overlap(s), "higher"),
    "syncs_per_step": ("host syncs per step", "", lambda s, n: _syncs_per_step(s), "lower"),
}


def metrics(before: Side, after: Side, speed: dict) -> list[dict]:
    """Each figure before and after, its change, and whether the change is for the better."""
    rows = [{"key": "throughput", "label": "throughput", "unit": speed["unit"] or "", "before": speed["before"],
             "after": speed["after"], "better": "higher", "source": speed["source"],
             "bounded": speed.get("bounded") or []}]
    nb, na, per = _work(before, after, speed)
    for key, (label, unit, value, better) in METRICS.items():
        rows.append({"key": key, "label": label.format(per=per), "unit": unit, "before": value(before.summary, nb),
                     "after": value(after.summary, na), "better": better})
    for r in rows:
        r["delta"], r["change"] = _delta_and_change(r["before"], r["after"], r["unit"])
    _explain_busy(rows, per)
    return rows


def _delta_and_change(b, a, unit: str) -> tuple[float | None, float | None]:
    """after - before in the figure's unit (points for a percentage), and after / before - 1 where that ratio means
    something: not for a percentage (47% -> 99% is +52 points, not +110%), and not from (near) zero, where a ratio
    measures how small before was (0.3 ms -> 1,322 ms of idle is +1,322 ms, not +391,732%)."""
    if not isinstance(b, (int, float)) or not isinstance(a, (int, float)):
        return None, None
    ratio_means = unit != "%" and b > 0 and a >= 0 and a <= NEAR_ZERO_RATIO * b
    return a - b, (a / b - 1) if ratio_means else None


def _work(before: Side, after: Side, speed: dict) -> tuple[float | None, float | None, str]:
    """The work each side did in its window, as the throughput counted it (steps, iterations of the repeating kernel
    stream), and what one unit is called; (None, None, "in the window") when the throughput counted none (the same
    work on both sides, or unknown)."""
    if speed["unit"] == "steps/s" and speed["source"].startswith("the steps"):
        return before.summary["steps"]["count"], after.summary["steps"]["count"], "per step"
    if speed["unit"] == "iterations/s":
        return _iteration_count(before.summary), _iteration_count(after.summary), "per iteration"
    return None, None, "in the window"


def _copy_ms(direction: dict, n: float | None) -> float:
    """A direction's copy time in ms, per unit of work when n is given."""
    ms = direction.get("total_ns", 0) / 1e6
    return ms / n if n else ms


def _dtoh_overlap(s: dict) -> float | None:
    """The share of DtoH copy time under kernels, as analyze-trace's DtoH line says it; None without DtoH copies (the
    whole memcpy section's share counts HtoD and unified memory's migrations too)."""
    share = s["memcpy"]["dtoh"].get("overlap_fraction")
    return None if share is None or not s["memcpy"]["dtoh"].get("count") else 100 * share


def _explain_busy(rows: list[dict], per: str) -> None:
    """GPU busy counts copies as busy: where it falls while the copies' time falls more and the compute share does
    not, the figure moved the "wrong" way for a good reason; a note says so."""
    by = {r["key"]: r for r in rows}
    busy, compute = by["gpu_busy"], by["gpu_compute"]
    copies_before = (by["dtoh_ms"]["before"] or 0) + (by["htod_ms"]["before"] or 0)
    copies_after = (by["dtoh_ms"]["after"] or 0) + (by["htod_ms"]["after"] or 0)
    if busy["delta"] is not None and busy["delta"] < 0 and copies_after < 0.5 * copies_before and \
            (compute["delta"] or 0) >= 0:
        busy["note"] = (f"busy counts copies: their time {per} fell from {copies_before:,.0f} to "
                        f"{copies_after:,.0f} ms, while the kernels' share went from {compute['before']:.0f}% to "
                        f"{compute['after']:.0f}%")


def findings(before: Side, after: Side, work: tuple = (None, None, "in the window")) -> list[dict]:
    """Every costed finding of either side matched by (rule, subject): resolved, reduced, unchanged, worse or new.
    work: each side's steps or iterations (_work): costs are per one of them, as the two may hold different numbers."""
    nb, na, per = work
    rows = []
    for fb, fa in matched(before.summary["diagnosis"], after.summary["diagnosis"]):
        cb = fb["impact_ns"] / (nb or 1) if fb else None
        ca = fa["impact_ns"] / (na or 1) if fa else None
        key = (fb or fa)["rule"], _subject(fb, cb, fa, ca)
        if key[0] in LIMITS:
            status = "limit reached" if fa else "limit left"
        elif fb is None:
            status = "unchanged" if _was_there(before.summary, fa) else "new"
        elif fa is None:
            status = "resolved"
        else:
            ratio = ca / cb if cb else (1.0 if not ca else float("inf"))
            status = "reduced" if ratio < REDUCED else "worse" if ratio > WORSE else "unchanged"
        rows.append({"rule": key[0], "subject": key[1], "before_subject": fb and fb["subject"],
                     "after_subject": fa and fa["subject"], "status": status, "cost_unit": f"ns {per}",
                     "before_ns": cb, "after_ns": ca, "before_severity": fb and fb["severity"],
                     "after_severity": fa and fa["severity"], "suggestion": (fa or fb)["suggestion"]})
    return rows


def _subject(fb: dict | None, cb: float | None, fa: dict | None, ca: float | None) -> str | None:
    """The subject a pair of findings is named by: the same whichever trace is given first (input-bound's top call
    can differ between the sides, 'DataLoader' before and 'poll' after): the costlier side's, else the first of the
    two by name."""
    if not (fb and fa) or fb["subject"] == fa["subject"]:
        return (fb or fa)["subject"]
    if (cb or 0) != (ca or 0):
        return fb["subject"] if (cb or 0) > (ca or 0) else fa["subject"]
    return min(fb["subject"] or "", fa["subject"] or "") or None


def _was_there(before: dict, f: dict) -> bool:
    """Whether the before side already had what a finding of the after side is about, below its noise floor or in
    figures: a pageable copy direction whose copies were already pageable is not new."""
    if f["rule"] == "pageable-memcpy" and f["subject"] in ("DtoH", "HtoD"):
        return main_kind(before["memcpy"][f["subject"].lower()]) == "Pageable"
    return False


def matched(before: list[dict], after: list[dict]) -> list[tuple[dict | None, dict | None]]:
    """Costed findings paired by rule and subject; then what is left of one rule on each side, pair by pair (the
    subject of input-bound or host-sync is the top call, which can change while the finding is the same one)."""
    b = [f for f in before if f["severity"] != "info"]
    a = [f for f in after if f["severity"] != "info"]
    pairs = []
    for fb in list(b):
        fa = next((f for f in a if (f["rule"], f["subject"]) == (fb["rule"], fb["subject"]) or _same_line(fb, f)), None)
        if fa is not None:
            pairs.append((fb, fa))
            b.remove(fb)
            a.remove(fa)
    for fb in list(b):
        # a subject-bound rule still pairs where one side could not name its subject (a capture without CPU samples
        # says gpu-idle-cpu-bound with none): 'resolved: X' beside 'new: X' would contradict itself
        fa = next((f for f in a if f["rule"] == fb["rule"] and (f["rule"] not in BY_SUBJECT or
                                                                None in (f["subject"], fb["subject"]))), None)
        pairs.append((fb, fa))
        if fa is not None:
            a.remove(fa)
    return pairs + [(None, fa) for fa in a]


def _same_line(fb: dict, fa: dict) -> bool:
    """A CPU-only line found on both sides under another place: the same function's same source text (a fix moved it
    down the file, or the fixed program is a copy under another name, my.py and my_fixed.py)."""
    lb, la = fb.get("line"), fa.get("line")
    return fb["rule"] == fa["rule"] == "cpu-hotspot" and bool(lb and la) and \
        (lb["function"], lb["code"].strip()) == (la["function"], la["code"].strip())


def finding_name(f: dict) -> str:
    """'rule (subject)', or the rule alone."""
    return f"{f['rule']} ({f['subject']})" if f["subject"] else f["rule"]


def _pace(b: float | None, a: float | None) -> tuple[str, float | None]:
    """'1.65x faster', '12% faster', 'about as fast (+1.0%)', '39% slower' or 'speed unknown', and after / before - 1."""
    change = a / b - 1 if b and a else None
    if change is None:
        return "speed unknown", None
    if abs(change) <= SAME_SPEED:
        return f"about as fast ({100 * change:+.1f}%)", change
    if change > 0:
        return (f"{a / b:.2f}x faster" if a / b >= 1.5 else f"{100 * change:.0f}% faster"), change
    return f"{100 * (1 - a / b):.0f}% slower", change


def verdict(speed: dict, rows: list[dict], whole_loop: dict | None = None) -> dict:
    """One line: faster or slower by how much over the loop as the program runs it (whole_loop), with the steady
    state's figure beside it ('in a longer run'); which findings went, which came. Without a loop, the steady state's."""
    pace, change = _pace(speed["before"], speed["after"])
    if speed.get("bounded") and change is not None and abs(change) > SAME_SPEED:
        pace = _bound_of(pace, change, speed["bounded"])
    if whole_loop and whole_loop["change"] is not None:
        steady_pace = pace
        pace, change = _pace(whole_loop["before"], whole_loop["after"])
        pace += " over the whole loop" + (f" (in a longer run: {steady_pace})" if steady_pace != pace else "")
    resolved = [finding_name(f) for f in rows if f["status"] == "resolved"]
    new = [finding_name(f) for f in rows if f["status"] == "new" and f["after_severity"] in ("high", "medium")]
    line = (f"{pace}; resolved: {', '.join(resolved) or 'none'}; new: {', '.join(new) or 'none'}")
    if any(f["status"] == "limit reached" for f in rows):
        line += "; " + _limit_said(rows)
    return {"line": line, "change": change, "resolved": resolved, "new": new}


def _bound_of(pace: str, change: float, bounded: list[str]) -> str:
    """The steady state's pace where a side's rate is an upper bound (its workers' pace seen apart from its loop): an
    after side's bound bounds the speed-up from above, a before side's from below; both: unknown which way."""
    if len(bounded) > 1:
        return f"about {pace}"
    faster = change > 0
    up = (bounded[0] == "after") == faster  # the bound is on the side that makes the change larger
    return f"{'up to' if up else 'at least'} {pace}"


def _limit_said(rows: list[dict]) -> str:
    """What gpu-bound on the after side means for the verdict: the GPU is the limit only where no other high or medium
    finding stands after it (a new input-bound beside "the GPU is now the limit" would contradict it); else the
    kernels are the largest share and the costliest of the others is named as what limits the program still."""
    left = [f for f in rows if f["rule"] not in LIMITS and f["after_ns"] and f["after_severity"] in ("high", "medium")]
    if not left:
        return "the GPU is now the limit (gpu-bound)"
    top = max(left, key=lambda f: f["after_ns"])
    return f"the kernels now take most of the time (gpu-bound), and {finding_name(top)} still holds the GPU back"


def gates(v: dict, rows: list[dict], fail_if_slower: float | None, fail_on_new: str | None) -> list[str]:
    """The reasons the CI gates fail (empty: they pass)."""
    out = []
    if fail_if_slower is not None and v["change"] is not None and -v["change"] * 100 > fail_if_slower:
        out.append(f"{-100 * v['change']:.1f}% slower, more than --fail-if-slower {fail_if_slower:g}")
    if fail_on_new:
        wanted = {r.strip() for r in fail_on_new.split(",") if r.strip()}
        new = [f for f in rows if f["status"] == "new"]
        hit = [f for f in new if ("any" in wanted and f["after_severity"] in ("high", "medium")) or f["rule"] in wanted]
        if hit:
            out.append(f"new finding{'s' if len(hit) > 1 else ''}: {', '.join(finding_name(f) for f in hit)} "
                       f"(--fail-on-new {fail_on_new})")
    return out


def verify(before: Side, after: Side, fail_if_slower: float | None = None, fail_on_new: str | None = None) -> Comparison:
    """The whole comparison (NotComparable when there is none to make); two captures without GPU work are compared by
    their loops' time (verify_cpu)."""
    warnings = check_comparable(before, after)
    if not before.summary.get("gpu") and not after.summary.get("gpu"):
        return verify_cpu(before, after, warnings, fail_if_slower, fail_on_new)
    speed = throughput(before, after)
    work = _work(before, after, speed)
    rows = findings(before, after, work)
    speed = with_backlog(before, after, speed, work)
    whole_loop = loop_speed(before, after, speed, work)
    v = verdict(speed, rows, whole_loop)
    failed = gates(v, rows, fail_if_slower, fail_on_new)
    doc = {"schema": SCHEMA, "before": {"path": before.path, "label": before.label},
           "after": {"path": after.path, "label": after.label}, "verdict": v, "metrics": metrics(before, after, speed),
           "loop": whole_loop, "findings": rows, "warnings": warnings, "gates": {"failed": failed, "fail_if_slower": fail_if_slower,
                                                             "fail_on_new": fail_on_new},
           "exit_code": 1 if failed else 0}
    return Comparison(doc, warnings)


# nsys's cost per traced CUDA call: the cheapest calls' duration in the trace (sections/loop.py CALL_FLOOR_QUANTILE)
# shows only the part inside the call's own timestamps, so it is taken with NSYS_CALL_COST_NS as a floor, what nsys
# 2024.2 cost a call on an H200 (2026-12-05, docs/benchmarks.md: a loop of 230,000 traced calls, `.item()` reads, ran
# 1.9-3.7 us a call slower than unprofiled); a bias of the ratio below SAME_SPEED is not said
NSYS_CALL_COST_NS = 2_000
def loop_speed(before: Side, after: Side, speed: dict, work: tuple) -> dict | None:
    """The loop as each program runs it (Side.loop): its throughput (the steady state's work plus its warm-up
    iterations or steps, over first iteration to the last output's end), each side's set-up beyond the steady state
    (warm-up before it, drain after it, ms), why the two figures differ, and nsys's own cost; None without both loops
    or a steady-state throughput."""
    lb, la = before.loop, after.loop
    if not lb or not la or speed["before"] is None:
        return None
    nb, na, _ = work
    rates = [_loop_rate(s, n) for s, n in ((before, nb), (after, na))]
    sides = {label: {**side.loop, "per_second": rate, "unit": speed["unit"] if n else "1/s",
                     "warmup_ms": _warmup_ms(side), "drain_ms": _drain_ms(side),
                     "workers_wait_ms": _workers_wait_ms(side)}
             for label, side, rate, n in (("before", before, rates[0], nb), ("after", after, rates[1], na))}
    change = rates[1] / rates[0] - 1 if all(rates) else None
    out = {"before": rates[0], "after": rates[1], "change": change, "sides": sides,
           "why": _why_differ(sides, change, speed), "profiler_cost": profiler_cost(sides)}
    return out


def with_backlog(before: Side, after: Side, speed: dict, work: tuple) -> dict:
    """The steady state's rates with each side's output work: where worker processes were still starting (importing)
    after the steady window began, the wait for them is a one-time set-up, left out, and their pace once started (the
    window's work over their time at it, shared among them) counts where it is slower than the loop's (_late_workers);
    else output work (worker processes, threads) that ran on past the steady window for longer than
    BACKLOG_ITERATIONS of its iterations is work the loop handed on faster than it was done, and grows with the run
    (the workers are the limit), so a longer run keeps it: counted in that side's rate, and said. A shorter tail (the
    last output's post-processing) is set-up, left to the whole loop."""
    if speed["before"] is None or not (before.loop and after.loop):
        return speed
    out, said = dict(speed), []
    for label, side, n in (("before", before, work[0]), ("after", after, work[1])):
        rate, drain_s = speed[label], _drain_ms(side) / 1e3
        if not rate:
            continue
        units = n or ((side.summary["kernels"].get("count") or 0) if speed["unit"] == "kernels/s" else 1)
        span_s = units / rate  # the steady window the rate stands for; without a count, the window is one iteration
        name = side.label or label
        if _started_late(side):
            out[label], line = _late_workers(side, name, units, rate)
            out.setdefault("bounded", []).append(label)
            said.append(line)
        elif drain_s > BACKLOG_ITERATIONS * span_s / (n or 1):
            out[label] = units / (span_s + drain_s)
            said.append(f"{name}'s output work ran {drain_s:,.2f} s past its loop's GPU work, a backlog "
                        f"(more than {BACKLOG_ITERATIONS:g} iterations' time) that a longer run keeps: counted; that "
                        "work ran in other threads or processes, which nsys traces and slows too, by a cost this "
                        "trace cannot measure: time the program unprofiled to know its pace")
    if said:
        out["source"] = speed["source"] + "; " + "; ".join(said)
    return out


def _started_late(side: Side) -> bool:
    """Output worker processes were still starting (sections/loop.py WorkersStart) after the steady window began."""
    ws = side.loop.get("workers_start")
    return bool(ws) and ws["first_ready_ns"] > side.summary["window"]["start_ns"]


def _late_workers(side: Side, name: str, units: float, rate: float) -> tuple[float, str]:
    """A side whose output workers started after its steady window began: their pace once started (the window's work,
    with the warm-up's where they started after the window ended, over the time they spent on it in all, shared among
    those that worked: each one's start is its own) where it is slower than the loop's, else the loop's; and what was
    said. The capture shows the loop and its workers apart, never sharing the CPUs and memory, so the figure is what a
    longer run reaches at most."""
    ws, w = side.loop["workers_start"], side.summary["window"]
    ready = ws["first_ready_ns"]
    warmup = ((side.summary.get("setup") or {}).get("warmup") or {}).get("count") or 0
    done = units + (warmup if ready >= w["end_ns"] else 0)  # what was waiting for them when they started
    each_s = max(ws["busy_ns"] / ws["working"] / 1e9, 1e-9)
    pace = done / each_s
    slower = pace < rate
    line = (f"{name}'s {ws['processes']} output worker processes were still starting (importing) when its steady "
            f"state began: the first took {(ready - ws['started_ns']) / 1e9:,.2f} s and began work "
            f"{max(0, ready - w['start_ns']) / 1e9:,.2f} s into it, a one-time start a longer run does not repeat: "
            f"left out; once started, {ws['working']} of them did {done:g} iterations with {each_s:,.2f} s of work "
            f"each ({pace:,.2f}/s), "
            + ("slower than the loop: counted" if slower else f"no slower than the loop ({rate:,.2f}/s): the loop's "
               "pace stands")
            + "; the capture never shows the loop and its workers running together (sharing the CPUs and memory), so "
              "a longer run reaches this pace at most: capture more iterations to measure it")
    return (pace if slower else rate), line


def _loop_rate(side: Side, n: float | None) -> float | None:
    """Work per second over the loop: the steady state's work and the warm-up's; 1/loop time where none is counted."""
    ns = side.loop["duration_ns"]
    if not ns:
        return None
    warmup = ((side.summary.get("setup") or {}).get("warmup") or {}).get("count") or 0
    return (n + warmup) / (ns / 1e9) if n else 1e9 / ns


def _warmup_ms(side: Side) -> float:
    """The loop's part before the steady state: the first iterations' warm-up (cuDNN autotuning, module loading)."""
    return max(0, side.summary["window"]["start_ns"] - side.loop["start_ns"]) / 1e6


def _drain_ms(side: Side) -> float:
    """The loop's part after the steady-state window (and the output pipeline's close it counts): work other threads
    or processes did after it."""
    w = side.summary["window"]
    return max(0, side.loop["end_ns"] - w["end_ns"] - (w.get("teardown_ns") or 0)) / 1e6


def _workers_wait_ms(side: Side) -> float:
    """The part of the drain spent waiting for output worker processes to start (sections/loop.py WorkersStart): from
    the steady window's end (and close) to the first of them at work."""
    ws, w = side.loop.get("workers_start"), side.summary["window"]
    if not ws:
        return 0.0
    waited = ws["first_ready_ns"] - w["end_ns"] - (w.get("teardown_ns") or 0)
    return min(max(0, waited) / 1e6, _drain_ms(side))


def _why_differ(sides: dict, change: float | None, speed: dict) -> str:
    """One line: each side's set-up in ms, the part of the loop the steady state leaves out."""
    said = "; ".join(f"{label}: {s['warmup_ms']:,.0f} ms of first iterations before the steady state, "
                     f"{s['drain_ms']:,.0f} ms of work after it (until {s['end_from']})" + _waited(s)
                     for label, s in sides.items())
    return f"the whole loop counts each side's set-up, which the steady state leaves out: {said}"


def _waited(side: dict) -> str:
    """', of which N ms ...' for a side whose loop waited for its output workers to start; else ''."""
    ws = side.get("workers_start")
    if not ws or not side["workers_wait_ms"]:
        return ""
    return (f", of which {side['workers_wait_ms']:,.0f} ms waiting for its {ws['processes']} output worker processes "
            f"to finish starting (imports: {(ws['last_ready_ns'] - ws['started_ns']) / 1e9:,.1f} s until the last "
            "was ready), a start that varies from machine to machine and that the profiler can lengthen, by a cost "
            "this trace cannot measure: time the program unprofiled to know it")


def profiler_cost(sides: dict) -> dict:
    """nsys's own cost from the CUDA calls it traced in each loop: the cheapest calls' duration a call (the sides'
    larger floor, at least NSYS_CALL_COST_NS), times the calls; the bias it can put on the ratio of the loops' times, and whether it is
    large enough to say (over SAME_SPEED)."""
    floors = [s["call_floor_ns"] for s in sides.values() if s["call_floor_ns"] is not None]
    per_call = max(*floors, NSYS_CALL_COST_NS) if floors else None
    b, a = sides["before"], sides["after"]
    if per_call is None or not b["duration_ns"] or not a["duration_ns"]:
        return {"per_call_ns": per_call, "bias": None, "said": None}
    cost_b, cost_a = b["cuda_calls"] * per_call, a["cuda_calls"] * per_call
    measured = b["duration_ns"] / a["duration_ns"]
    unprofiled = max(1.0, b["duration_ns"] - cost_b) / max(1.0, a["duration_ns"] - cost_a)
    bias = measured / unprofiled - 1
    said = None
    if abs(bias) > SAME_SPEED:
        how = "the cheapest tenth's duration" if per_call > NSYS_CALL_COST_NS else "as measured for nsys 2024.2"
        said = (f"nsys traced {b['cuda_calls']:,} CUDA calls before and {a['cuda_calls']:,} after; at about "
                f"{per_call / 1e3:.1f} us a call ({how}) that is {cost_b / 1e6:,.0f} and "
                f"{cost_a / 1e6:,.0f} ms of the loops, and can make the speed-up {100 * abs(bias):.0f}% "
                f"{'larger' if bias > 0 else 'smaller'} than unprofiled")
    return {"per_call_ns": per_call, "before_ms": cost_b / 1e6, "after_ms": cost_a / 1e6, "bias": bias, "said": said}



# --- captures without GPU work (issue 57): the loops by the program's own clock -------------------------------------
# A program traced on a machine without a GPU (or two torch.profiler traces of CPU work) has no GPU time, copies or
# idle gaps to compare, but it has a loop whose time a fix changed: from its first step (or the end of its imports
# and model construction) to the end of its last step's work (sections/loop.py cpu_of), and the lines of the program
# that loop spent its time at (rules/cpu_lines.py, one finding each). The verdict is the same line as on a GPU: faster
# or slower over the whole loop, the findings resolved and new.

CPU_METRICS = ("loop_s", "main_thread_ms")


def verify_cpu(before: Side, after: Side, warnings: list[str], fail_if_slower: float | None = None,
               fail_on_new: str | None = None) -> Comparison:
    """Two captures without GPU work compared by their loops (Side.loop): steps/s over the loop where both mark
    steps, else the loop's time (the same work assumed, and said); the lines' findings matched as on a GPU."""
    if not (before.loop and after.loop):
        missing = [s.label or s.path for s in (before, after) if not s.loop]
        raise NotComparable(f"{' and '.join(missing)}: no loop to time (no step ranges, and no Python stacks beside "
                            "the trace); trace both with `nsys-transfer run` (or `make trace`), which samples the "
                            "stacks, or mark each step with an NVTX range 'step N'")
    speed = cpu_throughput(before, after)
    work = _work(before, after, speed)
    rows = findings(before, after, work)
    loop = {"before": speed["before"], "after": speed["after"], "change": _pace(speed["before"], speed["after"])[1],
            "sides": {label: {**side.loop, "per_second": speed[label], "unit": speed["unit"]}
                      for label, side in (("before", before), ("after", after))},
            "why": _cpu_loops_said(before, after), "profiler_cost": {"per_call_ns": None, "bias": None, "said": None}}
    # a line new after the fix is often the fix's own (the vectorised call that replaced a loop): the verdict names it
    # where it holds a high share of the loop; the table lists every one
    v = verdict(speed, [r for r in rows if not (r["status"] == "new" and r["after_severity"] != "high")], loop)
    failed = gates(v, rows, fail_if_slower, fail_on_new)
    warnings = [*warnings, *(["no steps in either trace: the loops' time is compared, the same work assumed on both "
                              "sides (mark each step with an NVTX range 'step N' to compare per step)"]
                             if speed["unit"] == "1/s" else [])]
    doc = {"schema": SCHEMA, "before": {"path": before.path, "label": before.label},
           "after": {"path": after.path, "label": after.label}, "verdict": v, "metrics": cpu_metrics(before, after, speed),
           "loop": loop, "findings": rows, "warnings": warnings,
           "gates": {"failed": failed, "fail_if_slower": fail_if_slower, "fail_on_new": fail_on_new},
           "exit_code": 1 if failed else 0}
    return Comparison(doc, warnings)


def cpu_throughput(before: Side, after: Side) -> dict:
    """Steps/s over each loop where both traces mark steps, else the inverse of each loop's time."""
    nb, na = (s.summary["steps"].get("count") or 0 for s in (before, after))
    sb, sa = (s.loop["duration_ns"] / 1e9 for s in (before, after))
    if nb and na and sb > 0 and sa > 0:
        return {"before": nb / sb, "after": na / sa, "unit": "steps/s",
                "source": f"the steps in each trace, over its loop ({nb} steps in {sb:.2f} s and {na} in {sa:.2f} s: "
                          "from the first step's start to the end of the last one's work)"}
    return {"before": 1 / sb if sb > 0 else None, "after": 1 / sa if sa > 0 else None, "unit": "1/s",
            "source": f"each loop's time ({sb:.2f} s and {sa:.2f} s, {_no_steps(before, after)[2:]})"}


def cpu_metrics(before: Side, after: Side, speed: dict) -> list[dict]:
    """The throughput, each loop's time, and the main thread's sampled time in its loop (where the stacks give it)."""
    rows = [{"key": "throughput", "label": "throughput", "unit": speed["unit"] or "", "before": speed["before"],
             "after": speed["after"], "better": "higher", "source": speed["source"], "bounded": []},
            {"key": "loop_s", "label": "the loop's time", "unit": "s", "before": before.loop["duration_ns"] / 1e9,
             "after": after.loop["duration_ns"] / 1e9, "better": "lower"},
            {"key": "main_thread_ms", "label": "main thread in the loop", "unit": "ms",
             "before": _main_thread_ms(before.summary), "after": _main_thread_ms(after.summary), "better": "lower"}]
    for r in rows:
        r["delta"], r["change"] = _delta_and_change(r["before"], r["after"], r["unit"])
    return rows


def _main_thread_ms(s: dict) -> float | None:
    ns = (s.get("code") or {}).get("cpu_ns")
    return ns / 1e6 if ns else None


def _cpu_loops_said(before: Side, after: Side) -> str:
    """Where each loop starts and ends, in words: what the verdict's times are of."""
    said = "; ".join(f"{label}: {s.loop['duration_ns'] / 1e9:,.2f} s from {s.loop['start_from']} to "
                     f"{s.loop['end_from']}" for label, s in (("before", before), ("after", after)))
    return (f"no GPU work on either side, so the loops are compared by their time as the program's own clock would "
            f"take it (set-up before them left out): {said}")
