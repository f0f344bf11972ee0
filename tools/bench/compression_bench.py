#!/usr/bin/env python3
"""What gRPC compression costs and saves (--grpc_compression on the server, --compression on
the client), for a compressible and an incompressible table, measured the same way in one run
(docs/performance.md).

usage: tools/bench/compression_bench.py [--build build] [--repetitions 3] [--seconds 3]
                                        [--concurrency 8] [--indices 1024]

Two float32 tables of [65536, 64] (16 MiB): "compressible", small integers 0..7 (as quantized or
sparse embeddings are), and "incompressible", standard normal noise. For each table and each
setting (none, gzip, deflate) it starts build/server/tensorcompute-server with
--grpc_compression=SETTING and --preload of both, runs `tensorcompute load --params-name TABLE
--indices N` (a Gather of N random rows by name: N * 256 B answers) with the client's
--compression the same, and reads the loopback interface's transmitted bytes
(/proc/net/dev) around the run: bytes on the wire per call, both ways, headers included
(nothing else should use the loopback meanwhile). Prints the medians of QPS,
p50 and wire bytes per answer, and QPS and bytes as ratios to the uncompressed run of the same
table (the ceiling: the same bytes, uncompressed, through the same server). Client and server
share this machine's cores: compression's CPU cost shows as lower QPS here; across a slow
network its smaller answers may win instead.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_server import ServerProcess, use_build, wait_serving

ROWS, DIM = 65536, 64
SETTINGS = ["none", "gzip", "deflate"]


def loopback_bytes():
    """Bytes sent over the loopback interface so far (each packet counted once)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[8])  # transmit bytes
    raise RuntimeError("no loopback interface in /proc/net/dev")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--concurrency", default="8")
    ap.add_argument("--indices", default="1024")
    args = ap.parse_args()
    cli = use_build(args.build)
    tmp = tempfile.TemporaryDirectory()
    tables = {}
    for name, expression in (
            ("compressible", "rng.integers(0, 8, (R, D)).astype(np.float32)"),
            ("incompressible", "rng.standard_normal((R, D)).astype(np.float32)")):
        path = os.path.join(tmp.name, f"{name}.npy")
        subprocess.run([sys.executable, "-c", (
            f"import numpy as np, sys; R, D = {ROWS}, {DIM}; rng = np.random.default_rng(1); "
            f"np.save(sys.argv[1], {expression})"), path], check=True)
        tables[name] = path
    preload = ",".join(f"{name}={path}" for name, path in tables.items())
    print(f"{'table':15} {'compression':11} {'QPS':>8} {'ratio':>6} {'p50 us':>8} "
          f"{'wire B/call':>14} {'ratio':>6}   (medians of {args.repetitions} x "
          f"{args.seconds:g} s; {args.indices} rows of {DIM * 4} B per answer, concurrency "
          f"{args.concurrency})")
    for table in tables:
        base = {}
        for setting in SETTINGS:
            with ServerProcess(f"--grpc_compression={setting}", f"--preload={preload}",
                               stop_timeout=60) as server:
                target = server.target
                wait_serving(cli, target)
                runs = []
                for _ in range(args.repetitions):
                    before = loopback_bytes()
                    out = subprocess.run(
                        [cli, "load", "--target", target, "--params-name", table,
                         "--indices", args.indices, "--concurrency", args.concurrency,
                         "--duration", str(args.seconds), "--warmup", "0", "--distinct", "64",
                         "--compression", setting, "--retries", "20", "--json", "-"],
                        capture_output=True, text=True, check=True).stdout
                    wire = loopback_bytes() - before
                    report = json.loads(out.strip().splitlines()[-1])
                    if report["by_code"] != {"OK": report["sent"]}:
                        sys.exit(f"{table} {setting}: {report['by_code']}")
                    # No warmup: every call on the wire is one of `sent`.
                    runs.append((report["qps"], report["latency_us_p50"],
                                 wire / max(1, report["sent"]), report))
            qps = statistics.median(r[0] for r in runs)
            p50 = statistics.median(r[1] for r in runs)
            wire = statistics.median(r[2] for r in runs)
            if setting == "none":
                base = {"qps": qps, "wire": wire}
            print(f"{table:15} {setting:11} {qps:8.0f} {qps / base['qps']:6.2f} {p50:8.0f} "
                  f"{wire:14.0f} {wire / base['wire']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
