"""Which side of an OutputPipeline sets its pace, from the loop's own clock and the workers' busy time.

The loop side: the time submit() waited for a free buffer and the drain at the end, against the whole span from
the first submit() to the last output; the rate with those waits is what the outputs did. The waits are the
workers' (back-pressure: process() is behind) or the GPU's (a buffer whose copy has not landed). The workers' side:
the seconds one batch keeps a worker busy (process() and the checksum), so `workers` of them can take workers / that
many batches a second. The outputs set the pace where the workers, busy most of the span, cannot take the loop's
rate, or the loop waited long for free buffers, or the drain holds a backlog."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

BACKLOG_DRAIN = 2.0  # a drain this many times one batch's work: a backlog, the outputs behind
SATURATED = 0.6  # the workers' busy share of the span above which a wait can be theirs
OUTPUT_SIDE = 0.15  # submit()'s waits for a free buffer above this share of the span: the outputs set the pace


@dataclass
class Pace:
    """Seconds the loop waited for free buffers and for the drain, over the span from the first submit to close; and
    the workers' busy seconds over the batches they finished."""
    batches: int = 0
    wait_s: float = 0.0
    drain_s: float = 0.0
    first: float | None = None
    last: float | None = None
    processed: int = 0     # batches the workers finished
    busy_s: float = 0.0    # the seconds the workers spent on them
    added: list = field(default_factory=list)  # when each worker started, on the pace's clock
    _clock: object = field(default=time.monotonic, repr=False)

    @property
    def workers(self) -> int:
        """The workers so far."""
        return len(self.added)

    def add_workers(self, n: int) -> None:
        """n more workers from now: their busy share counts from when they started (a pool forked a few at a time)."""
        self.added += [self._clock()] * n

    def worker_s(self) -> float:
        """The seconds the workers could work in the span: each from its start (or the span's)."""
        if self.first is None or self.last is None:
            return 0.0
        return sum(max(0.0, self.last - max(t, self.first)) for t in self.added)

    def started(self) -> float:
        """Now, on the pace's clock; the first call starts the span."""
        now = self._clock()
        if self.first is None:
            self.first = now
        return now

    def waited(self, since: float) -> None:
        """submit() waited for a free buffer since `since`."""
        self.wait_s += self._clock() - since

    def drained(self, since: float) -> None:
        """The drain ran since `since`; the span ends now."""
        self.last = self._clock()
        self.drain_s += self.last - since

    def worked(self, processed: int, busy_s: float) -> None:
        """The workers have finished `processed` batches, in busy_s seconds of work all told."""
        self.processed, self.busy_s = processed, busy_s

    @property
    def work_s_per_batch(self) -> float | None:
        """The seconds one batch keeps a worker busy; None before one is done."""
        return self.busy_s / self.processed if self.processed and self.busy_s > 0 else None

    def as_dict(self) -> dict:
        """batches, span_s, waits, the three rates (batches/s: the loop's, the outputs', what the workers can take)
        and which side set the pace."""
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        waits = self.wait_s + self.drain_s
        loop = self.batches / (span - waits) if self.batches and span > waits else None
        out = self.batches / span if self.batches and span > 0 else None
        per = self.work_s_per_batch
        can = self.workers / per if per and self.workers else None
        # back-pressure is the output side setting the pace, and so are workers that cannot take the loop's rate
        # and a drain of more than two batches' work (a backlog at the end); the drain alone is the last outputs'
        # tail. But submit()'s waits hold the GPU's time too (a loop that never syncs waits for buffers whose copies
        # have not landed): the outputs set the pace only where the workers were busy most of the span
        behind = self.wait_s > OUTPUT_SIDE * span or (can is not None and loop is not None and can < loop) or \
            bool(per and self.drain_s > BACKLOG_DRAIN * per)
        capacity_s = self.worker_s()
        busy = self.busy_s / capacity_s if capacity_s > 0 and self.processed else None
        side = None if not span else "outputs" if behind and (busy is None or busy >= SATURATED) else "loop"
        return {"batches": self.batches, "span_s": round(span, 4), "buffer_wait_s": round(self.wait_s, 4),
                "drain_s": round(self.drain_s, 4), "loop_per_s": loop and round(loop, 3),
                "outputs_per_s": out and round(out, 3), "workers": self.workers,
                "work_ms_per_batch": per and round(1000 * per, 2), "workers_per_s": can and round(can, 3),
                "paced_by": side}

    def line(self) -> str:
        """One line: the rates and which side set the pace, with the knob where it is the outputs."""
        d = self.as_dict()
        if not d["paced_by"] or d["outputs_per_s"] is None:
            return "pace: too few batches to tell"
        loop = f"{d['loop_per_s']:.2f}" if d["loop_per_s"] else "-"
        can = (f"; {d['workers']} workers at {d['work_ms_per_batch']:.0f} ms of work a batch can take "
               f"{d['workers_per_s']:.2f}/s" if d["workers_per_s"] else "")
        if d["paced_by"] == "outputs":
            return (f"pace: set by the outputs: the loop alone went at {loop} batches/s, the outputs at "
                    f"{d['outputs_per_s']:.2f}/s{can} (it waited {d['buffer_wait_s'] + d['drain_s']:.2f} s of "
                    f"{d['span_s']:.2f} s for process()): more workers, split=, or less CPU work per output")
        return (f"pace: set by the loop or the GPU ({d['outputs_per_s']:.2f} batches/s, the loop without its waits "
                f"{loop}/s{can}; the workers kept up, waits {d['buffer_wait_s'] + d['drain_s']:.2f} s of "
                f"{d['span_s']:.2f} s for buffers whose copies or outputs were not done)")
