"""Several GPUs: one row per GPU across one or more traces, the host-side DtoH load they share, and the resource
that limits scaling.

A multi-process trace (torchrun under one nsys) holds every rank. Separate per-rank traces are put on one clock by
their session start (TARGET_INFO_SESSION_START_TIME, UTC ns). Each GPU is driven by the process that launched most
of its kernel time; that process's NVTX step ranges are its steps and its ranges explain its idle gaps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import copies as cp
from . import cpu, gpu
from .intervals import Coverage, union
from .summary import _records

SCHEMA = "nsys-transfer.ranks/1"


@dataclass
class RankOptions:
    """min_gap_ns: smallest idle gap counted. step_regex: NVTX step ranges. bin_ns: host timeline bin.
    link_gbps: one GPU's DtoH link speed into pinned memory, used when no probe is given.
    probe: a `python -m workloads.linkprobe --json` record of the same machine: measured solo and all-GPU DtoH
    rates per host memory kind (the shared capacity). busy_threshold: GPUs at least this busy are compute-bound.
    slowdown_threshold: copies that run below this share of their solo rate while other GPUs copy are contended.
    backlog_steps: a rank still draining its outputs this many step periods after its last step's copy has an
    output side slower than its GPU. run: the workload's record (`python -m workloads --json`; `profile stage`
    writes <base>.workload.json), whose host_cpu says how busy the CPUs the ranks share were."""
    min_gap_ns: int = 1_000_000
    step_regex: str = cpu.DEFAULT_STEP_REGEX
    bin_ns: int = 10_000_000
    link_gbps: float = 55.0
    probe: dict | None = None
    busy_threshold: float = 0.85
    slowdown_threshold: float = 0.85
    backlog_steps: float = 2.0
    run: dict | None = None


@dataclass
class Ranks:
    """summary: the JSON (schema nsys-transfer.ranks/1). devices: one row per GPU. copies: the data-carrying DtoH
    copies with concurrent_fraction. host: DtoH into host memory per bin and GPU (common clock)."""
    summary: dict
    devices: pd.DataFrame
    copies: pd.DataFrame
    host: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


# --- pure functions -------------------------------------------------------------------------------------------

def session_offsets(starts: list[int | None]) -> list[int]:
    """Shift of each trace onto a common clock (ns), from their UTC session starts; 0 where a trace has none."""
    known = [s for s in starts if s is not None]
    base = min(known) if known else 0
    return [s - base if s is not None else 0 for s in starts]


def trace_labels(names: list[str]) -> list[str]:
    """Short unique labels for traces given by file name: 'x.rank1.sqlite.xz' -> 'rank1', 'pinned.sqlite' -> 'pinned'."""
    bare = []
    for n in names:
        m = re.search(r"\.(rank\d+)(?:\.|$)", n)
        bare.append(m.group(1) if m else n.split(".")[0])
    return bare if len(set(bare)) == len(bare) else [f"{i}:{b}" for i, b in enumerate(bare)]


def concurrent_fraction(copies: pd.DataFrame, key: str = "gpu") -> np.ndarray:
    """Per copy: the share of its duration during which a copy of another GPU (other `key`) was running."""
    out = np.zeros(len(copies))
    if len(copies) == 0:
        return out
    keys = copies[key].to_numpy()
    s, e = copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy()
    dur = np.maximum(e - s, 1)
    for k in pd.unique(keys):
        mine = keys == k
        if mine.all():
            continue
        others = Coverage(*union(s[~mine], e[~mine]))
        out[mine] = others.within(s[mine], e[mine]) / dur[mine]
    return out


def contention(copies: pd.DataFrame, probe: dict | None, link_gbps: float,
               alone_below: float = 0.1, together_above: float = 0.9) -> pd.DataFrame:
    """Per host memory kind: GB/s of copies that ran alone and of copies that ran while another GPU copied, and the
    slowdown against the solo rate (alone copies of this trace, else the probe's solo figure, else the link speed
    for pinned memory). Columns: memory, copies, gbps_alone, gbps_together, solo_gbps, solo_source, slowdown."""
    rows = []
    for memory, d in copies.groupby("host_kind", sort=True):
        frac = d["concurrent_fraction"].to_numpy()
        alone, together = d[frac < alone_below], d[frac >= together_above]
        g_alone, g_together = _gbps(alone), _gbps(together)
        probe_solo = _probe_solo(probe, memory)
        if g_alone is not None:
            solo, source = g_alone, "copies alone in this trace"
        elif probe_solo is not None:
            solo, source = probe_solo, "link probe"
        elif memory == "Pinned":
            solo, source = link_gbps, "--link-gbps"
        else:
            solo, source = None, None
        rows.append({"memory": memory, "copies": int(len(d)), "copies_together": int(len(together)),
                     "gbps_alone": g_alone, "gbps_together": g_together, "solo_gbps": solo, "solo_source": source,
                     "slowdown": g_together / solo if g_together is not None and solo else None})
    return pd.DataFrame(rows, columns=["memory", "copies", "copies_together", "gbps_alone", "gbps_together",
                                       "solo_gbps", "solo_source", "slowdown"])


def run_summary(run: dict | None) -> dict | None:
    """The workload record's figures next to the trace's: unprofiled or profiled, as it was run."""
    if not run:
        return None
    t = run.get("throughput", {})
    return {"steps_per_s": t.get("steps_per_s"), "per_rank_steps_per_s": t.get("per_rank_steps_per_s"),
            "profiled": bool(run.get("config", {}).get("profile")), "host_cpu": run.get("host_cpu"),
            "integrity_ok": run.get("integrity", {}).get("ok")}


def _gbps(copies: pd.DataFrame) -> float | None:
    total = copies["duration_ns"].sum()
    return float(copies["bytes"].sum() / total) if len(copies) and total else None


def _probe_solo(probe: dict | None, memory: str) -> float | None:
    if not probe:
        return None
    v = probe.get("verdict", {}).get(memory.lower())
    return float(np.mean(v["solo_gbps"])) if v and v.get("solo_gbps") else None


def shared_capacity(probe: dict | None, n_gpus: int, link_gbps: float) -> tuple[float, str]:
    """The host's DtoH capacity for all GPUs at once: measured by the probe, else n x the link speed (nominal)."""
    v = (probe or {}).get("verdict", {}).get("pinned") or {}  # the sum of per-GPU rates while all GPUs copy
    if v.get("together_gbps") and len(v.get("solo_gbps", [])) == n_gpus:
        return float(v["together_gbps"]), f"measured by the link probe ({n_gpus} GPUs at once)"
    return n_gpus * link_gbps, f"nominal: {n_gpus} x {link_gbps:g} GB/s"


