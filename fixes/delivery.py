"""The worker half of an output pipeline: a slot's bytes become the outputs the user's process() sees."""
from __future__ import annotations

import torch

from ..nsys_core.contracts import PROCESS_OUTPUT

from .checksums import MASK64, checksum_update
from .ranges import nvtx_range
from .slots import HostSlots
from .tree import Tree, rebuild


def _all_rows(shapes) -> range | None:
    """range(n) when every tensor of the batch has n rows (dimension 0), else None."""
    firsts = {shape[0] if shape else None for shape in shapes}
    n = firsts.pop() if len(firsts) == 1 else None
    return range(n) if n is not None else None


class Delivery:
    """Runs in a worker: views of slot `slot` shaped as this batch (rows lo:hi of each when split), their checksum
    when asked, then process(batch_id, outputs) or, split, process(batch_id, outputs, rows) (a batch that goes whole:
    rows = all of them, or None when its tensors differ in dimension 0)."""

    def __init__(self, process, slots: HostSlots, tree: Tree, tensors: bool, verify: bool, split: bool = False):
        self.process, self.slots, self.tree = process, slots, tree
        self.tensors, self.verify, self.split = tensors, verify, split

    def __call__(self, batch_id: int, slot: int, part: int, parts: int, extra):
        """Process part `part` of `parts` of batch `batch_id` from slot `slot`; its checksum when verify is on."""
        shapes, rows, values = extra
        views = self.slots.views(slot, shapes)
        if rows is not None:
            lo, hi = rows[part]
            views = [v[lo:hi] for v in views]
        arrays = views if self.tensors else [v.numpy() for v in views]
        total = None
        if self.verify:
            total = 0
            for a in arrays:
                total = (total + checksum_update(0, a.reshape(-1).view(torch.uint8).numpy() if self.tensors else a)) & MASK64
        outputs = rebuild(self.tree, arrays, values)
        with nvtx_range(PROCESS_OUTPUT):
            if not self.split:
                self.process(batch_id, outputs)
            else:  # one call shape for every batch: one that goes whole gets all its rows (None: no common rows)
                self.process(batch_id, outputs, range(*rows[part]) if rows is not None else _all_rows(shapes))
        return total
