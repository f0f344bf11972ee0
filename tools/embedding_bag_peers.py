#!/usr/bin/env python3
"""NumPy's pooled lookup on the shapes of tests/bench/embedding_bag_bench (docs/performance.md,
"Pooled lookups"): a 1 GiB float32 table of 256 B rows (4,194,304 x 64), 262,144 random int64
lookups in bags of 1, 8, 32 and 128, summed as `np.add.reduceat(table.take(idx, axis=0),
offsets, axis=0)`, and `take` alone (no pooling). Prints rows read per second, median of 7,
one thread (NumPy's take and reduceat do not use more).

usage: .venv/bin/python3 tools/embedding_bag_peers.py
"""
import statistics
import time

import numpy as np

ROWS, DIM, LOOKUPS = 4 << 20, 64, 256 << 10


def rate(fn, repeats=7):
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return LOOKUPS / statistics.median(times) / 1e6


def main():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    idx = rng.integers(0, ROWS, LOOKUPS, dtype=np.int64)
    out = np.empty((LOOKUPS, DIM), dtype=np.float32)
    print(f"numpy {np.__version__}; M rows read per second, median of 7, one thread")
    print("| bag size | NumPy take alone | NumPy take + add.reduceat |")
    print("|---|---|---|")
    take = rate(lambda: table.take(idx, axis=0, out=out))
    for bag in (1, 8, 32, 128):
        offsets = np.arange(0, LOOKUPS, bag, dtype=np.int64)
        pooled = rate(lambda: np.add.reduceat(table.take(idx, axis=0, out=out), offsets, axis=0))
        print(f"| {bag} | {take:.1f} | {pooled:.1f} |")


if __name__ == "__main__":
    main()