def limiting_resource(devices: pd.DataFrame, cont: pd.DataFrame, host: dict, opts: RankOptions,
                      concurrent: bool = True) -> dict:
    """Which resource limits the GPUs, with its evidence and the next fix.

    resource: gpu-compute (every GPU's kernels run at least busy_threshold of its steps), host-dtoh-bandwidth
    (copies run below slowdown_threshold of their solo rate while other GPUs copy, and the GPUs wait), rank-pipeline
    (GPUs wait, nothing shared is slowed: the cause is inside each rank), host-cpu (GPUs busy, every rank's outputs
    backlogged and the shared CPUs saturated, per the run record), output-backlog (the same without a run record or
    with idle CPUs), single-gpu (nothing is shared) or not-concurrent (separate traces whose captures do not overlap
    in time: sharing cannot be seen)."""
    n = len(devices)
    compute_min = float(devices["compute_utilization"].min()) if n else 0.0
    worst = cont.dropna(subset=["slowdown"]).sort_values("slowdown").head(1)
    slow = float(worst["slowdown"].iloc[0]) if len(worst) else None
    peak_share = host["peak_gbps"] / host["capacity_gbps"] if host["capacity_gbps"] else 0.0
    evidence = [", ".join(f"{r.gpu}: kernels {r.compute_utilization:.0%} of its steps" for r in devices.itertuples()),
                f"host-side DtoH peak {host['peak_gbps']:.1f} GB/s, mean {host['mean_gbps']:.1f} GB/s; shared "
                f"capacity {host['capacity_gbps']:.1f} GB/s ({host['capacity_source']})"]
    for r in cont.itertuples():
        if r.gbps_together is not None:
            evidence.append(f"{r.memory} DtoH while another GPU copies: {r.gbps_together:.1f} GB/s"
                            + (f" = {r.slowdown:.2f} x solo {r.solo_gbps:.1f} GB/s ({r.solo_source})" if r.slowdown else ""))
    if n < 2:
        return {"resource": "single-gpu", "verdict": "one GPU in the trace(s): no resource is shared",
                "evidence": evidence, "next": "analyze-trace's diagnosis covers a single GPU"}
    if not concurrent:
        return {"resource": "not-concurrent",
                "verdict": "the traces' captures do not overlap in time (by their session clocks), so what the GPUs "
                           "share cannot be measured; each GPU's own row still holds",
                "evidence": evidence, "next": "record the ranks together: `make profile STAGE=... GPUS=N`"}
    contended = slow is not None and slow < opts.slowdown_threshold
    backlog = devices["backlog_steps"].dropna()
    backlog_min = float(backlog.min()) if len(backlog) == n else 0.0
    cpu = (opts.run or {}).get("host_cpu")
    if backlog_min:
        evidence.append(f"after their last step the ranks still drained outputs for "
                        f"{', '.join(f'{r.drain_ns / 1e6:,.0f} ms' for r in devices.itertuples())} "
                        f"(>= {backlog_min:.1f} step periods)")
    if cpu:
        evidence.append(f"host CPUs {cpu['busy']:.0%} busy ({cpu['busy_cores']:.1f} of {cpu['cpus']}) over the run")
    if compute_min >= opts.busy_threshold and backlog_min >= opts.backlog_steps:
        if cpu and cpu["busy"] >= 0.9:
            return {"resource": "host-cpu",
                    "verdict": f"the GPUs finished their steps with every rank's output workers {backlog_min:.1f}+ "
                               f"steps behind, while the {cpu['cpus']} CPUs they share were {cpu['busy']:.0%} busy: the "
                               "host's cores saturate; in a longer run the buffers run out and the GPUs wait",
                    "evidence": evidence,
                    "next": "give the job more cores, or less CPU work per output (argmax or bf16 on the GPU before "
                            "the copy shrinks what the workers serialise)"}
        return {"resource": "output-backlog",
                "verdict": f"the GPUs finished their steps with every rank's output workers {backlog_min:.1f}+ steps "
                           "behind: the output side is slower than the GPUs, and a longer run would make them wait",
                "evidence": evidence,
                "next": "more output workers per rank if cores are free (the run record's host_cpu says), else less "
                        "work per output; capture more steps than the buffer pool to see the steady state"}
    if compute_min >= opts.busy_threshold:
        verdict = (f"every GPU runs kernels at least {compute_min:.0%} of the time: the GPUs themselves limit "
                   "throughput; " + (f"DtoH copies are slowed to {slow:.2f} x solo by sharing the host, hidden behind "
                                     "compute" if contended else "no shared host resource saturates"))
        return {"resource": "gpu-compute", "verdict": verdict, "evidence": evidence,
                "next": "make the model cheaper per batch (lower precision, channels_last, fused kernels) or add GPUs"}
    if contended:
        return {"resource": "host-dtoh-bandwidth",
                "verdict": f"the GPUs share the host's DtoH bandwidth and it saturates: {worst['memory'].iloc[0]} "
                           f"copies run at {slow:.2f} x their solo rate while other GPUs copy "
                           f"(peak {peak_share:.0%} of capacity), and kernels run only {compute_min:.0%} of the time",
                "evidence": evidence,
                "next": "move fewer bytes (argmax or bf16 on the GPU before the copy), stagger the ranks' copies, and "
                        "keep each rank's buffers on its GPU's NUMA node"}
    idle = devices.sort_values("compute_utilization").iloc[0]
    why = (f", waiting mostly in '{idle['idle_mostly_in']}' ({idle['idle_share']:.0%} of its compute gaps)"
           if isinstance(idle.get("idle_mostly_in"), str) else "")
    pageable = (idle.get("dtoh_pinned_share") is not None and idle["dtoh_pinned_share"] < 0.5)
    return {"resource": "rank-pipeline",
            "verdict": f"{idle['gpu']} runs kernels {idle['compute_utilization']:.0%} of the time{why}, while "
                       "nothing shared is slowed: the limit is inside each rank's pipeline"
                       + ("; its outputs land in pageable memory" if pageable else ""),
            "evidence": evidence,
            "next": ("pin the output buffers in place (stage pinned)" if pageable else
                     "fix the rank's own pipeline: analyze-trace's diagnosis names the step")}


