#!/usr/bin/env python3
"""A table sharded over three servers, looked up through one of them (the router), versus the
same table whole on one server, measured the same way in one run (docs/performance.md).

usage: tools/bench/shard_bench.py [--build build] [--repetitions 3] [--seconds 3]
                                  [--concurrency 1,16,64]

Starts four build/server/tensorcompute-server processes on free ports of 127.0.0.1: three
shards of a 64 MiB float32 table T [262144, 64] (--preload T=... --shard_index=I
--shard_count=3, each routing to the others) and one server holding T whole. For each case
and concurrency it runs `tensorcompute load` once per target per repetition, interleaved
(whole, router, whole, ...), and prints the medians of QPS and p99, and the router's QPS as a
ratio to the whole table's. Every server shares this machine's cores with the others and with
the load tester: a router's sub-calls cost the shards' CPU here, where in a deployment each
shard has its own.
Cases: Gather of 16 and of 4096 random rows (256 B each), and EmbeddingBag of the same rows in
bags of 16 (sum), all by name (only indices travel).
Every server runs with --max_message_bytes=4194304 (the requests are at most 32 KiB): with the
default 64 MiB, each call being read holds a 128 MiB receive credit of --max_inflight_bytes, so
64 concurrent callers keep the budget full and a router's larger reservation (its parts' rows)
is refused UNAVAILABLE (overloaded) now and then.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_server import ReservedPorts, ServerProcess, random_table, use_build

CASES = [
    ("gather 16 rows", ["--op", "gather", "--indices", "16"]),
    ("gather 4096 rows", ["--op", "gather", "--indices", "4096"]),
    ("embedding-bag 16 rows (1 bag)", ["--op", "embedding-bag", "--indices", "16",
                                       "--bag-size", "16"]),
    ("embedding-bag 4096 rows (256 bags)", ["--op", "embedding-bag", "--indices", "4096",
                                            "--bag-size", "16"]),
]
SHARDS = 3


# Every server's, beside its own (why: the end of the docstring).
FLAGS = ["--max_message_bytes=4194304"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--concurrency", default="1,16,64")
    args = ap.parse_args()
    cli = use_build(args.build)
    tmp = tempfile.TemporaryDirectory()
    table = os.path.join(tmp.name, "t.npy")
    random_table(table)
    with ReservedPorts(SHARDS) as reservation, contextlib.ExitStack() as servers:
        ports = reservation.numbers
        peers = ",".join(f"ipv4:127.0.0.1:{p}" for p in ports)
        for index, port in enumerate(ports):
            servers.enter_context(ServerProcess(
                *FLAGS, f"--listen=127.0.0.1:{port}", f"--preload=T={table}",
                f"--shard_index={index}", f"--shard_count={SHARDS}", f"--shard_peers={peers}",
                stop_timeout=60))
        whole = servers.enter_context(
            ServerProcess(*FLAGS, f"--preload=T={table}", stop_timeout=60))
        targets = {"whole": whole.target, "router": f"127.0.0.1:{ports[1]}"}
        print(f"{'case':36} {'C':>3} {'whole QPS':>10} {'router QPS':>10} {'ratio':>6} "
              f"{'whole p99':>10} {'router p99':>10}   (p99 in us; medians of "
              f"{args.repetitions} x {args.seconds:g} s)")
        for label, case in CASES:
            for concurrency in args.concurrency.split(","):
                runs = {name: [] for name in targets}
                for _ in range(args.repetitions):
                    for name, target in targets.items():
                        out = subprocess.run(
                            [cli, "load", "--target", target, "--params-name", "T", *case,
                             "--concurrency", concurrency, "--duration", str(args.seconds),
                             "--warmup", "0.5", "--distinct", "64", "--json", "-"],
                            capture_output=True, text=True, check=True).stdout
                        report = json.loads(out.strip().splitlines()[-1])
                        if report["by_code"] != {"OK": report["sent"]}:
                            sys.exit(f"{name} {label}: {report['by_code']}")
                        runs[name].append(report)
                qps = {n: statistics.median(r["qps"] for r in runs[n]) for n in runs}
                p99 = {n: statistics.median(r["latency_us_p99"] for r in runs[n]) for n in runs}
                print(f"{label:36} {concurrency:>3} {qps['whole']:10.0f} {qps['router']:10.0f} "
                      f"{qps['router'] / qps['whole']:6.2f} {p99['whole']:10.0f} "
                      f"{p99['router']:10.0f}", flush=True)


if __name__ == "__main__":
    main()
