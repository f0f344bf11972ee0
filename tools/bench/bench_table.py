#!/usr/bin/env python3
"""Runs gather_bench and prints its medians as the Markdown table of docs/performance.md.

usage: tools/bench/bench_table.py [path/to/gather_bench] [--repetitions N]

Each row is one case; each cell is the median over the repetitions of the case's output
bytes/s divided by the memcpy bytes/s measured at the start of the same run (vs_memcpy), or
millions of elements/s for the scalar gather, on one thread / split over the pool.
"""
import argparse
import json
import subprocess
import sys
import tempfile

CASES = [
    ("rows_8B", "gather axis 0, rows of 8 B"),
    ("rows_64B", "gather axis 0, rows of 64 B"),
    ("rows_128B", "gather axis 0, rows of 128 B"),
    ("rows_256B", "gather axis 0, rows of 256 B"),
    ("rows_1KiB", "gather axis 0, rows of 1 KiB"),
    ("rows_64KiB", "gather axis 0, rows of 64 KiB"),
    ("scalar_f32", "scalar gather, M elements/s"),
    ("gather_nd_depth2_256B", "gather_nd depth 2, rows of 256 B"),
    ("batch_dims1_1KiB", "gather batch_dims=1, rows of 1 KiB"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default="build/tests/bench/gather_bench")
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run(
            [args.binary, f"--benchmark_repetitions={args.repetitions}",
             "--benchmark_report_aggregates_only=true",
             f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
            stdout=subprocess.PIPE, text=True, check=True)
        ceiling = next((l for l in proc.stdout.splitlines() if l.startswith("memcpy")), "")
        data = json.load(open(out.name))
    med = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        med[b["run_name"]] = b
    print(ceiling)
    print()
    for huge in (0, 1):
        for alloc in (0, 1):
            print(f"params on {'huge' if huge else '4 KiB'} pages, output "
                  f"{'allocated per call' if alloc else 'reused'}; 1 thread / pool:")
            print()
            print("| case | tensorcompute |")
            print("|---|---|")
            for key, title in CASES:
                cells = []
                for pool in (0, 1):
                    name = (f"BM_Gather/{key}/pool:{pool}/alloc:{alloc}/hugepages:{huge}"
                            "/min_time:0.300/real_time")
                    b = med.get(name)
                    if b is None:
                        cells.append("?")
                    elif key == "scalar_f32":
                        cells.append(f"{b['items_per_second'] / 1e6:.0f}")
                    else:
                        cells.append(f"{b['vs_memcpy']:.2f}")
                print(f"| {title} | {' / '.join(cells)} |")
            print()
    memcpy = med.get("BM_Memcpy/min_time:0.300/real_time")
    if memcpy:
        print(f"BM_Memcpy (same run, as a check on the ceiling): {memcpy['vs_memcpy']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
