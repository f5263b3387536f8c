"""A CPU-only export loop, written the way such loops are: each batch's features appended to one NumPy array with
np.concatenate (the whole array copied every time, so each batch costs more than the last), a few per-element reads,
and a worker pool for a side job. For the tests of the line attribution on a real capture without a GPU.

usage: python tests/programs/cpu_lines.py [--batches 40] [--rows 4000]
"""
import argparse
import multiprocessing as mp
import time

import numpy as np


def side_job(n):
    return float(np.linalg.norm(np.random.default_rng(n).random((200, 200))))


def features(batch, rows):
    x = np.random.default_rng(batch).random((rows, 256), dtype=np.float32)
    return np.tanh(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--rows", type=int, default=4000)
    args = p.parse_args()
    t0 = time.perf_counter()
    with mp.get_context("fork").Pool(2) as pool:
        side = pool.map(side_job, range(4))
    index = np.zeros((0, 256), np.float32)
    for b in range(args.batches):
        f = features(b, args.rows)
        index = np.concatenate([index, f])
    print(f"RESULT rows={len(index)} side={sum(side):.1f} wall_s={time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()
