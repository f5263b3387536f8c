"""A CPU-only program whose first step is slow (warm-up): traced on a machine without a GPU into
tests/data/programs/cpu_warmup_nsys2024.sqlite.xz (nsys-transfer run --sample none --python-backtrace none)."""
import time
import nvtx
for i in range(6):
    with nvtx.annotate(f"step {i}"):
        time.sleep(0.3 if i == 0 else 0.05)
        sum(range(200000))
