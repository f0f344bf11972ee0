#!/usr/bin/env python3
"""What the edge costs: Gathers through deploy/edge/nginx.conf vs straight to the server, in one
run, with the bundled load tester (docs/performance.md, "Edge").

    .venv/bin/python3 tools/bench/edge_bench.py [--build build] [--duration 4] [--repeats 3]

One server (plaintext on loopback, as behind the edge) and the edge in front of it (TLS on its
own port, Debian's nginx with the shipped configuration); a second server with the same TLS
certificate on its own gRPC port, so that "direct, TLS" is what a client would get without the
edge over the same cryptography. Each point: closed loop at concurrency C (1, 16, 64) for
--duration seconds after a 1 s warm-up, the median of --repeats runs (QPS, p99), the three
routes interleaved per repeat so that drift of a shared machine hits them alike. Two sizes, both
from a resident float32 table of 100000 x 64 (only indices travel): 16 rows (4 KiB answers) and
4096 rows (1 MiB answers). Prints a Markdown table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from bench_server import REPO, ServerProcess, use_build
from edge_process import EdgeProcess  # tests/testing, which bench_server puts on the path
from test_certs import make_certs

ROWS, SLICE = 100000, 64
SIZES = [("small (16 rows, 4 KiB)", 16), ("1 MiB (4096 rows)", 4096)]
CONCURRENCIES = [1, 16, 64]


def load(cli, target, tls, rows, concurrency, duration):
    command = [cli, "load", "--target", target, *tls, "--params-name", "table",
               "--indices", str(rows), "--concurrency", str(concurrency), "--connections",
               str(min(concurrency, 4)), "--duration", str(duration), "--warmup", "1",
               "--json", "-"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=duration + 60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}:\n{out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    if report.get("errors"):
        raise RuntimeError(f"errors through {target}: {report}")
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--duration", type=float, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cli = use_build(args.build)

    with tempfile.TemporaryDirectory(prefix="tc-edge-bench-") as tmp:
        certs = make_certs(tmp)
        table = os.path.join(tmp, "table.npy")
        np.save(table, np.random.default_rng(1).random((ROWS, SLICE), dtype=np.float32))
        tls_flags = [f"--tls_cert={certs.server_cert}", f"--tls_key={certs.server_key}"]
        ca = ["--tls-ca", certs.ca]
        with ServerProcess(f"--preload=table={table}", "--http_listen=127.0.0.1:0") as plain, \
                ServerProcess(f"--preload=table={table}", *tls_flags) as tls_server, \
                EdgeProcess(plain, certs.server_cert, certs.server_key) as edge:
            routes = [("direct", plain.target, []),
                      ("direct, TLS", f"localhost:{tls_server.port}", ca),
                      ("edge (TLS)", edge.target, ca)]
            results = {}
            for _, rows in SIZES:
                for c in CONCURRENCIES:
                    for _ in range(args.repeats):
                        for name, target, tls in routes:
                            report = load(cli, target, tls, rows, c, args.duration)
                            results.setdefault((rows, c, name), []).append(report)
                            print(f"  {rows} rows C={c} {name}: "
                                  f"{report['qps']:.0f}/s", file=sys.stderr,
                                  flush=True)

    print("| size | C | direct QPS | p99 ms | direct, TLS QPS | p99 ms | edge QPS | p99 ms |"
          " edge / direct | edge / direct TLS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, rows in SIZES:
        for c in CONCURRENCIES:
            cells = []
            qps = {}
            for name, _, _ in routes:
                reports = results[(rows, c, name)]
                qps[name] = statistics.median(r["qps"] for r in reports)
                p99 = statistics.median(r["latency_us_p99"] for r in reports) / 1000
                cells += [f"{qps[name]:,.0f}", f"{p99:.2f}"]
            print(f"| {label} | {c} | " + " | ".join(cells) +
                  f" | {qps['edge (TLS)'] / qps['direct']:.2f}"
                  f" | {qps['edge (TLS)'] / qps['direct, TLS']:.2f} |")


if __name__ == "__main__":
    main()
