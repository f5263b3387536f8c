"""What limits several GPUs: rule classes like diagnosis.py's, returning its Finding.

Multi-GPU rules (RANK_RULES) read the per-GPU rows, the contention table, the host-side DtoH summary and the run record
(RankContext). They are mutually exclusive (each declares `exclusive`): exactly one fires, and limit() returns it. Its
`rule` names the limiting resource; `evidence` is the verdict, `suggestion` the next fix. `impact_ns` is the compute
idle time of the limiting GPU (the one whose kernels run the smallest share of its window: the time this limit costs
it), `impact_fraction` that over the GPU's own window, `subject` that GPU; `single-gpu` and `not-concurrent` cost
nothing (0, info, no subject).
The figures every verdict rests on (each GPU's kernel share, the host-side DtoH rates, ...) are RankContext.figures().
With GPUs on several hosts (per-rank traces of a cluster), the contention and host-side DtoH figures the rules read
are the limiting host's (analysis/sections/hosts.py), the verdicts name that host, and host-dtoh-bandwidth's subject
is its idlest GPU. The compute-bound gate is per host: a host is compute-bound when each of its GPUs runs kernels at
least GpuCompute.busy of its window, and the GPUs are (gpu-compute) only when every host is. While any host's GPUs
wait, the limiting host is a waiting one (hosts.how_limiting): a compute-bound host's slowed copies, hidden behind
its compute, neither take the blame for the waiting host's time nor hide it; host-dtoh-bandwidth then reads the
waiting host's contention, and rank-pipeline and host-cpu name the idlest GPU (on a waiting host) with its host.

The scaling rules (unprofiled N-GPU runs against N x one GPU) are rules/scaling.py's.

Thresholds are class attributes; RankOptions (analysis/rank_summary.py) may override the multi-GPU ones per run.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from .base import Finding, Rule, fired, make_finding
from .facts import CpuLoad, HostDtoh
from ..sections.sharing import slowest_kind



def _share(x) -> str:
    """A GPU's kernel share in words: unknown (NaN, None) for a trace without a kernel table, never "nan%"."""
    return "an unknown share (no kernel table)" if x is None or x != x else f"{x:.0%}"

class GpuCompute(Rule["RankContext"]):
    """Every GPU runs kernels at least `busy` of its window (and no rank's outputs pile up): the GPUs themselves limit
    throughput. With several hosts: every host is compute-bound; one host whose GPUs wait is judged by the other
    rules, as the limiting host, however busy the others are."""
    id = "gpu-compute"
    fires_when = ("every GPU's kernels >= {rule.busy:.0%} of its window (`GpuCompute.busy`; several hosts: every host"
                  " compute-bound), no backlog")
    suggests = "a cheaper model per batch, or more GPUs"
    exclusive = True
    busy = 0.85  # the least busy GPU's kernel share of its window

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if not (ctx.shared and ctx.gpus_busy and not ctx.backlogged):
            return []
        verdict = (f"every GPU runs kernels at least {ctx.compute_min:.0%} of the time: the GPUs themselves limit "
                   "throughput; " + (f"DtoH copies{ctx.on_host} are slowed to {ctx.slowdown:.2f} x solo by sharing the "
                                     "host, hidden behind compute" if ctx.contended else
                                     "no shared host resource saturates" + ctx.on_any_host))
        return [ctx.finding(self.id, verdict, "make the model cheaper per batch (lower precision, channels_last, fused "
                                              "kernels) or add GPUs")]


class HostDtohBandwidth(Rule["RankContext"]):
    """The GPUs wait while their DtoH copies run below `slowdown` of their solo rate whenever another GPU copies: the
    host's DtoH bandwidth, which they share, saturates."""
    id = "host-dtoh-bandwidth"
    fires_when = ("GPUs not compute-bound and copies below {rule.slowdown:g} x their solo rate while another GPU "
                  "copies (`HostDtohBandwidth.slowdown`)")
    suggests = "fewer bytes, staggered copies, NUMA-local buffers"
    exclusive = True
    slowdown = 0.85  # copies while others copy, against their solo rate

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if not (ctx.shared and not ctx.gpus_busy and ctx.contended):
            return []
        on = ctx.on_host
        verdict = (f"the GPUs{on} share the host's DtoH bandwidth and it saturates: {ctx.worst_memory} copies run at "
                   f"{ctx.slowdown:.2f} x their solo rate while other GPUs{on} copy (peak {ctx.peak_share:.0%} of "
                   f"capacity), and kernels run only {ctx.host_compute_min:.0%} of the time")
        return [ctx.finding(self.id, verdict, "move fewer bytes (argmax or bf16 on the GPU before the copy), stagger "
                                              "the ranks' copies, and keep each rank's buffers on its GPU's NUMA node",
                            ctx.on_limiting_host)]


