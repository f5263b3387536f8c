"""What the CPU did around the GPU: NVTX range summary, steps, and the context of each idle gap."""
from __future__ import annotations

import re
from concurrent.futures import Future

import numpy as np
import pandas as pd

from ..common.intervals import Coverage, union
from .program import base_name, family, is_step_candidate, matching, per_name
from ..load.frames import pid_of
from ..common.schema import Part, rows_as
from ..load.kernel_digest import KernelDigest
from . import copies, gpu, gpu_part, idle_summary, launchers, os_calls, window
from .base import OPTS, SAY, Options, Say, declare
from dataclasses import dataclass, replace
from ..common.typed_json import ABSENT, Absent


@dataclass(frozen=True, kw_only=True)
class StepsPart:
    """The `steps` section: the step ranges, their pace, and the set-up before the first step."""
    regex: str | None
    source: str
    count: int
    per_second: float | None
    mean_ns: float | None
    mean_gpu_idle_ns: float | None
    setup: SetupBeforeSteps | None | Absent = ABSENT


@dataclass(frozen=True, kw_only=True)
class GapsPart:
    """The `gaps` section: the GPU's idle gaps and what the CPU did in them."""
    threshold_ns: int
    count: int
    total_ns: int
    per_step_ns: float | None
    top: tuple[Gap, ...]
    covered_by: tuple[GapCover, ...]
    osrt: tuple[GapCalls, ...]


@dataclass(frozen=True, kw_only=True)
class Gap:
    """One long idle gap of a device, the thread that ended it, its ranges and OS calls."""
    device: int
    start_ns: int
    duration_ns: int
    launch_tid: int | None
    cpu_ranges: tuple[GapRange, ...]
    osrt: tuple[GapCall, ...]


@dataclass(frozen=True, kw_only=True)
class GapRange:
    """An NVTX range open on the launching thread during a gap."""
    name: str
    depth: int
    overlap_ns: int


@dataclass(frozen=True, kw_only=True)
class GapCall:
    """An OS runtime call of the launching thread during a gap."""
    name: str
    count: int
    overlap_ns: int


@dataclass(frozen=True, kw_only=True)
class GapCover:
    """The idle time covered by one NVTX range name on the launching threads."""
    name: str
    gap_ns: int
    share: float


@dataclass(frozen=True, kw_only=True)
class GapCalls:
    """One OS runtime call's time during the gaps, in the launching process."""
    name: str
    count: int
    gap_overlap_ns: int


@dataclass(frozen=True, kw_only=True)
class SetupBeforeSteps:
    """The set-up before the first step, where it is at least 10% of the window (sections/idle_summary.py `_setup`):
    where the steps start, the GPU idle ns before them by cause, the synchronising calls before and in them."""
    steps_start_ns: int
    before_first_step_ns: int
    idle_ns: dict[str, int]
    sync_calls: int
    sync_calls_in_steps: int

REGEX_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")
COUNTER = re.compile(r"\d+")


def step_template(name: str) -> str | None:
    """'Batch 7' -> '^Batch \\d+$', 'Step 90 to 100' -> '^Step \\d+ to \\d+$'; None without a counter."""
    parts = COUNTER.split(name)
    if len(parts) < 2:
        return None
    return "^" + r"\d+".join(REGEX_SPECIAL.sub(r"\\\1", p) for p in parts) + "$"


def detect_step_regex(nvtx: pd.DataFrame) -> str | None:
    """The step range among NVTX names that repeat with a counter (`Batch 7`, `step 12`, `ProfilerStep#3`,
    `request 2`): the template whose ranges cover the most time. PyTorch operator ranges (`aten::mm, seq = 12, ...`)
    are not steps."""
    if nvtx.empty:
        return None
    names = nvtx["name"].astype(str)
    unique = names.unique()  # one template per distinct name, not per range
    template_of = {n: (step_template(n) if is_step_candidate(n) else None) for n in unique}
    templates = names.map(template_of)
    ok = templates.notna()
    if not ok.any():
        return None
    t = pd.DataFrame({"template": templates[ok], "name": names[ok], "duration_ns": nvtx["duration_ns"][ok]})
    g = t.groupby("template").agg(count=("name", "size"), distinct=("name", "nunique"), total=("duration_ns", "sum"))
    g = g[(g["count"] >= 2) & (g["distinct"] >= 2)]
    return str(g["total"].idxmax()) if len(g) else None


