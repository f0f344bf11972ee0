#!/usr/bin/env python3
"""Peers' pooled lookups on the shapes of tests/bench/embedding_bag_bench (docs/performance.md,
"Pooled lookups"): a 1 GiB float32 table of 256 B rows (4,194,304 x 64), 262,144 random int64
lookups in bags of 1, 8, 32 and 128, summed. Prints rows read per second, median of 7:

- NumPy: `np.add.reduceat(table.take(idx, axis=0), offsets, axis=0)`, and `take` alone (no
  pooling); one thread (NumPy's take and reduceat use no more).
- TensorFlow, where installed: `tf.nn.embedding_lookup_sparse(table, ids, None,
  combiner="sum")` with the bags as a SparseTensor, eager (a tf.function measured 0.87x of
  it here), on 1 and on 2 intra-op threads (each in a process of its own, since TensorFlow
  fixes its threads at start).

Every peer's answer is checked against NumPy's before it is timed.

usage: .venv/bin/python3 tools/bench/embedding_bag_peers.py
       (any Python with NumPy, and TensorFlow for its rows: pip install tensorflow-cpu)
"""
import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

ROWS, DIM, LOOKUPS = 4 << 20, 64, 256 << 10
BAGS = (1, 8, 32, 128)


def rate(fn, repeats=7):
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return LOOKUPS / statistics.median(times) / 1e6


def inputs():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    idx = rng.integers(0, ROWS, LOOKUPS, dtype=np.int64)
    return table, idx


def numpy_rates(table, idx):
    out = np.empty((LOOKUPS, DIM), dtype=np.float32)
    take = rate(lambda: table.take(idx, axis=0, out=out))
    pooled = {}
    for bag in BAGS:
        offsets = np.arange(0, LOOKUPS, bag, dtype=np.int64)
        pooled[bag] = rate(
            lambda: np.add.reduceat(table.take(idx, axis=0, out=out), offsets, axis=0))
    return take, pooled


def tensorflow_rates(threads):
    """Rows/s per bag size on `threads` intra-op threads; run in a process of its own."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    table, idx = inputs()
    params = tf.constant(table)
    result = {}
    for bag in BAGS:
        bags = LOOKUPS // bag
        positions = np.stack([np.repeat(np.arange(bags), bag), np.tile(np.arange(bag), bags)], 1)
        ids = tf.sparse.SparseTensor(positions, tf.constant(idx), [bags, bag])

        def lookup(ids=ids):
            return tf.nn.embedding_lookup_sparse(params, ids, None, combiner="sum")

        want = np.add.reduceat(table.take(idx, axis=0), np.arange(0, LOOKUPS, bag), axis=0)
        np.testing.assert_allclose(lookup().numpy(), want, rtol=1e-4, atol=1e-4)
        result[bag] = rate(lambda: lookup().numpy())
    return tf.__version__, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensorflow-threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tensorflow_threads:  # the child process
        version, result = tensorflow_rates(args.tensorflow_threads)
        print(version, *(f"{result[b]:.2f}" for b in BAGS))
        return

    table, idx = inputs()
    take, pooled = numpy_rates(table, idx)
    del table
    tf_rates = {}
    for threads in (1, 2):
        try:
            out = subprocess.run([sys.executable, __file__, "--tensorflow-threads", str(threads)],
                                 check=True, capture_output=True, text=True).stdout.split()
            tf_version, tf_rates[threads] = out[0], [float(v) for v in out[1:]]
        except (subprocess.CalledProcessError, IndexError) as error:
            print(f"TensorFlow ({threads} threads) not measured: "
                  f"{getattr(error, 'stderr', '') or error}".strip()[-300:], file=sys.stderr)
    print(f"numpy {np.__version__}" + (f", tensorflow {tf_version}" if tf_rates else "") +
          "; M rows read per second, median of 7")
    print("| bag size | NumPy take alone | NumPy take + add.reduceat |"
          " TensorFlow embedding_lookup_sparse, 1 / 2 threads |")
    print("|---|---|---|---|")
    for i, bag in enumerate(BAGS):
        tf_cell = " / ".join(f"{tf_rates[t][i]:.1f}" for t in (1, 2) if t in tf_rates) or "-"
        print(f"| {bag} | {take:.1f} | {pooled[bag]:.1f} | {tf_cell} |")


if __name__ == "__main__":
    main()
