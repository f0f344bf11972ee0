#!/usr/bin/env python3
"""Native API versus KServe v2 over gRPC, measured the same way in one run (docs/performance.md).

usage: tools/protocol_bench.py [--build build] [--repetitions 3] [--seconds 3]

Starts build/server/tensorcompute-server (CPU, defaults) on free ports, then for each case and
concurrency runs `tensorcompute load` once per protocol per repetition, interleaved (native,
kserve, native, kserve, ...) so that drift on a shared machine hits both alike, and prints the
medians of QPS, received bytes/s and p50/p99 latency, and KServe's QPS as a ratio to native's.
Cases: a small gather (16 rows of 256 B out of a 256 KiB params tensor sent inline), a large one
(4096 rows of 256 B: 1 MiB out, params 1 MiB inline), and the same lookups from a resident
table (only indices travel).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

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
    server_bin = os.path.join(args.build, "server", "tensorcompute-server")
    cli = os.path.join(args.build, "client", "tensorcompute")
    tmp = tempfile.TemporaryDirectory()
    table = os.path.join(tmp.name, "tbl.npy")
    subprocess.run([sys.executable, "-c", (
        "import numpy as np, sys; np.save(sys.argv[1], "
        "np.random.default_rng(1).standard_normal((262144, 64)).astype(np.float32))"), table],
        check=True)
    server = subprocess.Popen([server_bin, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                               f"--preload=tbl={table}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in server.stdout:
        m = re.search(r"\bport=(\d+)", line)
        if m:
            port = m.group(1)
            break
    for _ in range(600):  # SERVING once the table is loaded
        if subprocess.run([cli, "health", "--target", f"127.0.0.1:{port}"],
                          capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    try:
        print(f"| case | C | native QPS | KServe QPS | KServe / native | native p50 / p99 ms "
              f"| KServe p50 / p99 ms |")
        print("|---|---|---|---|---|---|---|")
        for name, flags in CASES:
            for c in args.concurrency.split(","):
                runs = {"native": [], "kserve": []}
                for _ in range(args.repetitions):
                    for protocol in runs:
                        out = subprocess.run(
                            [cli, "load", "--target", f"127.0.0.1:{port}", *flags,
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
                n, k = med["native"], med["kserve"]
                print(f"| {name} | {c} | {n['qps']:.0f} | {k['qps']:.0f} | "
                      f"{k['qps'] / n['qps']:.2f} | {n['latency_us_p50'] / 1e3:.2f} / "
                      f"{n['latency_us_p99'] / 1e3:.2f} | {k['latency_us_p50'] / 1e3:.2f} / "
                      f"{k['latency_us_p99'] / 1e3:.2f} |", flush=True)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
