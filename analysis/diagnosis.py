"""Diagnosis rules: each reads the computed analysis and, when it fires, names the evidence and the next fix.

Every rule is a class with a stable `id`; `check(ctx)` returns a Finding or None. Findings carry
`rule`, `severity` (high, medium, info), `evidence` (numbers from this trace), `suggestion` (the fix,
and the workload stage that applies it), and `impact_ns` (what it costs, for ordering).

Options (Context): pipeline_depth (steps a capture needs before back-pressure can show; default 10,
the article's 8 output workers + 2 buffers), link_gbps (host link speed for "how far from the limit";
default 55, measured on the H200's PCIe gen5 x16).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import pandas as pd

from .copies import big_copies, stream_of_compute

TRANSFER_RULES = ("pageable-memcpy", "sync-memcpy", "no-copy-compute-overlap", "memory-mapping-in-gaps")
MAPPING_CALLS = re.compile(r"^(mmap|mmap64|munmap|mremap|madvise|brk|posix_fallocate|posix_fallocate64|fallocate|shm_open|ftruncate)$")
RANGE_FIXES = {
    "process output": "move post-processing off the launching thread into worker processes fed by a queue (stage multiproc)",
    "copy to cpu": "stop allocating a fresh output per batch: copy into a pool of pre-allocated shared-memory buffers recycled through a queue (stage bufpool)",
    "queue output": "send a buffer index through the queue, not the tensor (which is copied into new shared memory on every put): pre-allocated shared buffers (stage bufpool)",
    "get batch": "load input in DataLoader workers with pin_memory=True and copy the next batch on a side stream while this one computes (the prefetcher of stage baseline)",
    "drain outputs": "the output workers were still behind when the GPU finished (the run's end waited for their backlog): in steady state the buffers run out and the GPU waits; add output workers if the host has idle cores (the run record's host_cpu), else give the job more cores or less CPU work per output (argmax or bf16 on the GPU)",
}


@dataclass
class Finding:
    rule: str
    severity: str
    evidence: str
    suggestion: str
    impact_ns: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    summary: dict
    tables: dict
    pipeline_depth: int = 10
    link_gbps: float = 55.0

    @property
    def copies(self) -> pd.DataFrame:
        return self.tables.get("memcpy", pd.DataFrame())

    def window_ns(self) -> int:
        return int(self.summary.get("window", {}).get("duration_ns") or 0)


def _ms(ns) -> str:
    return f"{ns / 1e6:,.1f} ms"


def _gb(b) -> str:
    return f"{b / 1e9:.2f} GB"


class GpuIdleCpuBound:
    """GPU idle gaps covered by a CPU NVTX range on the launching thread: name the range and its fix."""
    id = "gpu-idle-cpu-bound"
    min_gap_share = 0.05   # of the window
    min_range_share = 0.10  # of the gap time

    def check(self, ctx: Context) -> list[Finding]:
        gaps, win = ctx.summary["gaps"], ctx.window_ns()
        if not win or gaps["total_ns"] < self.min_gap_share * win:
            return []
        out = []
        steps = ctx.summary["steps"]["count"] or 0
        for r in gaps["covered_by"]:
            if r["share"] < self.min_range_share:
                continue
            fix = RANGE_FIXES.get(r["name"].lower(), f"move the work in '{r['name']}' off the launching thread or "
                                                     "overlap it with GPU work")
            per_step = f", {_ms(r['gap_ns'] / steps)} per step" if steps else ""
            out.append(Finding(self.id, "high" if r["share"] >= 0.3 else "medium",
                               f"the GPU sat idle {_ms(gaps['total_ns'])} ({100 * gaps['total_ns'] / win:.0f}% of the "
                               f"window); for {100 * r['share']:.0f}% of that time ({_ms(r['gap_ns'])}{per_step}) the "
                               f"launching thread was inside '{r['name']}'", fix, int(r["gap_ns"])))
        return out


class PageableMemcpy:
    """Copies to or from pageable host memory: staged through a driver buffer, slower, and never truly async."""
    id = "pageable-memcpy"
    fresh_gbps = 4.0  # below this a DtoH copy into pageable memory is paying page faults on fresh pages

    def check(self, ctx: Context) -> list[Finding]:
        out = []
        for kind, host_col in (("DtoH", "dst_kind"), ("HtoD", "src_kind")):
            d = big_copies(ctx.copies, kind)
            if d.empty:
                continue
            pg = d[d[host_col] == "Pageable"]
            if pg.empty or pg["duration_ns"].sum() <= 0:  # zero-length copies (an odd export) have no speed
                continue
            gbps = pg["bytes"].sum() / pg["duration_ns"].sum()
            n_async = int((pg["sync"] == False).sum())  # noqa: E712
            n_block = int((pg["blocking"] == True).sum())  # noqa: E712
            compute = stream_of_compute(ctx.tables.get("kernels_all", pd.DataFrame())) if "kernels_all" in ctx.tables else None
            side = compute is not None and bool((pg["stream"] != compute).all())
            ev = (f"{len(pg)} of {len(d)} {kind} copies ({_gb(pg['bytes'].mean())} each) {'into' if kind == 'DtoH' else 'from'} "
                  f"Pageable memory at {gbps:.1f} GB/s ({100 * gbps / ctx.link_gbps:.0f}% of the {ctx.link_gbps:.0f} GB/s link)")
            if kind == "HtoD":
                fix = "pin the input (DataLoader pin_memory=True) and copy it with non_blocking=True on a side stream (the prefetcher of stage baseline)"
            elif gbps < self.fresh_gbps:
                ev += "; that rate means every copy lands in freshly allocated memory and pays its page faults"
                fix = "copy into pre-allocated output buffers reused across batches (stage bufpool), then pin them"
            elif n_async:
                ev += (f"; {n_async} were issued asynchronously yet {n_block} held the calling thread until they finished"
                       f"{' although they run on a side stream' if side else ''}: the code asked for pinned memory it does not have")
                fix = ("torch's share_memory_() moves a pin_memory=True tensor to a new shared mapping and drops the pinning; "
                       "pin the shared buffers in place with cudaHostRegister (torch.cuda.cudart().cudaHostRegister) (stage pinned)")
            else:
                fix = ("pin the destination buffers and copy with non_blocking=True, one CUDA event per buffer "
                       "(stage async; for shared buffers pin in place with cudaHostRegister as stage pinned does)")
            lost = pg["duration_ns"].sum() - pg["bytes"].sum() / ctx.link_gbps
            out.append(Finding(self.id, "high" if gbps < 0.5 * ctx.link_gbps else "medium", ev, fix, int(max(lost, 0))))
        return out


class SyncMemcpy:
    """The launching thread asked to wait for the copy (synchronous API, or a stream synchronize right after)."""
    id = "sync-memcpy"

    def check(self, ctx: Context) -> list[Finding]:
        d = big_copies(ctx.copies, "DtoH")
        s = d[d["sync"] == True]  # noqa: E712
        if s.empty:
            return []
        wait = (s["api_end_ns"] - s["api_start_ns"]).sum()
        return [Finding(self.id, "high", f"{len(s)} of {len(d)} DtoH copies were waited for by the thread that issued "
                        f"them ({_ms(wait / len(s))} per copy inside the copy call and its synchronize)",
                        "copy with non_blocking=True into pinned buffers, record a CUDA event per buffer and hand the "
                        "buffer to the workers from a monitor thread once the event fires (stage async)", int(wait))]


class NoCopyComputeOverlap:
    """DtoH copies that never run while kernels do: on the compute stream, or serialised by the host."""
    id = "no-copy-compute-overlap"
    min_overlap = 0.10

    def check(self, ctx: Context) -> list[Finding]:
        d = big_copies(ctx.copies, "DtoH")
        if d.empty:
            return []
        overlap = d["overlap_ns"].sum() / max(d["duration_ns"].sum(), 1)
        compute = ctx.summary["memcpy"].get("compute_stream")
        if compute is None:  # no kernels recorded: nothing the copies could have overlapped
            return []
        on_compute = float((d["stream"] == compute).mean()) if compute is not None else 0.0
        if overlap >= self.min_overlap and on_compute < 0.5:
            return []
        ev = (f"{len(d)} DtoH copies ({_ms(d['duration_ns'].sum())}) overlapped kernels for {100 * overlap:.0f}% of their "
              f"time; {100 * on_compute:.0f}% of them ran on the compute stream {compute}")
        if on_compute >= 0.5:
            fix = ("issue the DtoH copy on its own CUDA stream after copy_stream.wait_stream(compute), so it overlaps the "
                   "next batch's compute (stage streams); keep the output alive for it with record_stream()")
        else:
            fix = ("the copies sit on a side stream but the host blocks in them (Pageable destination), so the next batch "
                   "is launched only afterwards: pin the destination in place (stage pinned)")
        return [Finding(self.id, "high", ev, fix, int(d["duration_ns"].sum() - d["overlap_ns"].sum()))]


class MemoryMappingInGaps:
    """mmap/munmap/fallocate (fresh allocations, shared-memory segments) while the GPU was idle."""
    id = "memory-mapping-in-gaps"
    min_share = 0.05

    def check(self, ctx: Context) -> list[Finding]:
        g = ctx.summary["gaps"]
        osrt = ctx.tables.get("gap_osrt", pd.DataFrame())
        if osrt.empty or not g["total_ns"]:
            return []
        m = osrt[osrt["name"].astype(str).str.match(MAPPING_CALLS)]
        t = int(m["gap_overlap_ns"].sum()) if len(m) else 0
        if t < self.min_share * g["total_ns"]:
            return []
        calls = ", ".join(f"{r['name']} x{r['count']}" for r in m.to_dict("records"))
        return [Finding(self.id, "high", f"while the GPU was idle the launching process spent {_ms(t)} in memory-mapping "
                        f"calls ({calls}): {100 * t / g['total_ns']:.0f}% of the gap time",
                        "allocate output buffers once, share them once, and reuse them (stage bufpool) instead of "
                        "creating a new tensor (and shared-memory segment) per batch", t)]


class ShortCapture:
    """Fewer captured steps than the pipeline depth: every buffer starts free, so back-pressure cannot show."""
    id = "short-capture"

    def check(self, ctx: Context) -> list[Finding]:
        n = ctx.summary["steps"]["count"] or 0
        if n == 0 or n >= ctx.pipeline_depth or ctx.summary["memcpy"]["dtoh"]["count"] == 0:
            return []
        return [Finding(self.id, "info", f"{n} steps captured, fewer than the pipeline depth of {ctx.pipeline_depth} "
                        "(output buffers): the capture starts with every buffer free, so it shows no back-pressure from "
                        "the output workers", f"capture at least {ctx.pipeline_depth + 2} steps for steady state "
                        f"(make profile STAGE=... STEPS={ctx.pipeline_depth + 2}); take throughput from `make bench`", 0)]


class NvtxMissing:
    """No NVTX ranges: gaps cannot be attributed to CPU work."""
    id = "nvtx-missing"

    def check(self, ctx: Context) -> list[Finding]:
        if ctx.summary["nvtx"]["count"]:
            return []
        return [Finding(self.id, "medium", "the trace has no NVTX ranges, so idle GPU time cannot be tied to CPU work",
                        "wrap each step and its phases in NVTX ranges (nvtx.annotate) and trace with --trace=nvtx; with "
                        "nsys 2023.4 or older use the nvtx package < 0.2.12, whose ranges it records", 0)]


RULES = [GpuIdleCpuBound(), PageableMemcpy(), SyncMemcpy(), NoCopyComputeOverlap(), MemoryMappingInGaps(),
         ShortCapture(), NvtxMissing()]
SEVERITY_ORDER = {"high": 0, "medium": 1, "info": 2}


def diagnose(ctx: Context) -> list[dict]:
    findings = [f for rule in RULES for f in rule.check(ctx)]
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], -f.impact_ns))
    return [f.as_dict() for f in findings]
