"""The stack sampler's own time per sample (profiling/stack-sampler), with the GIL held: the main thread 40 frames
deep, 4 threads waiting 20 frames deep; then as in an import (a spawned worker's start), where every sample's stack
is new: the main thread inside the body of a large module (3,000 functions), its callers walked again each sample.
Prints microseconds per sample; at the default 10 ms period, us / 100 is the percentage of one core.

usage:  python benchmarks/stack_sampler_cost.py
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "profiling", "stack-sampler"))
import nsys_transfer_pystacks as sampler  # loaded by path, as the traced program loads it

SAMPLES = 3000


def nested(depth, work):
    return work() if depth == 0 else nested(depth - 1, work)


def main():
    stop = threading.Event()
    for _ in range(4):
        threading.Thread(target=lambda: nested(20, stop.wait), daemon=True).start()
    out = tempfile.mkdtemp()
    s = sampler.Sampler(out, 0.01)
    s.fd = os.open(os.path.join(out, "x.stacks"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    def measure():
        t = time.perf_counter()
        for _ in range(SAMPLES):
            s._sample()
            if len(s.lines) > 1000:
                s.lines.clear()
        return (time.perf_counter() - t) / SAMPLES * 1e6
    print(f"{nested(40, measure):.1f} us per sample (1 thread 40 frames deep, 4 waiting 20 deep)")

    def measure_new_stacks():
        t = time.perf_counter()
        for _ in range(SAMPLES):
            s.last = {}  # as if every thread had moved on: an import's stacks are new at each sample
            s._sample()
            if len(s.lines) > 1000:
                s.lines.clear()
        return (time.perf_counter() - t) / SAMPLES * 1e6
    body = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(3000)) + "\nresult = nested(30, measure)\n"
    scope = {"nested": nested, "measure": measure_new_stacks}
    exec(compile(body, "/tmp/big_module.py", "exec"), scope)
    print(f"{scope['result']:.1f} us per sample (the same, the main thread inside a 3,000-function module's body, every "
          "stack walked again)")
    stop.set()


if __name__ == "__main__":
    main()
