"""A small CPU program for real nsys recordings: NVTX steps with file and memory work inside.

usage: nvtx_steps.py STEPS OUT_DIR   (writes and reads files in OUT_DIR, maps and frees memory)
"""
import mmap
import os
import sys
import time

import nvtx

steps, out = int(sys.argv[1]), sys.argv[2]
os.makedirs(out, exist_ok=True)
for i in range(steps):
    with nvtx.annotate(f"Batch {i}", color="purple"):
        with nvtx.annotate("get batch", color="green"):
            buf = mmap.mmap(-1, 32 << 20)  # fresh anonymous mapping, touched page by page
            buf.write(b"x" * (32 << 20))
        with nvtx.annotate("process output", color="yellow"):
            path = os.path.join(out, f"batch_{i}.bin")
            with open(path, "wb") as f:
                f.write(buf[:])
                f.flush()
                os.fsync(f.fileno())
            buf.close()
            time.sleep(0.02)
print(f"done {steps} steps")