class HostCpu(Rule["RankContext"]):
    """The run record's CPUs, which the ranks share, are at least `busy` busy: while every rank's outputs are backlogged
    behind busy GPUs, or while the GPUs wait and no shared copy is slowed."""
    id = "host-cpu"
    fires_when = ("the run record's CPUs >= {rule.busy:.0%} busy (`HostCpu.busy`) while every rank's outputs are "
                  "backlogged behind busy GPUs, or while the GPUs wait and no shared copy is slowed")
    suggests = "more cores, or less CPU work per output"
    exclusive = True
    busy = 0.9  # the run record's host_cpu.busy over the run

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if not (ctx.shared and ctx.cpu_saturated):
            return []
        cpu = ctx.cpu
        if ctx.gpus_busy and ctx.backlogged:
            verdict = (f"the GPUs finished their steps with every rank's output workers {ctx.backlog_min:.1f}+ steps "
                       f"behind, while the {cpu.cpus} CPUs they share were {cpu.busy:.0%} busy: the host's cores "
                       "saturate; in a longer run the buffers run out and the GPUs wait")
            return [ctx.finding(self.id, verdict, "give the job more cores, or less CPU work per output (argmax or bf16 "
                                                  "on the GPU before the copy shrinks what the workers serialise)")]
        if ctx.gpus_busy or ctx.contended:
            return []
        verdict = (f"{ctx.idlest_named} runs kernels {_share(ctx.idlest['compute_utilization'])} of the time"
                   f"{ctx.waiting_in()}, while the {cpu.cpus} CPUs the ranks share were {cpu.busy:.0%} busy: the "
                   "host's cores saturate")
        return [ctx.finding(self.id, verdict, "give the job more cores, or less CPU work per output (argmax or bf16 on "
                                              "the GPU before the copy); then the rank's own diagnosis (analyze-trace) "
                                              "names what is left")]


class OutputBacklog(Rule["RankContext"]):
    """The GPUs are busy but every rank still drains its outputs at least `backlog_steps` step periods after its last
    step, and the CPUs are not known to be saturated: the output side is slower than the GPUs."""
    id = "output-backlog"
    fires_when = ("every GPU's kernels >= 85% of its window and every rank still drains its outputs >= "
                  "{rule.backlog_steps:g} step periods (`OutputBacklog.backlog_steps`) after its last step, the CPUs "
                  "not known saturated")
    suggests = "more output workers if cores are free, else less work per output"
    exclusive = True
    backlog_steps = 2.0  # the least backlogged rank's drain over its step period

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if not (ctx.shared and ctx.gpus_busy and ctx.backlogged and not ctx.cpu_saturated):
            return []
        verdict = (f"the GPUs finished their steps with every rank's output workers {ctx.backlog_min:.1f}+ steps "
                   "behind: the output side is slower than the GPUs, and a longer run would make them wait")
        return [ctx.finding(self.id, verdict, "more output workers per rank if cores are free (the run record's host_cpu "
                                              "says), else less work per output; capture more steps than the buffer "
                                              "pool to see the steady state")]


class RankPipeline(Rule["RankContext"]):
    """The GPUs wait, nothing shared is slowed and the CPUs are not known to be saturated: the limit is inside each
    rank's own pipeline."""
    id = "rank-pipeline"
    fires_when = ("GPUs wait, nothing shared is slowed, the CPUs not known saturated; \"its outputs land in pageable "
                  "memory\" below half the DtoH bytes pinned")
    suggests = "pin the output buffers (stage pinned), else the rank's own diagnosis"
    exclusive = True
    pinned_share = 0.5  # below this share of DtoH bytes into pinned memory, the outputs land in pageable memory

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if not (ctx.shared and not ctx.gpus_busy and not ctx.contended and not ctx.cpu_saturated):
            return []
        idle = ctx.idlest
        pageable = idle.get("dtoh_pinned_share") is not None and idle["dtoh_pinned_share"] < self.pinned_share
        verdict = (f"{ctx.idlest_named} runs kernels {_share(idle['compute_utilization'])} of the time{ctx.waiting_in()}, "
                   "while nothing shared is slowed: the limit is inside each rank's pipeline"
                   + ("; its outputs land in pageable memory" if pageable else ""))
        return [ctx.finding(self.id, verdict, "pin the output buffers in place (stage pinned)" if pageable else
                            "fix the rank's own pipeline: analyze-trace's diagnosis names the step")]


