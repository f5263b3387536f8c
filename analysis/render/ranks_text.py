"""Several GPUs as text (the JSON's `ranks`): a line per GPU, or their spread and the slowest where there are many;
a line per host where there are several; the shared host-side DtoH load and the limit. Pure: the typed `ranks`
(RanksPart) in, str out."""
from __future__ import annotations

from collections.abc import Sequence

from ..common.typed_json import ABSENT
from ..document.ranks import RanksPart, RankTrace
from ..sections.gpu_rows import RankGpu
from ..sections.hosts import HostEntry

from .many_gpus import STRAGGLER_BELOW, SUMMARISE_OVER, spread
from .formats import ms, pct


def ranks_report(r: RanksPart) -> str:
    """Several GPUs (the JSON's `ranks`): one line per GPU, the shared host-side DtoH load, the limit. GPUs on
    several hosts: a line per host too, and the host-side load of the worst (the limiting one)."""
    L = _clock_lines(r.traces)
    if len(r.gpus) > SUMMARISE_OVER:
        L += gpu_spread_lines(r.gpus)
    else:
        L.append(f"{len(r.gpus)} GPUs, each over its own steps:")
        L += [_gpu_line(g) for g in r.gpus]
    hosts = r.hosts or ()
    L += host_lines(hosts)
    h = r.host_dtoh
    where = f" on {_host_name(h.host or None)}, the worst of {len(hosts)} hosts" if hosts else ", all GPUs"
    L.append(f"host-side DtoH{where} ({h.bin_ns / 1e6:g} ms bins): peak {h.peak_gbps:.1f} GB/s, mean "
             f"{h.mean_gbps:.1f} GB/s; shared capacity {h.capacity_gbps:.1f} GB/s ({h.capacity_source})")
    for c in r.contention:
        if c.gbps_together is not None:
            L.append(f"  {c.memory} copies while another GPU{' of the host' if hosts else ''} copies "
                     f"({c.copies_together} of {c.copies}): "
                     f"{c.gbps_together:.1f} GB/s" + (f" = {c.slowdown:.2f} x solo {c.solo_gbps:.1f} GB/s "
                                                      f"({c.solo_source})" if c.slowdown else ""))
    run = r.run
    if run and run.steps_per_s:
        cpu = run.host_cpu
        L.append(f"run record ({'profiled' if run.profiled else 'unprofiled'}): {run.steps_per_s:.2f} steps/s in "
                 f"total, drain included" + (f"; host CPUs {cpu.busy:.0%} busy ({cpu.busy_cores:.1f} of "
                                             f"{cpu.cpus})" if cpu else ""))
    lim = r.limit
    L.append(f"limit: [{lim.rule}] {lim.evidence}")
    L.append(f"      -> {lim.suggestion}")
    return "\n".join(L)


def _clock_lines(traces: Sequence[RankTrace]) -> list[str]:
    """How several traces were put on one clock; the first few of many (the JSON's ranks.traces has every one)."""
    if len(traces) < 2:
        return []
    shown = traces if len(traces) <= SUMMARISE_OVER else traces[:3]
    line = "traces on one clock (session start): " + ", ".join(
        f"{t.label}={t.path} (+{t.clock_offset_ns / 1e9:.3f} s)" for t in shown)
    if len(shown) < len(traces):
        offsets = [t.clock_offset_ns / 1e9 for t in traces]
        line += (f", and {len(traces) - len(shown)} more ({len(traces)} traces, clock offsets +{min(offsets):.3f} to "
                 f"+{max(offsets):.3f} s)")
    return [line]


HOSTS_SHOWN = SUMMARISE_OVER  # host lines at most, the worst first; the rest counted