def nvtx_summary(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Like `nsys stats --report nvtx_sum`: per name (prefixed by its domain outside the default one) and kind,
    count, total/mean/med/min/max/std in ns."""
    cols = ["name", "kind", "count", "total_ns", "mean_ns", "med_ns", "min_ns", "max_ns", "std_ns"]
    if nvtx.empty:
        return pd.DataFrame(columns=cols)
    base = per_name(nvtx["name"], base_name)  # PyTorch's per-call counters would make every call its own name
    named = nvtx[["kind", "duration_ns"]].assign(name=base.where(nvtx["domain"] == "", nvtx["domain"] + ":" + base))
    g = named.groupby(["name", "kind"], sort=False)["duration_ns"]
    out = g.agg(count="count", total_ns="sum", mean_ns="mean", med_ns="median", min_ns="min", max_ns="max",
                std_ns="std").reset_index()
    return out.sort_values("total_ns", ascending=False, ignore_index=True)[cols]


def steps(nvtx: pd.DataFrame, regex: str, busy: Coverage | dict | None, copies: pd.DataFrame | None) -> pd.DataFrame:
    """One row per step range matched by regex, with GPU busy time, DtoH bytes/time and child-range times.

    busy: the GPU's busy Coverage, or {pid: Coverage of the GPU that process drives} for a multi-rank trace; then
    each process's steps are measured against its own GPU and its own copies (a `pid` column says whose step)."""
    if isinstance(busy, dict):
        pid = pid_of(nvtx["global_tid"].to_numpy())
        parts = []
        for p in np.unique(pid):
            mine = copies[copies["pid"].to_numpy() == p] if copies is not None and "pid" in copies else copies
            part = steps(nvtx[pid == p], regex, busy.get(int(p)), mine)
            parts.append(part.assign(pid=int(p)))
        parts = [x for x in parts if len(x)]
        return (pd.concat(parts, ignore_index=True).sort_values("start_ns", ignore_index=True) if parts else
                pd.DataFrame(columns=["name", "start_ns", "end_ns", "duration_ns"]))
    if nvtx.empty:
        return pd.DataFrame(columns=["name", "start_ns", "end_ns", "duration_ns"])
    st = nvtx[matching(nvtx["name"], regex)].sort_values("start_ns").copy()
    if st.empty:
        return pd.DataFrame(columns=["name", "start_ns", "end_ns", "duration_ns"])
    s, e = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
    if busy is not None:
        st["gpu_busy_ns"] = busy.within(s, e)
        st["gpu_idle_ns"] = st["duration_ns"] - st["gpu_busy_ns"]
    if copies is not None and len(copies):
        d = copies[copies["copy_kind"] == "DtoH"]
        i = np.searchsorted(s, d["start_ns"].to_numpy(), side="right") - 1
        inside = (i >= 0) & (d["start_ns"].to_numpy() < e[np.clip(i, 0, None)])
        agg = pd.DataFrame({"step": i[inside], "bytes": d["bytes"].to_numpy()[inside],
                            "dur": d["duration_ns"].to_numpy()[inside]}).groupby("step").sum()
        st["dtoh_bytes"] = agg["bytes"].reindex(range(len(st)), fill_value=0).to_numpy()
        st["dtoh_ns"] = agg["dur"].reindex(range(len(st)), fill_value=0).to_numpy()
    # time in each direct child range (get batch, compute, copy to CPU, ...)
    children = nvtx[nvtx["parent"].isin(st.index)]
    if len(children):
        children = children.assign(name=per_name(children["name"], family))
        piv = children.pivot_table(index="parent", columns="name", values="duration_ns", aggfunc="sum")
        cols = {f"{name} ns": piv[name].reindex(st.index).fillna(0).astype("int64").to_numpy() for name in piv.columns}
        st = pd.concat([st, pd.DataFrame(cols, index=st.index)], axis=1)
    return st.drop(columns=["parent", "depth"], errors="ignore").reset_index(drop=True)


def steps_per_second(step_table: pd.DataFrame, gpu_end_ns: int | None = None) -> float | None:
    """Steps over the span from the first step's start to the end of the last step or of the GPU work it
    queued, whichever is later (an asynchronous pipeline's ranges end before its GPU work does)."""
    if len(step_table) == 0:
        return None
    end = step_table["end_ns"].max()
    if gpu_end_ns is not None:
        end = max(end, gpu_end_ns)
    span = end - step_table["start_ns"].min()
    return float(len(step_table) / (span / 1e9)) if span > 0 else None


def gap_cover_by_range(gap_table: pd.DataFrame, nvtx: pd.DataFrame, tids, exclude_regex: str) -> pd.DataFrame:
    """Idle-gap time covered by each NVTX range name on the launching thread(s): which CPU work the GPU waited for."""
    if gap_table.empty or nvtx.empty:
        return pd.DataFrame(columns=["name", "gap_ns", "share"])
    gs, ge = union(gap_table["start_ns"].to_numpy(), gap_table["end_ns"].to_numpy())
    cov = Coverage(gs, ge)
    d = nvtx.loc[nvtx["global_tid"].isin(list(tids)).to_numpy(), ["name", "start_ns", "end_ns"]]
    if d.empty:
        return pd.DataFrame(columns=["name", "gap_ns", "share"])
    if exclude_regex:
        d = d[~matching(d["name"], exclude_regex)]
    t = pd.DataFrame(_gap_ns_by_name(cov, d), columns=["name", "gap_ns"])
    t["share"] = t["gap_ns"] / cov.total if cov.total else 0.0
    return t[t["gap_ns"] > 0].sort_values("gap_ns", ascending=False, ignore_index=True)


def _gap_ns_by_name(cov: Coverage, d: pd.DataFrame) -> list[tuple[str, int]]:
    """(name, gap time inside the union of its ranges) per range name, in the order of first appearance: two threads
    in the same range at once (two ranks) count the gap once. Every name's ranges are merged in one pass, each name's
    times shifted past the one before it (a PyTorch operator range's name is unique to its call: thousands of
    names)."""
    if d.empty:
        return []
    codes, names = pd.factorize(d["name"].to_numpy(object), sort=False)
    s, e = d["start_ns"].to_numpy(np.int64), d["end_ns"].to_numpy(np.int64)
    lo = int(s.min())
    span = int(max(e.max(), s.max())) - lo + 1
    if len(names) * span >= 1 << 62:  # shifted times would overflow: one name at a time
        return [(str(n), int(cov.within(*union(s[codes == k], e[codes == k])).sum())) for k, n in enumerate(names)]
    shift = codes.astype(np.int64) * span - lo
    ms, me = union(s + shift, np.maximum(e, s) + shift)
    name_of = ms // span
    ns = np.zeros(len(names), np.int64)
    np.add.at(ns, name_of, cov.within(ms - name_of * span + lo, me - name_of * span + lo).astype(np.int64))
    return [(str(n), int(v)) for n, v in zip(names, ns)]


def osrt_gap_counts(gaps: Coverage, calls: pd.DataFrame) -> pd.DataFrame:
    """Per name of these calls, which all touch the idle gaps `gaps`: how many, and their time inside the gaps (every
    name, even at 0)."""
    if calls.empty:
        return pd.DataFrame(columns=["name", "count", "gap_overlap_ns"])
    inside = gaps.within(calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy())
    names = pd.Categorical(calls["name"])
    codes = names.codes  # group by integer code: no string per row
    n = len(names.categories)
    return pd.DataFrame({"name": names.categories.astype(str), "count": np.bincount(codes, minlength=n),
                         "gap_overlap_ns": np.bincount(codes, weights=inside, minlength=n).astype(np.int64)})


def sum_osrt_in_gaps(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """osrt_gap_counts() of the parts of the OS runtime table summed per name: the names with time inside gaps,
    longest first."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=["name", "count", "gap_overlap_ns"])
    t = parts[0] if len(parts) == 1 else pd.concat(parts).groupby("name", as_index=False, sort=False)[
        ["count", "gap_overlap_ns"]].sum()
    t = t[t["gap_overlap_ns"] > 0]
    return t.sort_values("gap_overlap_ns", ascending=False, ignore_index=True)


def gap_context(gap: dict, nvtx: pd.DataFrame, osrt: pd.DataFrame, launch_tid: int | None, top_osrt: int = 8
                ) -> tuple[tuple[GapRange, ...], tuple[GapCall, ...]]:
    """For one gap: NVTX ranges open on the launching thread (outermost first) and OS runtime calls during it."""
    s, e = gap["start_ns"], gap["end_ns"]
    ranges = []
    if launch_tid is not None and not nvtx.empty:
        d = nvtx[(nvtx["global_tid"] == launch_tid) & (nvtx["start_ns"] < e) & (nvtx["end_ns"] > s)]
        for r in d.sort_values(["depth", "start_ns"]).itertuples():
            ranges.append(GapRange(name=r.name, depth=int(r.depth),
                                   overlap_ns=int(min(r.end_ns, e) - max(r.start_ns, s))))
    calls = []
    if not osrt.empty:
        st, en = osrt["start_ns"].to_numpy(), osrt["end_ns"].to_numpy()
        m = (st < e) & (en > s)
        if m.any():
            ov = np.minimum(en[m], e) - np.maximum(st[m], s)
            t = pd.DataFrame({"name": np.asarray(osrt["name"])[m].astype(str), "ov": ov})
            t = t.groupby("name").agg(count=("ov", "size"), overlap_ns=("ov", "sum"))
            t = t.sort_values("overlap_ns", ascending=False).head(top_osrt)
            calls = [GapCall(name=n, count=int(r["count"]), overlap_ns=int(r["overlap_ns"])) for n, r in t.iterrows()]
    return tuple(ranges), tuple(calls)


def steps_part(digest, nvtx: pd.DataFrame, copies: pd.DataFrame, passed, window, step_regex: str | None,
               step_source: str, devices: int, gpu_idle_ns: int | None = None) -> Part:
    """The `steps` section (the step ranges found by step_regex, each against its own GPU where several ran) and the
    steps table; only the steps that start inside the window. gpu_idle_ns: the GPUs' idle time in the window (every
    idle nanosecond, between the step ranges too), which the idle per step spreads over the steps, as the steps/s
    spreads the window: one figure for the text, the table and the idle chart (reports/charts.gaps)."""
    busy = passed.busy if passed is not None else None
    if not step_regex:
        step_table = pd.DataFrame(columns=["name", "start_ns", "end_ns", "duration_ns"])
    elif busy is not None and devices > 1:  # several ranks: each step against its own GPU
        owners = digest.driving_process()
        busy_of = {int(p): passed.busy_by_device[int(d)] for d, p in owners.itertuples(index=False, name=None)
                   if int(d) in passed.busy_by_device}
        step_table = steps(nvtx, step_regex, busy_of, copies)
    else:
        step_table = steps(nvtx, step_regex, busy, copies)
    if window is not None and len(step_table):  # the window is the window: only the steps that start inside it
        start = step_table["start_ns"].to_numpy()
        step_table = step_table[(start >= window[0]) & (start < window[1])].reset_index(drop=True)
    n_steps = len(step_table)
    idle_per_step = gpu_idle_ns / n_steps if n_steps and gpu_idle_ns is not None else None
    return Part(StepsPart(regex=step_regex, source=step_source, count=n_steps,
                          per_second=steps_per_second(step_table, window[1] if window else None),
                          mean_ns=float(step_table["duration_ns"].mean()) if n_steps else None,
                          mean_gpu_idle_ns=idle_per_step), {"steps": step_table})


def gaps_part(gap_table: pd.DataFrame, tids: dict, calls, nvtx: pd.DataFrame, step_regex: str | None, top: int,
              min_gap_ns: int, per_step_ns: float | None) -> Part:
    """The `gaps` section: the largest idle gaps with what the launching thread did around them (calls: the OS
    calls near them, sections/os_calls.py), the ranges covering the gaps, and the OS calls inside them."""
    tid_of, by_pid, launch_tids = tids["by_gap"], tids["by_pid"], set(tids["by_gap"].values())
    near_top = calls.near_top
    per_thread = {tid: near_top[near_top["global_tid"].to_numpy() == tid] for tid in launch_tids}
    largest = []
    for g in gap_table.nlargest(top, "duration_ns").to_dict("records"):
        tid = tid_of.get((int(g["next_pid"]) if by_pid else -1, int(g["next_correlation_id"])))
        ranges, osrt = gap_context(g, nvtx, per_thread.get(tid, near_top.iloc[0:0]), tid)
        largest.append(Gap(device=int(g["device"]), start_ns=int(g["start_ns"]), duration_ns=int(g["duration_ns"]),
                           launch_tid=int(tid) & 0xFFFFFF if tid is not None else None, cpu_ranges=ranges, osrt=osrt))
    covered = gap_cover_by_range(gap_table, nvtx, launch_tids, step_regex)
    total_gap = int(gap_table["duration_ns"].sum()) if len(gap_table) else 0
    return Part(GapsPart(threshold_ns=min_gap_ns, count=int(len(gap_table)), total_ns=total_gap,
                         per_step_ns=per_step_ns, top=tuple(largest), covered_by=rows_as(GapCover, covered.head(top)),
                         osrt=rows_as(GapCalls, calls.in_gaps.head(top))),
                {"gaps": gap_table, "gap_ranges": covered, "gap_osrt": calls.in_gaps})


def step_source(step_regex: str | None, opts) -> str:
    """Where the step regex came from: given, detected, or none found."""
    return "given" if opts.step_regex else "detected" if step_regex else "none found"


def steps_draft(digest: KernelDigest, nvtx_rows: pd.DataFrame, memcpy: Part, passed: gpu.DevicePass | None,
                window_ns: tuple[int, int] | None, step_regex: str | None, opts: Options, gpu: Part) -> Part:
    """The steps (steps_part()) before the idle attribution gives their set-up figures."""
    return steps_part(digest, nvtx_rows, memcpy.tables["memcpy"], passed, window_ns, step_regex,
                      step_source(step_regex, opts), len(gpu.summary.devices) if passed else 0,
                      gpu_idle_of(gpu.summary))


declare(steps_draft, needs=lambda: (gpu.PassedOver.digest, window.nvtx_rows, copies.memcpy_part, gpu.PassedOver.passed,
                                    window.window_ns, window.step_regex, OPTS, gpu_part.gpu_part))


def gpu_idle_of(gpu: gpu_part.GpuPart | None) -> int | None:
    """The GPUs' idle time in the window, summed over the devices (the `gpu` section); None without a GPU."""
    if not gpu or not gpu.devices:
        return None
    return int(sum(d.window_ns - d.busy_ns for d in gpu.devices))


def _steps(steps_draft: Part, idle_part: idle_summary.IdlePart | None) -> Part:
    """The `steps` section, with the set-up figures of the idle attribution (sections/idle_summary.py)."""
    if idle_part is None:
        return steps_draft
    return steps_draft._replace(summary=replace(steps_draft.summary, setup=idle_part.setup))


declare(_steps, needs=lambda: (steps_draft, idle_summary.idle_part), part="steps", json_at=40, tables_at=40)


def _gaps(gaps_table: pd.DataFrame, tids: dict, gap_calls: Future[os_calls.GapCalls], nvtx_rows: pd.DataFrame,
          step_regex: str | None, opts: Options, steps_draft: Part, say: Say) -> Part:
    say("finding what the CPU did during gaps")
    return gaps_part(gaps_table, tids, gap_calls.result(), nvtx_rows, step_regex, opts.top, opts.min_gap_ns,
                     steps_draft.summary.mean_gpu_idle_ns)


declare(_gaps, needs=lambda: (gpu.gaps_table, launchers.tids, os_calls.gap_calls, window.nvtx_rows, window.step_regex,
                              OPTS, steps_draft, SAY), part="gaps", json_at=50, tables_at=70)