# --- one trace's per-GPU rows ------------------------------------------------------------------------------------

def step_window(steps: pd.DataFrame, ops: pd.DataFrame, outputs: pd.DataFrame) -> tuple[int, int] | None:
    """A rank's measured span: from its first step's start until the last step's output has reached the host (its
    last data-carrying DtoH copy ends; without copies, the GPU work that started before the last step ended). The
    warm-up before it and the drain and barrier after it are left out."""
    if steps.empty:
        return None
    lo, last = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    if len(outputs):
        return lo, max(last, int(outputs["end_ns"].max()))
    queued = ops["end_ns"].to_numpy()[ops["start_ns"].to_numpy() < last]
    return lo, max(last, int(queued.max()) if len(queued) else last)


def output_drain(nvtx: pd.DataFrame, ops: pd.DataFrame, outputs_done_ns: int) -> tuple[int, str]:
    """How long the rank still waited for its output workers after its last step's output reached the host: the
    `drain outputs` NVTX range when the trace has it, else the rank's last GPU operation (the barrier before the
    capture stops, issued once its queue is drained). (drain_ns, source)."""
    d = nvtx[nvtx["name"] == "drain outputs"] if len(nvtx) else nvtx
    if len(d):
        return max(0, int(d["end_ns"].max()) - outputs_done_ns), "NVTX 'drain outputs'"
    last = int(ops["end_ns"].max()) if len(ops) else outputs_done_ns
    return max(0, last - outputs_done_ns), "last GPU operation"


