#!/usr/bin/env python3
"""Native API versus KServe v2 over gRPC and over HTTP, measured the same way in one run
(docs/performance.md).

usage: tools/bench/protocol_bench.py [--build build] [--repetitions 3] [--seconds 3]

Starts build/server/tensorcompute-server (CPU, defaults) on free ports, then for each case and
concurrency runs `tensorcompute load` once per protocol per repetition, interleaved (native,
kserve, kserve-http, native, ...) so that drift on a shared machine hits all alike, and prints
the medians of QPS and p50/p99 latency, and each KServe form's QPS as a ratio to native's. HTTP
sends tensors with the binary-data extension (as tritonclient.http does) over one keep-alive
connection per client thread.
Cases: a small gather (16 rows of 256 B out of a 256 KiB params tensor sent inline), a large one
(4096 rows of 256 B: 1 MiB out, params 1 MiB inline), and the same lookups from a resident
table (only indices travel).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_server import ServerProcess, random_table, use_build, wait_serving

CASES = [
    ("small inline: 16 x 256 B out, 256 KiB params", ["--rows", "1024", "--slice", "64",
                                                       "--indices", "16"]),
    ("large inline: 4096 x 256 B out, 1 MiB params", ["--rows", "4096", "--slice", "64",
                                                       "--indices", "4096"]),
    ("small by name: 16 x 256 B out of a 64 MiB table", ["--params-name", "tbl",
                                                          "--indices", "16"]),
    ("large by name: 4096 x 256 B out of a 64 MiB table", ["--params-name", "tbl",
                                                            "--indices", "4096"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--concurrency", default="1,16")
    args = ap.parse_args()
    cli = use_build(args.build)
    tmp = tempfile.TemporaryDirectory()
    table = os.path.join(tmp.name, "tbl.npy")
    random_table(table)
    with ServerProcess("--http_listen=127.0.0.1:0", f"--preload=tbl={table}") as server:
        targets = {"native": server.target, "kserve": server.target,
                   "kserve-http": f"127.0.0.1:{server.http_port}"}
        # HTTP has no ListTensors: the table's dtype and shape are given.
        table_shape = ["--dtype", "float32", "--params-shape", "262144,64"]
        wait_serving(cli, server.target)
        print("| case | C | native QPS | gRPC QPS | gRPC / native | HTTP QPS | HTTP / native "
              "| p50 / p99 ms: native | gRPC | HTTP |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, flags in CASES:
            for c in args.concurrency.split(","):
                runs = {"native": [], "kserve": [], "kserve-http": []}
                for _ in range(args.repetitions):
                    for protocol in runs:
                        extra = (table_shape if protocol == "kserve-http" and
                                 "--params-name" in flags else [])
                        out = subprocess.run(
                            [cli, "load", "--target", targets[protocol], *flags, *extra,
                             "--concurrency", c, "--duration", str(args.seconds),
                             "--warmup", "0.5", "--protocol", protocol, "--json", "-"],
                            capture_output=True, text=True, check=True)
                        report = json.loads(out.stdout)
                        if report["errors"]:
                            sys.exit(f"{name} {protocol}: errors {report['by_code']}")
                        runs[protocol].append(report)
                med = {p: {k: statistics.median(r[k] for r in rs)
                           for k in ("qps", "latency_us_p50", "latency_us_p99")}
                       for p, rs in runs.items()}
                n, g, h = med["native"], med["kserve"], med["kserve-http"]

                def lat(m):
                    return f"{m['latency_us_p50'] / 1e3:.2f} / {m['latency_us_p99'] / 1e3:.2f}"
                print(f"| {name} | {c} | {n['qps']:.0f} | {g['qps']:.0f} | "
                      f"{g['qps'] / n['qps']:.2f} | {h['qps']:.0f} | {h['qps'] / n['qps']:.2f} | "
                      f"{lat(n)} | {lat(g)} | {lat(h)} |", flush=True)


if __name__ == "__main__":
    main()
