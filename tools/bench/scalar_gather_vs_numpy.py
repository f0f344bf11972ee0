#!/usr/bin/env python3
"""Our scalar gather against NumPy's, in one run (docs/performance.md, "The scalar gather
against NumPy"; issue 42).

The shape is gather_bench's `scalar_f32`: 256 MiB of float32 params (67,108,864 elements),
16,777,216 random int64 indices, one float per index, on one thread, into an output buffer
that is allocated and touched once and reused by every call. Ours is
`BM_Gather/scalar_f32/pool:0/alloc:0/hugepages:H` (pool:0 runs on the calling thread); NumPy's
is `np.take(params, idx, out=out, mode="clip")`.

Both sides are measured with params on the same kind of page, since that decides the figure
more than any code does: a random element costs an address translation, and on 4 KiB pages
nearly every one misses the TLB. NumPy advises transparent huge pages for every array of
4 MiB and more (its default on Linux); gather_bench's `hugepages:0` case does not, as a parsed
request's bytes are not. So each kind is compared with its like: our `hugepages:1` against
NumPy as it comes, our `hugepages:0` against NumPy with its advice turned off
(np._core.multiarray._set_madvise_hugepage(False)). The last row is the mixed comparison
(ours on 4 KiB pages against NumPy on huge pages), for reference only.

The two run alternately, `--rounds` times (each round: one gather_bench process, its median of
`--repetitions`, then NumPy's median of as many calls), so a machine that slows down mid-run
slows both. Printed: each side's median over the rounds, in millions of elements/s, and their
ratio.

usage: /work/main/.venv/bin/python3 tools/bench/scalar_gather_vs_numpy.py
           [--binary build/tests/bench/gather_bench] [--rounds 5] [--repetitions 3]
       (any Python with NumPy)
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time

import numpy as np

ROWS = (256 << 20) // 4
N = 16 << 20
CASE = "BM_Gather/scalar_f32/pool:0/alloc:0/hugepages:{}/min_time:0.300/real_time"


def set_numpy_hugepages(enabled):
    core = getattr(np, "_core", None) or np.core
    core.multiarray._set_madvise_hugepage(enabled)


def numpy_inputs(huge):
    """Params, indices and a touched output, allocated with NumPy's huge-page advice on/off."""
    set_numpy_hugepages(huge)
    rng = np.random.default_rng(1)
    params = rng.random(ROWS, dtype=np.float32)
    idx = rng.integers(0, ROWS, N, dtype=np.int64)
    out = np.zeros(N, dtype=np.float32)
    set_numpy_hugepages(True)
    np.take(params, idx, out=out, mode="clip")
    if not np.array_equal(out[:1000], params[idx[:1000]]):
        raise SystemExit("np.take gave a wrong answer")
    return params, idx, out


def numpy_rate(inputs, repetitions):
    params, idx, out = inputs
    times = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        np.take(params, idx, out=out, mode="clip")
        times.append(time.perf_counter() - t0)
    return N / statistics.median(times) / 1e6


def ours_rates(binary, repetitions):
    """M elements/s of our scalar case, per page kind (0: 4 KiB, 1: huge), one process."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(
            [binary, "--benchmark_filter=BM_Gather/scalar_f32/pool:0/alloc:0/",
             f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
             f"--benchmark_out={f.name}", "--benchmark_out_format=json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        data = json.load(open(f.name))
    rates = {}
    for b in data["benchmarks"]:
        for huge in (0, 1):
            if b["run_name"] == CASE.format(huge) and b.get("aggregate_name") == "median":
                rates[huge] = b["items_per_second"] / 1e6
    return rates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/tests/bench/gather_bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args()
    np_inputs = {True: numpy_inputs(True), False: numpy_inputs(False)}
    ours = {0: [], 1: []}
    theirs = {True: [], False: []}
    for r in range(args.rounds):
        rates = ours_rates(args.binary, args.repetitions)
        for huge in (0, 1):
            ours[huge].append(rates[huge])
        for huge in (True, False):
            theirs[huge].append(numpy_rate(np_inputs[huge], args.repetitions))
        print(f"round {r + 1}: ours {rates[0]:.1f} (4 KiB) / {rates[1]:.1f} (huge), NumPy "
              f"{theirs[False][-1]:.1f} (4 KiB) / {theirs[True][-1]:.1f} (huge) M elements/s",
              flush=True)
    med = statistics.median
    print()
    print(f"medians of {args.rounds} rounds, M elements/s, one thread, output reused:")
    print()
    print("| params on | ours (gather_bench scalar_f32) | NumPy np.take(out=, mode='clip') | ratio |")
    print("|---|---|---|---|")
    for label, o, t in (("huge pages, both", med(ours[1]), med(theirs[True])),
                        ("4 KiB pages, both", med(ours[0]), med(theirs[False])),
                        ("ours 4 KiB, NumPy huge (mixed)", med(ours[0]), med(theirs[True]))):
        print(f"| {label} | {o:.1f} | {t:.1f} | {o / t:.2f} |")


if __name__ == "__main__":
    main()
