"""The scaling verdict of unprofiled runs (`nsys-transfer scaling`): N GPUs against N x one GPU, and what limits it.

Scaling rules (SCALING_RULES, exclusive: the first that fires is the verdict; rule classes like diagnosis.py's,
returning its Finding) read one `nsys-transfer scaling` scenario: the N-GPU total against N x one GPU and the CPUs'
load. An unprofiled run has no timeline, so `impact_ns` is 0 and `impact_fraction` is the throughput short of N x
single (1 - efficiency); `scales` is info."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Finding, Rule, fired, severity_of
from .facts import CpuLoad
from .ranks import HostCpu


@dataclass
class ScalingContext:
    """What the scaling rules read: N, the efficiency (N-GPU total over N x single; None when unknown) and the
    CPU load of the N-GPU run, if measured."""
    gpus: int
    efficiency: float | None
    cpu: CpuLoad | None

    def finding(self, rule: str, evidence: str, suggestion: str, severity: str | None = None) -> Finding:
        """A scaling finding: no timeline, so impact_ns 0; impact_fraction is the throughput short of N x single."""
        short = round(max(0.0, 1 - self.efficiency), 4) if self.efficiency is not None else 0.0
        return Finding(rule, severity or severity_of(short), 0, short, None, evidence, suggestion)


class Scales(Rule[ScalingContext]):
    """N GPUs give at least `efficiency` x N x one GPU's throughput (or the single run measured nothing) (info)."""
    id = "scales"
    fires_when = "efficiency >= {rule.efficiency:g} (`Scales.efficiency`), or no single-GPU figure (info)"
    suggests = "`scales (>= {rule.efficiency:g} x N x single)`"
    exclusive = True
    efficiency = 0.9

    def check(self, ctx: ScalingContext) -> list[Finding]:
        """This rule's finding for the scenario; empty when it does not fire."""
        if ctx.efficiency is not None and ctx.efficiency < self.efficiency:
            return []
        return [ctx.finding(self.id, f"scales (>= {self.efficiency:g} x N x single)",
                            "nothing shared limits N GPUs at this size", severity="info")]


class ScalingHostCpu(Rule[ScalingContext]):
    """Short of Scales.efficiency while the N-GPU run's CPUs are at least HostCpu.busy busy: the host's cores."""
    id = "host-cpu"
    fires_when = "the N-GPU run's CPUs >= {rule.busy:.0%} busy (`ScalingHostCpu.busy`, the same as `HostCpu.busy`)"
    suggests = "`host CPU cores: B of C busy (P%) with N GPUs`"
    exclusive = True
    busy = HostCpu.busy

    def check(self, ctx: ScalingContext) -> list[Finding]:
        """This rule's finding for the scenario; empty when it does not fire."""
        cpu = ctx.cpu
        if not (cpu and cpu.busy >= self.busy):
            return []
        return [ctx.finding(self.id, f"host CPU cores: {cpu.busy_cores:.1f} of {cpu.cpus} busy ({cpu.busy:.0%}) "
                                     f"with {ctx.gpus} GPUs",
                            "give the job more cores, or less CPU work per output (argmax or bf16 on the GPU before the "
                            "copy)")]


class NotHostCpu(Rule[ScalingContext]):
    """Short of Scales.efficiency with CPUs to spare (or unmeasured): the cause is in the ranks, which the traces show."""
    id = "not-host-cpu"
    fires_when = "otherwise"
    suggests = "`not the host CPUs (P% busy): see the traces' per-GPU rows`"
    exclusive = True

    def check(self, ctx: ScalingContext) -> list[Finding]:
        """This rule's finding for the scenario; empty when it does not fire."""
        cpu = ctx.cpu
        return [ctx.finding(self.id, "not the host CPUs" + (f" ({cpu.busy:.0%} busy)" if cpu else " (no CPU reading)")
                            + ": see the traces' per-GPU rows",
                            "profile the N-GPU run (`make profile STAGE=... GPUS=N`): analyze-trace names its limit")]


# exclusive, in this order: the first that fires names the verdict
SCALING_RULES: list[Rule[ScalingContext]] = [Scales(), ScalingHostCpu(), NotHostCpu()]


def scaling_verdict(ctx: ScalingContext) -> Finding:
    """Whether N GPUs scale, and what limits them when they fall short, as a Finding."""
    return next(f for _, f in fired(SCALING_RULES, ctx))


def scaling_row(scenario: dict) -> dict | None:
    """N-GPU total against N x the one-GPU run, the CPUs' load in both, and what limits scaling (`limit`: the finding
    of the scaling rules above); None when a run measured nothing."""
    one, every = scenario.get("one"), scenario.get("all")
    if not (one and every and "throughput" in one and "throughput" in every):
        return None
    single, total = one["throughput"]["steps_per_s"], every["throughput"]
    n = total.get("world_size", 1)
    eff = total["steps_per_s"] / (n * single) if single else None
    cpu = every.get("host_cpu")
    limit = scaling_verdict(ScalingContext(n, eff, CpuLoad.of(cpu))).as_dict()
    return {"label": scenario.get("label", ""), "stage": every.get("stage"), "gpus": n, "single_steps_per_s": single,
            "total_steps_per_s": total["steps_per_s"], "per_rank_steps_per_s": total.get("per_rank_steps_per_s"),
            "efficiency": eff, "integrity_ok": every["integrity"]["ok"] and one["integrity"]["ok"],
            "gpu": one.get("environment", {}).get("gpu"), "cpus": one.get("environment", {}).get("cpus"),
            "host_cpu_single": one.get("host_cpu"), "host_cpu": cpu, "limit": limit}
