"""GpuScalars: per-step values (a loss, a count, a metric) kept on the GPU and read in one copy every N steps, so the
loop never waits for the GPU to read them (the host-sync finding: .item() or .cpu() on a scalar every step)."""
from __future__ import annotations

import torch


class GpuScalars:
    """    scalars = GpuScalars(every=50)
        for batch in loader:
            loss = ...
            scalars.add(loss=loss, correct=(pred == y).sum())   # instead of loss.item()
            for row in scalars.ready():                          # the rows whose copy has landed, never waits
                log(row)
        totals = scalars.values()                                # {"loss": [...], "correct": [...]}, waits once

    Every `every` adds, the rows are stacked on the GPU and copied with non_blocking=True into pinned memory; an
    event says when they have landed. Values are read as float64 (exact for counts below 2**53)."""

    def __init__(self, every: int = 50):
        if every < 1:
            raise ValueError("every must be at least 1")
        self.every = every
        self.names: tuple | None = None
        self._rows: list = []
        self._pending: list = []   # (host tensor, event or None) per flushed block
        self._done: list[dict] = []
        self._handed = 0

    def add(self, **values) -> None:
        """One step's values (0-dim tensors on one device, or numbers); the same names every step."""
        names = tuple(values)
        if self.names is None:
            self.names = names
        elif names != self.names:
            raise ValueError(f"GpuScalars.add got {names}, the first step gave {self.names}")
        self._rows.append([torch.as_tensor(v).detach().reshape(()).to(torch.float64) if isinstance(v, torch.Tensor)
                           else torch.tensor(float(v), dtype=torch.float64) for v in values.values()])
        if len(self._rows) >= self.every:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        device = next((t.device for r in rows for t in r if t.device.type == "cuda"), None)
        block = torch.stack([torch.stack([t.to(device) if device else t for t in r]) for r in rows])
        if device is None:
            self._pending.append((block, None))
            return
        host = torch.empty(block.shape, dtype=block.dtype, pin_memory=True)
        host.copy_(block, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending.append((host, event))

    def ready(self) -> list[dict]:
        """The rows that have landed since the last call, as {name: value}; never waits."""
        while self._pending and (self._pending[0][1] is None or self._pending[0][1].query()):
            host, _ = self._pending.pop(0)
            self._done += [dict(zip(self.names, row)) for row in host.tolist()]
        out, self._handed = self._done[self._handed:], len(self._done)
        return out

    def values(self) -> dict[str, list[float]]:
        """Every value added so far, by name; waits for the copies still in flight (once, at the end)."""
        self._flush()
        for _, event in self._pending:
            if event is not None:
                event.synchronize()
        self.ready()
        return {n: [row[n] for row in self._done] for n in (self.names or ())}
