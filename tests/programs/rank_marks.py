"""Under torchrun: each rank waits at a barrier, sleeps 0.3 s x its rank, then opens an NVTX range "mark" and writes
the wall-clock time it did so (time.time_ns) to OUT_DIR/rank<RANK>.ns. Per-rank nsys traces of it test clock
alignment. With --cuda (a GPU per rank), each rank starts the CUDA profiler capture right before its mark, so the
ranks' capture ranges begin at different wall-clock times too.

usage: torchrun --nproc-per-node N rank_marks.py OUT_DIR [--cuda]
"""
import os
import sys
import time

import nvtx
import torch
import torch.distributed as dist

out, cuda = sys.argv[1], "--cuda" in sys.argv[2:]
dist.init_process_group("gloo")
rank = dist.get_rank()
if cuda:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
dist.barrier()
time.sleep(0.3 * rank)  # the ranks start their marks at different, known wall-clock times
if cuda:
    torch.cuda.profiler.start()
with nvtx.annotate("mark"):
    wall = time.time_ns()
    if cuda:
        (x * 2).sum().item()
    time.sleep(0.05)
if cuda:
    torch.cuda.profiler.stop()
with open(os.path.join(out, f"rank{rank}.ns"), "w") as f:
    f.write(str(wall))
dist.barrier()
dist.destroy_process_group()