def _device_rows(label: str, kernels, memcpys, memsets, nvtx, gpu_names: dict, opts: RankOptions):
    ops = gpu.gpu_ops(kernels, memcpys, memsets)
    trace_window = gpu.analysis_window(ops)
    if trace_window is None:
        return [], None
    owner = dict(gpu.driving_process(kernels).itertuples(index=False, name=None))
    nvtx_pid = (nvtx["global_tid"].to_numpy() >> 24) & 0xFFFFFF if len(nvtx) else np.zeros(0, np.int64)
    rows = []
    for dev in sorted(int(x) for x in ops["device"].unique()):
        pid = owner.get(dev)
        mine = nvtx[nvtx_pid == pid] if pid is not None else nvtx.iloc[0:0]
        steps = cpu.steps(mine, opts.step_regex, None, None)
        dev_ops = ops[ops["device"].to_numpy() == dev]
        outputs = cp.big_copies(memcpys[(memcpys["device"] == dev) & (memcpys["start_ns"] >= steps["start_ns"].min())]
                                if len(steps) else memcpys.iloc[0:0], "DtoH")
        window = step_window(steps, dev_ops, outputs) or trace_window
        util, idle_gaps, _ = gpu.device_pass(dev_ops, window, opts.min_gap_ns)
        # what the compute engine waited for: gaps between kernels, covered by the rank's own NVTX ranges
        kern = dev_ops[np.asarray(dev_ops["activity"] == "kernel")]
        _, compute_gaps, _ = gpu.device_pass(kern, window, opts.min_gap_ns) if len(kern) else (None, kern, None)
        cover = (cpu.gap_cover_by_range(compute_gaps, mine, set(mine["global_tid"]), opts.step_regex)
                 if len(mine) and len(compute_gaps) else pd.DataFrame(columns=["name", "share"]))
        d = memcpys[(memcpys["device"] == dev) & (memcpys["copy_kind"] == "DtoH")]
        d = d[(d["end_ns"] > window[0]) & (d["start_ns"] < window[1])]
        copy_cov = Coverage(*union(d["start_ns"].to_numpy(), d["end_ns"].to_numpy()))
        u = util.iloc[0]
        span = window[1] - window[0]
        drain_ns, drain_source = output_drain(mine, dev_ops, window[1])
        period = span / len(steps) if len(steps) else None
        rows.append({
            "trace": label, "device": dev, "gpu": f"{label}:GPU {dev}" if label else f"GPU {dev}",
            "name": gpu_names.get(dev), "pid": pid, "window_start_ns": window[0], "window_ns": span,
            "window_source": "steps" if len(steps) else "first to last GPU operation",
            "utilization": float(u["utilization"]), "compute_utilization": float(u["compute_utilization"]),
            "compute_idle_ns": int(span - u["compute_ns"]),
            "idle_gaps": int(len(idle_gaps)), "idle_gap_ns": int(idle_gaps["duration_ns"].sum()),
            "idle_mostly_in": str(cover["name"].iloc[0]) if len(cover) else None,
            "idle_share": float(cover["share"].iloc[0]) if len(cover) else None,
            "steps": int(len(steps)), "steps_per_s": float(len(steps) / (span / 1e9)) if len(steps) and span else None,
            "dtoh_copies": int(len(d)), "dtoh_bytes": int(d["bytes"].sum()),
            "dtoh_gbps": _gbps(d),
            "dtoh_pinned_share": float(d.loc[d["dst_kind"] == "Pinned", "bytes"].sum() / d["bytes"].sum())
            if d["bytes"].sum() else None,
            "dtoh_busy_share": copy_cov.total / span if span else 0.0,
            "drain_ns": drain_ns, "drain_source": drain_source,
            "backlog_steps": drain_ns / period if period else None,
        })
    return rows, trace_window


