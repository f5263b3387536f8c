"""Rules about copies between GPU and host: unified-memory migrations, pageable host memory, synchronous copies, and
copies that do not overlap compute."""
from __future__ import annotations

import pandas as pd

from ...nsys_core.contracts import gbps

from ..sections.copies import big_copies
from ..sections.machine import MIN_PROBE_BYTES
from ..replay import fixes, work
from ..replay.fixes import Fix, NoFigure
from .base import Finding, Context, Rule, ms, gb, size, left_out


class UnifiedMemory(Rule[Context]):
    """Managed memory moved on demand: every page fault stalls a kernel (or the host thread) while the driver moves
    the page. Impact: the GPU time the on-demand migrations span; prefetched migrations cost nothing here."""
    id = "unified-memory"
    fires_when = "on-demand unified-memory migrations (`memcpy.unified.on_demand`); impact: the GPU time they span"
    suggests = ("cudaMemPrefetchAsync both ways, cudaMemAdvise, or device memory and explicit copies into pinned "
                "buffers")

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        u = ctx.facts.copies.unified
        od = u.on_demand if u else None
        if u is None or od is None:
            return []
        by = u.on_demand_by_direction
        dirs = ", ".join(f"{label} {by[k]:,}" for k, label in (("htod", "to the GPU"), ("dtoh", "to the host"),
                                                              ("dtod", "between GPUs")) if k in by)
        ev = (f"{od.count:,} unified-memory migrations ({dirs}) moved {gb(od.bytes)} on demand, "
              f"{size(od.median_bytes)} at a time (the median), over {ms(od.gpu_ns)} of GPU time "
              f"({ctx.share_of_window(od.gpu_ns)}); kernels ran during {ms(od.kernel_overlap_ns)} of it, "
              "stalled on each page fault" + ("" if u.cause_recorded else " (the export records no causes: "
                                              "every migration is taken as on demand)"))
        return [ctx.finding(self.id, od.gpu_ns, "managed memory", ev, ctx.advice(
            "managed tensors migrate page by page on first touch: keep the model's tensors in device memory "
            "(.to('cuda')) and bring results back with .to('cpu', non_blocking=True) into pinned buffers; where managed "
            "memory stays, prefetch it ahead of use (cudaMemPrefetchAsync to the GPU before the step, to the host before "
            "the CPU reads it) and set cudaMemAdviseSetPreferredLocation / SetReadMostly",
            "prefetch managed memory ahead of use (cudaMemPrefetchAsync to the GPU before the kernels, to the host "
            "(cudaCpuDeviceId) before the CPU reads it) and advise it (cudaMemAdviseSetPreferredLocation, "
            "SetReadMostly for inputs), or use explicit cudaMemcpyAsync between device memory and pinned host "
            "buffers"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """Not replayable: the page faults' cost after a prefetch is not in the trace."""
        return NoFigure("what prefetching managed memory buys depends on page faults the trace cannot replay")


class PageableMemcpy(Rule[Context]):
    """Large copies to or from pageable host memory: staged through a driver buffer, slower, never truly async."""
    id = "pageable-memcpy"
    fires_when = ("copies >= 1 MB (and >= half the largest) to/from pageable memory: HtoD (time above the link rate),"
                  " DtoH fresh pages < {rule.fresh_gbps:g} GB/s (time above a quarter of the link), DtoH reused (time"
                  " above the link; on a side stream with async calls: the copy time not hidden under kernels)")
    suggests = ("pin the input (baseline); reuse buffers (bufpool); pin + non_blocking (async); `share_memory_()` "
                "dropped the pinning: `cudaHostRegister` (pinned)")
    fresh_gbps = 4.0        # below this a DtoH copy into pageable memory is paying page faults on fresh pages
    pageable_share = 0.25   # reused pageable memory runs at about a quarter of the link (H200: 13.8 of 55 GB/s)

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        out = []
        for kind, host_col in (("DtoH", "dst_kind"), ("HtoD", "src_kind")):
            d = big_copies(ctx.copies, kind)
            d = d[d["bytes"] >= MIN_PROBE_BYTES] if len(d) else d
            pg = d[d[host_col] == "Pageable"] if len(d) else d
            if len(pg) and pg["duration_ns"].sum() > 0:  # zero-length copies (an odd export) have no speed
                out.append(self._finding(ctx, kind, d, pg))
        return out

    def _finding(self, ctx: Context, kind: str, d: pd.DataFrame, pg: pd.DataFrame) -> Finding:
        dur, nbytes = int(pg["duration_ns"].sum()), int(pg["bytes"].sum())
        speed = gbps(nbytes, dur) if dur else 0.0
        link = ctx.link_gbps or speed
        ev = (f"{len(pg)} of {len(d)} {kind} copies ({gb(pg['bytes'].mean())} each) "
              f"{'into' if kind == 'DtoH' else 'from'} pageable host memory at {speed:.1f} GB/s{ctx.link_pct(speed)}"
              f"{left_out(ctx, kind, d)}")
        if kind == "HtoD":
            return ctx.finding(self.id, dur - nbytes / link, kind, ev, ctx.advice(
                "pin the input (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy it with "
                ".to(device, non_blocking=True), ideally on a side stream while the previous batch computes",
                "allocate the host buffers with cudaMallocHost (or cudaHostRegister them) and copy with "
                "cudaMemcpyAsync on a second stream", "baseline", fix="input"))
        if speed < self.fresh_gbps:
            ev += "; that rate means every copy lands in freshly allocated memory and pays its page faults"
            return ctx.finding(self.id, dur - nbytes / (self.pageable_share * link), kind, ev, ctx.advice(
                "copy into output buffers allocated once and reused (out.copy_(t) instead of a fresh t.cpu() per step), "
                "then pin them", "reuse host buffers allocated once (cudaMallocHost) instead of new memory per copy",
                "bufpool", fix="output"))
        n_async = int((pg["sync"] == False).sum())  # noqa: E712
        compute = ctx.facts.copies.compute_stream  # KernelDigest.compute_stream of every kernel
        side = compute is not None and bool((pg["stream"] != compute).all())
        if n_async:
            ev += (f"; {n_async} were issued asynchronously yet {int((pg['blocking'] == True).sum())} held the calling "  # noqa: E712
                   f"thread until they finished{' although they run on a side stream' if side else ''}: the code asked "
                   "for pinned memory it does not have")
            fix = ctx.advice("a pin_memory=True tensor moved by share_memory_() (or any copy of it) is no longer "
                             "pinned: pin the shared buffers in place with "
                             "torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0) and check tensor.is_pinned()",
                             "register the host buffers with cudaHostRegister (or allocate them with cudaMallocHost)",
                             "pinned", fix="output")
        else:
            fix = ctx.advice("pin the destination buffers (torch.empty(..., pin_memory=True), or cudaHostRegister for "
                             "shared memory) and copy with non_blocking=True, then wait on a CUDA event per buffer",
                             "allocate the host buffers with cudaMallocHost and copy with cudaMemcpyAsync, then wait on "
                             "an event", "async", fix="output")
        # pinned, an async copy on a side stream hides under compute; on the compute stream it only gets faster
        saving = dur - int(pg["overlap_ns"].sum()) if side and n_async else dur - nbytes / link
        return ctx.finding(self.id, saving, kind, ev, fix)

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The pageable copies of that direction from pinned memory, overlapped on a side stream at the high end."""
        t = ctx.timeline
        if t is None or finding.subject not in ("DtoH", "HtoD"):
            return NoFigure("no timeline to replay")
        return fixes.pinned(t, work.copies(t, finding.subject, "Pageable"), True, ctx.link_gbps)


class SyncMemcpy(Rule[Context]):
    """Large DtoH copies into pinned memory that the issuing thread waited for (pageable ones block anyway and are
    pageable-memcpy's)."""
    id = "sync-memcpy"
    fires_when = ("large DtoH copies into pinned memory waited for by the issuing thread (wait time); pageable ones "
                  "block anyway and belong to `pageable-memcpy`")
    suggests = "`non_blocking=True` + CUDA events (async)"

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        d = big_copies(ctx.copies, "DtoH")
        s = d[(d["sync"] == True) & (d["dst_kind"] == "Pinned") & (d["bytes"] >= MIN_PROBE_BYTES)] if len(d) else d  # noqa: E712
        if s.empty:
            return []
        wait = int((s["api_end_ns"] - s["api_start_ns"]).sum())
        ev = (f"{len(s)} of {len(d)} DtoH copies into pinned memory were waited for by the thread that issued them "
              f"({ms(wait / len(s))} per copy inside the copy call and its synchronize){left_out(ctx, 'DtoH', d)}")
        return [ctx.finding(self.id, wait, "DtoH", ev, ctx.advice(
            "copy with non_blocking=True, record a CUDA event per buffer and read the buffer once the event has "
            "fired (event.query() or a monitor thread), so the thread launches the next step meanwhile",
            "use cudaMemcpyAsync and cudaEventRecord, and wait on the event only when the data is needed", "async",
            fix="output"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The pinned copies made asynchronous: the host no longer waits for them."""
        t = ctx.timeline
        if t is None:
            return NoFigure("no timeline to replay")
        return fixes.pinned(t, work.copies(t, "DtoH", "Pinned"), True, ctx.link_gbps)


class NoCopyComputeOverlap(Rule[Context]):
    """Asynchronously issued DtoH copies that never run while kernels do, because they share the compute stream."""
    id = "no-copy-compute-overlap"
    fires_when = ("asynchronously issued large DtoH copies, mostly on the compute stream, overlapping kernels < "
                  "{rule.min_overlap:.0%} (copy time not overlapped)")
    suggests = "own copy stream + `record_stream` (streams)"
    min_overlap = 0.10

    def check(self, ctx: Context) -> list[Finding]:
        """This rule's findings for the analysis; empty when it does not fire."""
        d = big_copies(ctx.copies, "DtoH")
        d = d[(d["sync"] == False) & (d["bytes"] >= MIN_PROBE_BYTES)] if len(d) else d  # noqa: E712
        compute = ctx.facts.copies.compute_stream
        if d.empty or compute is None:
            return []
        overlap = d["overlap_ns"].sum() / max(d["duration_ns"].sum(), 1)
        on_compute = float((d["stream"] == compute).mean())
        if overlap >= self.min_overlap or on_compute < 0.5:
            return []
        ev = (f"{len(d)} asynchronous DtoH copies ({ms(d['duration_ns'].sum())}) overlapped kernels for "
              f"{100 * overlap:.0f}% of their time; {100 * on_compute:.0f}% of them ran on the compute stream {compute}"
              f"{left_out(ctx, 'DtoH', d)}")
        return [ctx.finding(self.id, int(d["duration_ns"].sum() - d["overlap_ns"].sum()), "DtoH", ev, ctx.advice(
            "issue the copy on its own stream (copy_stream.wait_stream(torch.cuda.current_stream()), then "
            "out.copy_(t, non_blocking=True) under torch.cuda.stream(copy_stream)) so it overlaps the next step's "
            "compute; keep t alive for it with t.record_stream(copy_stream)",
            "issue the copies on a second cudaStream_t, ordered after the compute by cudaStreamWaitEvent, so they "
            "overlap the next iteration's kernels", "streams", fix="output"))]

    def fix(self, finding: Finding, ctx: Context) -> Fix | NoFigure:
        """The copies on a stream of their own, overlapping the next batch's compute."""
        t = ctx.timeline
        if t is None:
            return NoFigure("no timeline to replay")
        return fixes.pinned(t, work.copies(t, "DtoH"), True, ctx.link_gbps)

