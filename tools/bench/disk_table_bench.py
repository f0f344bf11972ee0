#!/usr/bin/env python3
"""A table on disk behind its row cache against the disk's own limit and against the same table
held in memory, in one run (issue 43; docs/performance.md, "Tables on disk").

usage: tools/bench/disk_table_bench.py [--build build] [--file /var/tmp/tc-disk-table.npy]
           [--gib 8] [--cache 0.2] [--exponent 1.2] [--keys 2000] [--seconds 20]
           [--warmup 60] [--concurrency 1,16,64] [--memory 1]

1. Lays out FILE, a float32 [rows, 64] .npy of GIB GiB (rows of 256 B; row r holds float32(r)
   in every column, so any answer can be checked), unless it is there at that size.
2. fio: random 4 KiB direct reads of FILE at queue depth 64 through io_uring: the disk's limit.
3. One server holds the table on disk (--preload disk=FILE:disk, a cache of CACHE x the table)
   and, with --memory 1, in memory too (mem=FILE).
4. Requests: Gathers of KEYS rows drawn from a power law of exponent EXPONENT over the rows
   (rank k is asked for with weight 1 / k^EXPONENT; the ranks are scattered over the table by a
   fixed permutation), NVIDIA's parameter server's published profile (2,000 keys, a cache of
   0.2, exponent 1.2; exponent 0 is uniform: nearly every row a miss, the disk-bound case). The
   cache is warmed by WARMUP seconds of them first.
5. For each concurrency C: C threads send requests for SECONDS on the disk table, then on the
   table in memory; printed: requests/s, rows/s, p50/p99 per request, the hit rate (from each
   answer's tc-disk-hits and tc-disk-misses: the distinct rows of a request), the misses served
   per second and their ratio to fio's IOPS, and the disk table's rows/s over the memory's.
Every answer's first row is checked against the file's pattern.
"""
import argparse
import json
import os
import subprocess
import threading
import time

import grpc
import numpy as np

from bench_server import ServerProcess, use_build
from tensorcompute import _common
from tensorcompute.v1 import tensorcompute_pb2_grpc

DIM = 64


def lay_out(path, gib):
    rows = (gib << 30) // (DIM * 4)
    want = 128 + rows * DIM * 4
    if os.path.exists(path) and os.path.getsize(path) == want:
        return rows
    print(f"laying out {path}: {rows} rows of {DIM} float32", flush=True)
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, DIM))
    step = 1 << 20
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        # float32(r): exact up to 2^24, the nearest float32 beyond (NumPy's float32 arange
        # would repeat its start there).
        table[begin:end] = np.arange(begin, end, dtype=np.float64).astype(np.float32)[:, None]
    table.flush()
    del table
    os.sync()  # so that writeback does not share the disk with fio's measurement
    return rows


