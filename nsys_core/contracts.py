"""What the layers agree on, defined once: the workload stages and their order, the NVTX range names the workloads
emit and the analysis recognises, and the defaults both sides assume."""
from __future__ import annotations

import re

# The program's Python stacks beside a trace BASE.sqlite: BASE + this (profiling writes it, the analysis reads it)
PYSTACKS_SUFFIX = ".pystacks.gz"

# The workload stages, in the order the article (and every report table) walks them.
STAGES = ("naive-input", "baseline", "multiproc", "bufpool", "async", "streams", "pinned", "ceiling")
# The order `bench` runs them: the ceiling first (it is the yardstick), then the article's order.
BENCH_ORDER = ("ceiling",) + tuple(s for s in STAGES if s != "ceiling")

# NVTX ranges the workloads emit around each phase of a step (workloads/ranges.py) and the analysis matches.
GET_BATCH = "get batch"
COMPUTE = "compute"
COPY_TO_CPU = "copy to CPU"
PROCESS_OUTPUT = "process output"
QUEUE_OUTPUT = "queue output"
DRAIN_OUTPUTS = "drain outputs"  # the output workers' backlog after the last step's GPU work
PIPELINE_DRAIN = "output pipeline: drain"  # fixes.OutputPipeline waiting for its workers (flush, close)
# fixes.OutputPipeline.close(): its last drain, then its teardown (workers joined, buffers unpinned and unmapped);
# the user's own clock runs through it, so verify counts it (the window part's teardown_ns)
PIPELINE_CLOSE = "output pipeline: close"
# fixes.OutputPipeline's pace, a zero-length range inside its drain: how many workers, and the seconds one batch
# kept a worker busy (its process() and checksum); the analysis reads the workers' rate from it (pipeline_pace)
PIPELINE_PACE = "output pipeline: {workers} workers, {ms_per_batch:.1f} ms of work a batch"
# emitted only by the workloads' own loop: two of them make a trace this toolkit's stage (the fixes library's ranges
# appear in any program that uses it)
WORKLOAD_RANGES = frozenset({GET_BATCH, COMPUTE, DRAIN_OUTPUTS})
STEP_RANGE = "Batch {}"              # one range per step: "Batch 7"
DEFAULT_STEP_REGEX = r"^Batch \d+"   # ... and how the analysis finds them when no other step marks are detected

# The host link speed assumed when a trace gives none (GB/s): an H200 measured 55 GB/s pinned DtoH on PCIe gen5
# (docs/benchmarks.md).
DEFAULT_LINK_GBPS = 55.0


def step_range(i: int) -> str:
    """The NVTX name of step i."""
    return STEP_RANGE.format(i)


def pipeline_pace(name: str) -> tuple[int, float] | None:
    """(workers, ms of work a batch) of a PIPELINE_PACE range's name; None for any other name."""
    m = _PACE.match(name)
    return (int(m["workers"]), float(m["ms"])) if m else None


_PACE = re.compile(r"^output pipeline: (?P<workers>\d+) workers, (?P<ms>[0-9.]+) ms of work a batch$")


def gbps(nbytes, duration_ns):
    """GB/s from bytes and nanoseconds (bytes per ns is GB/s); works on numbers and pandas columns alike."""
    return nbytes / duration_ns


# a user's two runs of one program, before and after a fix, told apart by their names where the names say it (the
# README's NAME=before and NAME=after; my.py and my_fixed.py): make trace's next command, and the report's pair
BEFORE_NAME = re.compile(r"before|orig|base|slow|old", re.I)
AFTER_NAME = re.compile(r"after|fix|fast|new", re.I)


def name_says(name: str) -> str | None:
    """'before' or 'after' where a run's name says which it is (and not both), else None."""
    b, a = bool(BEFORE_NAME.search(name)), bool(AFTER_NAME.search(name))
    return "before" if b and not a else "after" if a and not b else None