def host_lines(hosts: Sequence[HostEntry]) -> list[str]:
    """GPUs on several hosts (the JSON's `ranks.hosts[]`, the worst first): one line per host, its GPUs' steps/s, its
    least busy GPU's kernel share and its own DtoH load against its capacity; none with one host."""
    if not hosts:
        return []
    L = [f"{len(hosts)} hosts, each host's DtoH judged alone (the worst first):"]
    for i, h in enumerate(hosts[:HOSTS_SHOWN]):
        d = h.host_dtoh
        slow = "unmeasured" if h.slowdown is None else f"{h.slowdown:.2f} x solo"
        L.append(f"  {_host_name(h.host)}: {len(h.gpus)} GPUs, {h.total_steps_per_s:.2f} steps/s, kernels >= "
                 f"{pct(h.compute_min)} of their steps; DtoH peak "
                 f"{d.peak_gbps:.1f} of {d.capacity_gbps:.1f} GB/s ({pct(h.peak_share)}), mean "
                 f"{d.mean_gbps:.1f} GB/s; copies while another of its GPUs copies: {slow}"
                 + ("  <- worst" if i == 0 else ""))
    if len(hosts) > HOSTS_SHOWN:
        L.append(f"  and {len(hosts) - HOSTS_SHOWN} more hosts (--json lists every one)")
    return L


def _host_name(name: str | None) -> str:
    return name or "the unnamed host"


def _gpu_line(g: RankGpu) -> str:
    idle = (f"; kernels wait mostly in '{g.idle_mostly_in}' ({pct(g.idle_share)} of their gaps)"
            if g.idle_mostly_in and (g.idle_share or 0) >= 0.2 else "")
    rate = f"{g.steps_per_s:.2f} steps/s" if g.steps_per_s else "no steps"
    dtoh = (f"DtoH {g.dtoh_bytes / 1e9:.1f} GB at {g.dtoh_gbps:.1f} GB/s "
            f"({pct(g.dtoh_pinned_share)} pinned)" if g.dtoh_gbps else "no DtoH")
    where = f", {_host_name(g.host)}" if g.host is not ABSENT else ""
    return (f"  {g.gpu} (pid {g.pid}{where}): {rate}; busy {pct(g.utilization)}, kernels "
            f"{pct(g.compute_utilization)}, {g.idle_gaps} idle gaps ({ms(g.idle_gap_ns)}); {dtoh}{idle}")


SPREAD_ROWS = (("steps/s", lambda sp: sp.steps_per_s, "{:.2f}"), ("busy", lambda sp: sp.utilization, "pct"),
               ("DtoH GB/s", lambda sp: sp.dtoh_gbps, "{:.1f}"), ("idle in gaps", lambda sp: sp.idle, "pct"))
SLOWEST_NAMED = 10  # stragglers named at most; the rest counted


def gpu_spread_lines(gpus: Sequence[RankGpu]) -> list[str]:
    """Many GPUs (more than SUMMARISE_OVER): the spread of their figures (many_gpus.spread) and the slowest by name,
    in place of a line per GPU."""
    sp = spread(gpus)
    on = {g.gpu: f" on {_host_name(g.host)}" for g in gpus if g.host is not ABSENT}  # GPUs on several hosts
    L = [f"{len(gpus)} GPUs, each over its own steps (the spread; --json and --csv list every GPU):",
         f"  {'':<14}" + "".join(f"{q:>9}" for q in ("median", "min", "p10", "p90", "max"))]
    for label, figure, fmt in SPREAD_ROWS:
        q = figure(sp)
        cells = ["-"] * 5 if q is None else [pct(v) if fmt == "pct" else fmt.format(v) for v in q.row()]
        L.append(f"  {label:<14}" + "".join(f"{c:>9}" for c in cells))
    L.append("  (idle in gaps: time in idle gaps over the GPU's steps; busy: any GPU operation)")
    slow = sp.slowest
    if slow:
        named = ", ".join(f"{g.gpu}{on.get(g.gpu, '')} {g.steps_per_s:.2f} ({pct(g.below)} below)"
                          for g in slow[:SLOWEST_NAMED])
        more = f", and {len(slow) - SLOWEST_NAMED} more" if len(slow) > SLOWEST_NAMED else ""
        L.append(f"slowest by steps/s (median {sp.steps_per_s.median:.2f}): {named}{more}")
        late = [g.gpu + on.get(g.gpu, "") for g in slow if g.straggler]
        L.append(f"stragglers (more than {STRAGGLER_BELOW:.0%} below the median): "
                 + (", ".join(late[:SLOWEST_NAMED]) + (f", and {len(late) - SLOWEST_NAMED} more"
                                                       if len(late) > SLOWEST_NAMED else "") if late else "none"))
    return L
