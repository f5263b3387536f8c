"""How to record a better trace, in the words of the profiler that recorded this one: a torch.profiler user is told
about record_function, the schedule, with_stack and ProfilerActivity.CUDA, an Nsight Systems user about NVTX ranges,
--trace and --capture-range. Every rule that tells the user to record again reads its sentence here (one place per
profiler), so no torch.profiler trace gets Nsight Systems advice (issue 58, item 4)."""
from __future__ import annotations

from dataclasses import dataclass

NSYS, TORCH = "nsys", "torch.profiler"


@dataclass(frozen=True)
class Terms:
    """One profiler's words for each way to record a better trace.
    ranges / ranges_cuda: mark the steps and their phases (a Python program / a CUDA or OpenACC one);
    ranges_cpu: the same for a capture without GPU work;
    after_warmup / after_warmup_cpu: keep the warm-up out of the capture (with GPU work / without);
    lost_events: the capture lost events: record it again so that it does not;
    cuda: record the GPU's work at all;
    enough: record enough steps, and enough GPU work, to judge the loop by."""
    ranges: str
    ranges_cuda: str
    ranges_cpu: str
    after_warmup: str
    after_warmup_cpu: str
    lost_events: str
    cuda: str
    enough: str


TERMS = {
    NSYS: Terms(
        ranges="wrap each step and its phases in NVTX ranges (torch.cuda.nvtx.range(...) or nvtx.annotate) and trace "
               "with --trace=cuda,nvtx,osrt",
        ranges_cuda="wrap each iteration and its phases in NVTX ranges (nvtxRangePushA/nvtxRangePop) and trace with "
                    "--trace=cuda,nvtx,osrt",
        ranges_cpu="mark each step and its phases with NVTX ranges from Python (pip install nvtx; `with "
                   "nvtx.annotate(\"step\"):` around each step, or torch.cuda.nvtx.range, which needs no GPU either) "
                   "and trace with --trace=nvtx,osrt (add cuda where a GPU is used)",
        after_warmup="start the capture after a few steps ({start} with nsys --capture-range=cudaProfilerApi), or "
                     "analyse from the second step on: --steps 1:",
        after_warmup_cpu="start the capture after the warm-up (nsys --delay=SECONDS), or time the program from its "
                         "second step on",
        lost_events="capture it again with an Nsight Systems that records this driver's events (`make nsys` installs "
                    "2024.2, which does on CUDA 13; `python -m nsys_transfer.profiling where` compares yours with the "
                    "driver; NSYS=/path/to/nsys selects one)",
        cuda="trace with --trace=cuda (make profile and nsys-transfer run do)",
        enough="capture at least 5 steps of the loop past its warm-up (nsys-transfer run traces the whole program; "
               "with --capture-range=cudaProfilerApi, start after the warm-up and stop 5 steps later)"),
    TORCH: Terms(
        ranges="wrap each step's phases in torch.profiler.record_function(\"name\") ranges and call prof.step() at "
               "the end of each step (with a schedule), so the trace holds the steps (ProfilerStep#N) and the phases "
               "the GPU waits in",
        ranges_cuda="wrap each step's phases in torch.profiler.record_function(\"name\") ranges and call prof.step() "
                    "at the end of each step",
        ranges_cpu="wrap each step's phases in torch.profiler.record_function(\"name\") ranges and call prof.step() at "
                   "the end of each step (with_stack=True names the lines)",
        after_warmup="let the schedule skip the warm-up: torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1) "
                     "with prof.step() at the end of each step keeps steps 2-6 only, or analyse from the second step "
                     "on: --steps 1:",
        after_warmup_cpu="let the schedule skip the warm-up (torch.profiler.schedule(wait=1, warmup=1, active=5, "
                         "repeat=1), prof.step() at the end of each step)",
        lost_events="record it again with fewer steps in each trace (torch.profiler.schedule's active, with "
                    "repeat=1), so that CUPTI's activity buffers hold them, and let the profiler stop normally (leave "
                    "the `with profile(...)` block, or prof.stop()) before the program exits",
        cuda="record it with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
        enough="record at least 5 steps of the loop past its warm-up: torch.profiler.schedule(wait=1, warmup=1, "
               "active=5, repeat=1) with prof.step() at the end of each step (active is the steps kept; repeat=1 "
               "writes one trace)"),
}


def terms(profiler: str | None) -> Terms:
    """The words of the profiler that recorded the trace ("nsys" or "torch.profiler"; nsys's for anything else)."""
    return TERMS.get(profiler or NSYS, TERMS[NSYS])