def fio_iops(path, seconds):
    out = subprocess.run(["fio", "--name=randread", f"--filename={path}", "--rw=randread",
                          "--bs=4k", "--direct=1", "--ioengine=io_uring", "--iodepth=64",
                          f"--runtime={seconds}", "--time_based", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


class Trace:
    """Rows drawn from a power law over `rows` (bounded Zipf by inverse CDF), scattered."""

    def __init__(self, rows, exponent, seed=43):
        weights = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** exponent
        self.cdf = np.cumsum(weights)
        self.cdf /= self.cdf[-1]
        self.scatter = np.random.default_rng(seed).permutation(rows)
        self.rng = np.random.default_rng(seed + 1)
        self.lock = threading.Lock()

    def request(self, keys):
        with self.lock:
            u = self.rng.random(keys)
        return self.scatter[np.searchsorted(self.cdf, u)].astype(np.int64)


def run(stub, table, trace, keys, concurrency, seconds, disk):
    """Requests/s, rows/s, p50 and p99 (ms), hits and misses of `concurrency` threads."""
    latencies, hits, misses, errors = [], [0], [0], []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker():
        mine, my_hits, my_misses = [], 0, 0
        while time.monotonic() < stop:
            rows = trace.request(keys)
            request = _common.gather_request(None, rows, None, 0, table)
            start = time.monotonic()
            try:
                response, call = stub.Gather.with_call(request, timeout=60)
            except grpc.RpcError as error:
                errors.append(f"{error.code()}: {error.details()}")
                return
            mine.append(time.monotonic() - start)
            out = _common.output(response)
            if out[0, 0] != np.float32(rows[0]):
                errors.append(f"row {rows[0]} came back as {out[0, 0]}")
                return
            if disk:
                trailers = dict(call.trailing_metadata())
                my_hits += int(trailers["tc-disk-hits"])
                my_misses += int(trailers["tc-disk-misses"])
        with lock:
            latencies.extend(mine)
            hits[0] += my_hits
            misses[0] += my_misses

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    if errors:
        raise SystemExit(f"{table}: {errors[0]}")
    latencies.sort()
    n = len(latencies)
    return {"requests_s": n / elapsed, "rows_s": n * keys / elapsed,
            "p50_ms": 1000 * latencies[n // 2], "p99_ms": 1000 * latencies[min(n - 1, n * 99 // 100)],
            "hits": hits[0], "misses": misses[0], "misses_s": misses[0] / elapsed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--file", default="/var/tmp/tc-disk-table.npy")
    ap.add_argument("--gib", type=int, default=8)
    ap.add_argument("--cache", type=float, default=0.2)
    ap.add_argument("--exponent", type=float, default=1.2)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--memory", type=int, default=1)
    args = ap.parse_args()
    use_build(args.build)
    rows = lay_out(args.file, args.gib)
    table_bytes = rows * DIM * 4
    cache_bytes = int(args.cache * table_bytes)
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {os.cpu_count()} CPUs; "
          f"table {table_bytes >> 20} MiB, cache {cache_bytes >> 20} MiB", flush=True)
    iops = fio_iops(args.file, 15)
    print(f"fio random 4 KiB direct reads, queue depth 64: {iops:.0f} IOPS", flush=True)
    trace = Trace(rows, args.exponent)
    preload = f"disk={args.file}:disk" + (f",mem={args.file}" if args.memory else "")
    flags = [f"--preload={preload}", f"--table_cache_bytes={cache_bytes}",
             f"--max_resident_bytes={table_bytes * 2 + cache_bytes}",
             "--max_message_bytes=4194304", f"--max_output_bytes={args.keys * DIM * 4 + 4096}"]
    with ServerProcess(*flags, stop_timeout=120) as server:
        channel = grpc.insecure_channel(server.target, options=[
            ("grpc.max_receive_message_length", 64 << 20)])
        stub = tensorcompute_pb2_grpc.TensorComputeStub(channel)
        grpc.channel_ready_future(channel).result(timeout=600)
        print("log:", [line.strip() for line in server.output if "preloaded" in line], flush=True)
        warm = run(stub, "disk", trace, args.keys, 16, args.warmup, True)
        print(f"warm-up {args.warmup:.0f} s: hit rate "
              f"{warm['hits'] / max(1, warm['hits'] + warm['misses']):.3f}", flush=True)
        print(f"{'C':>3} {'table':>5} {'req/s':>8} {'rows/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'hit rate':>8} {'misses/s':>9} {'/ IOPS':>6} {'disk/mem':>8}")
        for c in (int(v) for v in args.concurrency.split(",")):
            disk = run(stub, "disk", trace, args.keys, c, args.seconds, True)
            rate = disk["hits"] / max(1, disk["hits"] + disk["misses"])
            mem = run(stub, "mem", trace, args.keys, c, args.seconds, False) if args.memory else None
            print(f"{c:>3} {'disk':>5} {disk['requests_s']:>8.1f} {disk['rows_s']:>10.0f} "
                  f"{disk['p50_ms']:>8.2f} {disk['p99_ms']:>8.2f} {rate:>8.3f} "
                  f"{disk['misses_s']:>9.0f} {disk['misses_s'] / iops:>6.2f} "
                  f"{disk['rows_s'] / mem['rows_s'] if mem else float('nan'):>8.2f}", flush=True)
            if mem:
                print(f"{c:>3} {'mem':>5} {mem['requests_s']:>8.1f} {mem['rows_s']:>10.0f} "
                      f"{mem['p50_ms']:>8.2f} {mem['p99_ms']:>8.2f}", flush=True)
        channel.close()


if __name__ == "__main__":
    main()
