"""The worker half of an output pipeline: a slot's bytes become the outputs the user's process() sees."""
from __future__ import annotations

import torch

from nsys_transfer.nsys_core.contracts import PROCESS_OUTPUT

from nsys_transfer.fixes.checksums import MASK64, checksum_update
from nsys_transfer.fixes.ranges import nvtx_range
from nsys_transfer.fixes.slots import HostSlots
from nsys_transfer.fixes.tree import Tree, rebuild


class Delivery:
    """Runs in a worker: views of slot `slot` shaped as this batch (rows lo:hi of each when split), their checksum
    when asked, then process(batch_id, outputs) or, split, process(batch_id, outputs, rows)."""

    def __init__(self, process, slots: HostSlots, tree: Tree, tensors: bool, verify: bool):
        self.process, self.slots, self.tree = process, slots, tree
        self.tensors, self.verify = tensors, verify

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
            if rows is None:
                self.process(batch_id, outputs)
            else:
                self.process(batch_id, outputs, range(*rows[part]))
        return total
