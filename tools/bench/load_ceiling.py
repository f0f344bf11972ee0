#!/usr/bin/env python3
"""The load tester's own ceiling, and the server's throughput measured with it.

Starts tensorcompute-echo-server (answers every call with its request bytes, computes nothing)
and tensorcompute-server, then runs `tensorcompute load` against each, back to back, for every
case and concurrency, --repetitions times. With --pin (default on machines with >= 2 cores) the
load tester runs on CPU 0 and the server under test on the other CPUs, so neither steals the
other's core. Besides QPS it records CPU time per call: the load tester's (from rusage) and the
server's (from /proc/PID/stat). The load tester can drive more than the server can take when
its QPS against the echo is above the server's, and its CPU per call below the server's.

Prints a Markdown table of medians (docs/performance.md, "Load tester").

  python3 tools/bench/load_ceiling.py [--build build] [--duration 3] [--repetitions 3]
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess

from bench_server import ServerProcess, use_build

CASES = {
    # name: load flags (float32 params, int32 indices, gather on axis 0)
    "small (1 KiB params, 16 rows of 16 B)": ["--rows", "64", "--slice", "4", "--indices", "16"],
    "medium (64 KiB params, 64 rows of 1 KiB)": ["--rows", "64", "--slice", "256",
                                                 "--indices", "64"],
}


@contextlib.contextmanager
def on_cpus(cpus):
    """This thread on the CPUs in the set `cpus` meanwhile (None: as it is). A process or
    thread inherits the CPU affinity of the thread that starts it: servers started here run on
    `cpus` (and so do the threads that read their output, which have little to do)."""
    if cpus is None:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(cli, port, flags, args, pin, server_pid):
    command = [cli, "load", "--target", f"127.0.0.1:{port}", *flags,
               "--duration", str(args.duration), "--warmup", "1", "--json", "-",
               "--connections", "2"]
    if pin is not None:
        command = ["taskset", "-c", pin, *command]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(server_pid)
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    server_cpu = cpu_seconds(server_pid) - server_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(out)
    calls = sum(report["by_code"].values())
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    bad = {k: v for k, v in report["by_code"].items() if k != "OK"}
    if bad:
        raise RuntimeError(f"errors during the run: {bad}")
    # CPU per call over the whole run, warmup included (calls in warmup are not counted, so
    # this overstates both sides alike by about warmup / (warmup + duration)).
    total_calls = calls * (1 + 1 / args.duration)
    return report["qps"], 1e6 * client_cpu / total_calls, 1e6 * server_cpu / total_calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--duration", type=float, default=3)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--pin", default=os.cpu_count() >= 2, action=argparse.BooleanOptionalAction)
    args = parser.parse_args()
    cli = use_build(args.build)
    client_pin = "0" if args.pin else None
    server_cpus = set(range(1, os.cpu_count())) if args.pin else None
    with contextlib.ExitStack() as servers:
        with on_cpus(server_cpus):
            echo = servers.enter_context(ServerProcess(
                binary=os.path.join(args.build, "tests", "client", "tensorcompute-echo-server")))
            server = servers.enter_context(ServerProcess())
        print(f"| case | C | load tester vs echo (QPS) | tensorcompute-server (QPS) | "
              f"server / ceiling | tester CPU per call (us) | server CPU per call (us) |",
              flush=True)
        print("|---|---:|---:|---:|---:|---:|---:|")
        for case, flags in CASES.items():
            for c in [int(x) for x in args.concurrency.split(",")]:
                rows = {"echo": [], "server": []}
                for rep in range(args.repetitions):
                    for name, process in (("echo", echo), ("server", server)):
                        rows[name].append(run_load(cli, process.port,
                                                   flags + ["--concurrency", str(c)],
                                                   args, client_pin, process.pid))
                median = lambda name, i: statistics.median(r[i] for r in rows[name])
                print(f"| {case} | {c} | {median('echo', 0):,.0f} | {median('server', 0):,.0f} | "
                      f"{median('server', 0) / median('echo', 0):.2f} | "
                      f"{median('server', 1):.1f} | {median('server', 2):.1f} |", flush=True)


if __name__ == "__main__":
    main()