class SingleGpu(Rule["RankContext"]):
    """One GPU in the trace(s): nothing is shared (info)."""
    id = "single-gpu"
    fires_when = "one GPU in the trace(s) (info)"
    suggests = "analyze-trace's diagnosis"
    exclusive = True

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if ctx.n >= 2:
            return []
        return [ctx.note(self.id, "one GPU in the trace(s): no resource is shared",
                         "analyze-trace's diagnosis covers a single GPU")]


class NotConcurrent(Rule["RankContext"]):
    """Separate traces whose captures do not overlap in time: what the GPUs share cannot be seen (info)."""
    id = "not-concurrent"
    fires_when = "separate traces whose captures do not overlap in time (info)"
    suggests = "record the ranks together"
    exclusive = True

    def check(self, ctx: RankContext) -> list[Finding]:
        """This rule's finding for the GPUs; empty when it does not fire."""
        if ctx.n < 2 or ctx.concurrent:
            return []
        how = ("every rank's torch.profiler with the same schedule, so that their active steps run at once" if
               ctx.profiler == "torch.profiler" else "`make profile STAGE=... GPUS=N`")
        return [ctx.note(self.id, "the traces' captures do not overlap in time (by their session clocks), so what the "
                                  "GPUs share cannot be measured; each GPU's own row still holds",
                         f"record the ranks together: {how}")]


# in the order the verdict used to be decided; each rule is exclusive, and their conditions exclude one another, so the
# order only reads well
RANK_RULES: list[Rule[RankContext]] = [SingleGpu(), NotConcurrent(), HostCpu(), OutputBacklog(), GpuCompute(),
                                       HostDtohBandwidth(), RankPipeline()]