# --- driver ------------------------------------------------------------------------------------------------------

def analyze_ranks(traces: list, opts: RankOptions | None = None, labels: list[str] | None = None,
                  progress=None) -> Ranks:
    """Every GPU of the given traces (Trace objects) side by side, on one clock."""
    opts = opts or RankOptions()
    say = progress or (lambda msg: None)
    labels = labels if labels is not None else ([""] if len(traces) == 1 else [f"t{i}" for i in range(len(traces))])
    offsets = session_offsets([t.session_start_utc_ns for t in traces])
    rows, big, windows = [], [], []
    for label, t, off in zip(labels, traces, offsets):
        say(f"loading {t.source}")
        kernels, memcpys, memsets, nvtx = t.kernels, t.memcpys, t.memsets, t.nvtx
        names = dict(zip(t.gpus["device"], t.gpus["name"])) if len(t.gpus) else {}
        r, window = _device_rows(label, kernels, memcpys, memsets, nvtx, names, opts)
        rows += r
        if window is None:
            continue
        windows.append((window[0] + off, window[1] + off))
        for dev, d in memcpys[memcpys["copy_kind"] == "DtoH"].groupby("device"):
            b = cp.big_copies(d, "DtoH")
            big.append(b.assign(start_ns=b["start_ns"] + off, end_ns=b["end_ns"] + off, trace=label,
                                gpu=f"{label}:GPU {dev}" if label else f"GPU {dev}", host_kind=b["dst_kind"]))
    devices = pd.DataFrame(rows)
    if devices.empty:
        from .errors import TraceError
        raise TraceError("no GPU activity in the trace(s): record them with --trace=cuda (make profile does)")
    copies = pd.concat(big, ignore_index=True) if big else pd.DataFrame(
        columns=["start_ns", "end_ns", "duration_ns", "bytes", "gpu", "host_kind", "device", "trace"])
    copies["concurrent_fraction"] = concurrent_fraction(copies)
    copies["gbps"] = copies["bytes"] / copies["duration_ns"].where(copies["duration_ns"] > 0)
    say("host-side DtoH timeline")
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    host_parts = [cp.host_bandwidth(d.assign(copy_kind="DtoH"), (lo, hi), "DtoH", opts.bin_ns).assign(gpu=g)
                  for g, d in copies.groupby("gpu")]
    host = pd.concat(host_parts, ignore_index=True) if host_parts else pd.DataFrame(
        columns=["bin_start_ns", "bin_ns", "bytes", "gbps", "gpu"])
    total = host.groupby("bin_start_ns", as_index=False)[["bytes", "gbps"]].sum()
    capacity, source = shared_capacity(opts.probe, len(devices), opts.link_gbps)
    host_summary = {"bin_ns": int(host["bin_ns"].iloc[0]) if len(host) else opts.bin_ns,
                    "peak_gbps": float(total["gbps"].max()) if len(total) else 0.0,
                    "mean_gbps": float(total["bytes"].sum() / (hi - lo)) if hi > lo else 0.0,
                    "capacity_gbps": capacity, "capacity_source": source,
                    "busy_share_over_half_capacity": float((total["gbps"] >= capacity / 2).mean()) if len(total) else 0.0}
    cont = contention(copies, opts.probe, opts.link_gbps)
    concurrent = len(windows) < 2 or max(w[0] for w in windows) < min(w[1] for w in windows)
    limit = limiting_resource(devices, cont, host_summary, opts, concurrent)
    summary = {
        "schema": SCHEMA,
        "traces": [{"label": lb, "path": t.source, "clock_offset_ns": off, "nsys_version": t.nsys_version}
                   for lb, t, off in zip(labels, traces, offsets)],
        "window": {"start_ns": lo, "end_ns": hi, "duration_ns": hi - lo},
        "concurrent": concurrent,
        "gpus": _records(devices),
        "total_steps_per_s": float(devices["steps_per_s"].fillna(0).sum()),
        "host_dtoh": host_summary,
        "contention": _records(cont),
        "limit": limit,
        "run": run_summary(opts.run),
    }
    return Ranks(summary, devices, copies, host, {"contention": cont, "host_total": total})