@dataclass
class RankContext:
    """What the multi-GPU rules read. devices: one row per GPU (analysis/rank_summary.py). contention: per host memory kind
    (sharing.contention). host: the host-side DtoH figures. cpu: the workload's record's CPU load, if any.
    concurrent: whether the traces' captures overlap. The thresholds default to the rules' own. hosts: how many
    machines the GPUs ran on; with several, contention and host are the limiting host's (sections/hosts.py),
    host_name names it (None: the traces without a host name) and host_devices are its GPUs' rows."""
    devices: pd.DataFrame
    contention: pd.DataFrame
    host: HostDtoh
    cpu: CpuLoad | None = None
    concurrent: bool = True
    busy_threshold: float = GpuCompute.busy
    slowdown_threshold: float = HostDtohBandwidth.slowdown
    backlog_steps: float = OutputBacklog.backlog_steps
    hosts: int = 1
    host_name: str | None = None
    host_devices: pd.DataFrame | None = None
    profiler: str = "nsys"  # what recorded the traces ("torch.profiler" where every one is a Kineto trace)

    @property
    def n(self) -> int:
        """How many GPUs."""
        return len(self.devices)

    @property
    def shared(self) -> bool:
        """Several GPUs whose captures overlap: only then can they limit one another."""
        return self.n >= 2 and self.concurrent

    @cached_property
    def compute_min(self) -> float:
        """The least busy GPU's kernel share of its window."""
        return float(self.devices["compute_utilization"].min()) if self.n else 0.0

    @property
    def on_limiting_host(self) -> pd.DataFrame:
        """The GPU rows of the limiting host: every GPU's with one host."""
        return self.devices if self.host_devices is None else self.host_devices

    @property
    def host_compute_min(self) -> float:
        """The least busy GPU's kernel share of its window, among the limiting host's GPUs."""
        rows = self.on_limiting_host
        return float(rows["compute_utilization"].min()) if len(rows) else 0.0

    @property
    def on_host(self) -> str:
        """' on NAME' for the limiting host when the GPUs ran on several; empty with one."""
        return f" on {self.host_name or 'the unnamed host'}" if self.hosts > 1 else ""

    @property
    def on_any_host(self) -> str:
        """' on any of the N hosts' when the GPUs ran on several; empty with one."""
        return f" on any of the {self.hosts} hosts" if self.hosts > 1 else ""

    @cached_property
    def _worst(self) -> pd.DataFrame:
        return slowest_kind(self.contention)

    @property
    def slowdown(self) -> float | None:
        """The slowest host memory kind's rate while other GPUs copy, over its solo rate; None when unmeasured."""
        return float(self._worst["slowdown"].iloc[0]) if len(self._worst) else None

    @property
    def worst_memory(self) -> str | None:
        """The host memory kind whose copies slow down most while other GPUs copy."""
        return str(self._worst["memory"].iloc[0]) if len(self._worst) else None

    @property
    def peak_share(self) -> float:
        """The host-side DtoH peak over the shared capacity."""
        return self.host.peak_gbps / self.host.capacity_gbps if self.host.capacity_gbps else 0.0

    @property
    def contended(self) -> bool:
        """Copies run below the slowdown threshold of their solo rate while other GPUs copy."""
        return self.slowdown is not None and self.slowdown < self.slowdown_threshold

    @property
    def gpus_busy(self) -> bool:
        """Every GPU runs kernels at least the busy threshold of its window: with several hosts, every host is
        compute-bound."""
        return self.compute_min >= self.busy_threshold

    @property
    def backlog_min(self) -> float:
        """The least backlogged rank's drain in step periods; 0 unless every rank has one."""
        backlog = self.devices["backlog_steps"].dropna()
        return float(backlog.min()) if len(backlog) == self.n else 0.0

    @property
    def backlogged(self) -> bool:
        """Every rank's outputs are at least the backlog threshold behind its last step."""
        return self.backlog_min >= self.backlog_steps

    @property
    def cpu_saturated(self) -> bool:
        """The CPUs the ranks share were at least HostCpu.busy busy over the run."""
        return self.cpu is not None and self.cpu.busy >= HostCpu.busy

    @cached_property
    def idlest(self) -> pd.Series:
        """The limiting GPU's row: the one whose kernels run the smallest share of its window."""
        return self.devices.sort_values("compute_utilization").iloc[0]

    @property
    def idlest_named(self) -> str:
        """The limiting GPU's name, with ' on HOST' when the GPUs ran on several hosts."""
        gpu = str(self.idlest["gpu"])
        return f"{gpu} on {self.idlest.get('host') or 'the unnamed host'}" if self.hosts > 1 else gpu

    def waiting_in(self) -> str:
        """', waiting mostly in X (N% of its compute gaps)' for the limiting GPU; empty when no range covers them."""
        idle = self.idlest
        return (f", waiting mostly in '{idle['idle_mostly_in']}' ({idle['idle_share']:.0%} of its compute gaps)"
                if isinstance(idle.get("idle_mostly_in"), str) else "")

    def finding(self, rule: str, verdict: str, suggestion: str, among: pd.DataFrame | None = None) -> Finding:
        """A limit finding: the limiting GPU's compute idle time over its own window (the idlest of `among`, else of
        every GPU)."""
        idle = self.idlest if among is None else among.sort_values("compute_utilization").iloc[0]
        return make_finding(rule, int(idle["compute_idle_ns"]), int(idle["window_ns"]), str(idle["gpu"]), verdict,
                            suggestion)

    def note(self, rule: str, verdict: str, suggestion: str) -> Finding:
        """A limit that costs nothing: the GPUs share nothing that can be seen."""
        return Finding(rule, "info", 0, 0.0, None, verdict, suggestion)

    def figures(self) -> list[str]:
        """The figures every verdict rests on, one sentence each; the backlog and the CPU load only for GPUs that share
        the host at the same time."""
        out = [", ".join(f"{r.gpu}: kernels {_share(r.compute_utilization)} of its steps"
                         for r in self.devices.itertuples()),
               f"host-side DtoH{self.on_host}{f' (the worst of {self.hosts} hosts):' if self.hosts > 1 else ''} peak "
               f"{self.host.peak_gbps:.1f} GB/s, mean {self.host.mean_gbps:.1f} GB/s; shared "
               f"capacity {self.host.capacity_gbps:.1f} GB/s ({self.host.capacity_source})"]
        for r in self.contention.itertuples():
            if r.gbps_together is not None:
                out.append(f"{r.memory} DtoH while another GPU{self.on_host} copies: {r.gbps_together:.1f} GB/s"
                           + (f" = {r.slowdown:.2f} x solo {r.solo_gbps:.1f} GB/s ({r.solo_source})" if r.slowdown else ""))
        if not self.shared:
            return out
        if self.backlog_min:
            out.append(f"after their last step the ranks still drained outputs for "
                       f"{', '.join(f'{r.drain_ns / 1e6:,.0f} ms' for r in self.devices.itertuples())} "
                       f"(>= {self.backlog_min:.1f} step periods)")
        if self.cpu:
            out.append(f"host CPUs {self.cpu.busy:.0%} busy ({self.cpu.busy_cores:.1f} of {self.cpu.cpus}) "
                       "over the run")
        return out


def limit(ctx: RankContext) -> Finding:
    """The one multi-GPU rule that fires: the resource that limits the GPUs, as a Finding."""
    return next(f for _, f in fired(RANK_RULES, ctx))
