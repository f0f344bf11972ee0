#!/usr/bin/env python3
"""Soak: tensorcompute-server at a multiple of its measured capacity, for a long time.

Starts the server, measures its capacity (closed loop, --capacity-seconds, over --connections
connections), then drives it with the bundled load tester in open loop at --factor times that
rate for --duration seconds, every call with a deadline of --deadline seconds, while sampling
the server's RSS and open file descriptors every second. Asserts, and prints as one JSON object
(with the CPUs the server and everything else used meanwhile):

  - none lost and none hung: every call sent was answered (the load tester's `sent` equals
    the sum of its answers by code), and none took longer than its deadline (+10% slack);
  - every answer is OK or the documented overload code (UNAVAILABLE "server overloaded");
  - RSS and open fds stay flat: after a warm-up (the first tenth, at least 5 s), the last
    third's lowest RSS no higher than the first third's peak (or its floor + --rss-growth-mib),
    the peak under --max-rss-mib, and at most 8 fds more at the end than at the start;
  - the server is still SERVING afterwards, and then drains and exits 0.

  python3 tests/server/soak.py --duration 600           # the full run (docs/reliability.md)
  python3 tests/server/soak.py --duration 60            # what CI runs (ctest: soak_test)

Exit status 0 when every invariant holds, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))

from server_process import ServerProcess  # noqa: E402

REQUEST = ["--rows", "256", "--slice", "64", "--indices", "1024"]  # 64 KiB params, 256 KiB out


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def machine_busy_seconds():
    """CPU seconds spent on all CPUs of the machine, not idle, since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def load(cli, port, args, *flags):
    command = [cli, "load", "--target", f"127.0.0.1:{port}", *REQUEST, "--warmup", "0",
               "--connections", str(args.connections),
               "--progress-interval", "10", "--json", "-", *flags]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({run.returncode}):\n{run.stderr}")
    return json.loads(run.stdout)


def soak(server, cli, args, flags, failures):
    """Measures the capacity of the running `server`, drives it at args.factor times that, and
    returns the summary; adds what went wrong to `failures`."""
    port = server.port
    capacity = load(cli, port, args, "--concurrency", "16",
                    "--duration", str(args.capacity_seconds))
    rate = args.factor * capacity["qps"]

    samples = []  # (seconds since start, rss MiB, fds)
    stop = threading.Event()

    def sample():
        t0 = time.monotonic()
        while not stop.is_set():
            samples.append((time.monotonic() - t0, rss_mib(server.pid), open_fds(server.pid)))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # Who used the CPUs meanwhile: the server, and everything else (the load tester, and
    # whatever else runs on the machine: on a shared machine, the capacity measured at the
    # start may not hold for the whole run).
    server_cpu0, machine_cpu0, wall0 = server.cpu_seconds(), machine_busy_seconds(), \
        time.monotonic()
    report = load(cli, port, args, "--rate", f"{rate:.0f}", "--duration", str(args.duration),
                  "--timeout", str(args.deadline), "--max-outstanding", "100000")
    stop.set()
    sampler.join()
    wall = time.monotonic() - wall0
    server_cpus = (server.cpu_seconds() - server_cpu0) / wall
    other_cpus = (machine_busy_seconds() - machine_cpu0) / wall - server_cpus

    health = subprocess.run([cli, "health", "--target", f"127.0.0.1:{port}"],
                            capture_output=True, text=True)

    answered = sum(report["by_code"].values())
    # Flatness is judged after a warm-up (the first tenth, at least 5 s): gRPC's buffers and
    # malloc's free lists fill within seconds of the load starting, from ~25 MiB idle.
    warm = [s for s in samples if s[0] >= max(5.0, args.duration / 10)] or samples
    third = max(1, len(warm) // 3)
    early, late = warm[:third], warm[-third:]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    summary = {
        "duration_s": report["seconds"],
        "capacity_qps": round(capacity["qps"]),
        "offered_qps": round(rate),
        "connections": args.connections,
        "server_flags": flags,
        "sent": report["sent"],
        "answered": answered,
        "not_sent": report["not_sent"],
        "by_code": report["by_code"],
        "answered_qps": round(report["qps"]),
        "latency_ms_p50": round(report["latency_us_p50"] / 1000, 2),
        "latency_ms_p99": round(report["latency_us_p99"] / 1000, 2),
        "latency_ms_max": round(report["latency_us_max"] / 1000, 2),
        "deadline_ms": args.deadline * 1000,
        "rss_mib_start": round(samples[0][1], 1),
        "rss_mib_peak": round(max(s[1] for s in samples), 1),
        "rss_mib_end": round(samples[-1][1], 1),
        "rss_mib_early_mean": round(mean([s[1] for s in early]), 1),
        "rss_mib_late_mean": round(mean([s[1] for s in late]), 1),
        "rss_mib_early_floor": round(min(s[1] for s in early), 1),
        "rss_mib_early_peak": round(max(s[1] for s in early), 1),
        "rss_mib_late_floor": round(min(s[1] for s in late), 1),
        "rss_mib_every_tenth": [round(samples[len(samples) * i // 10][1])
                                for i in range(10)],
        "fds_start": samples[0][2],
        "fds_peak": max(s[2] for s in samples),
        "fds_end": samples[-1][2],
        "cpus_busy_server": round(server_cpus, 2),
        "cpus_busy_others": round(other_cpus, 2),
        "cpus": os.cpu_count(),
        "health_after": health.stdout.strip(),
    }

    if answered != report["sent"]:
        failures.append(f"{report['sent'] - answered} calls sent but never answered")
    if report["not_sent"]:
        failures.append(f"{report['not_sent']} calls not sent (client max-outstanding)")
    bad_codes = {c: n for c, n in report["by_code"].items() if c not in ("OK", "UNAVAILABLE")}
    if bad_codes:
        failures.append(f"answers other than OK or UNAVAILABLE: {bad_codes}")
    if report["latency_us_max"] > args.deadline * 1.1e6:
        failures.append(f"a call took {summary['latency_ms_max']} ms, past its deadline")
    if summary["rss_mib_peak"] > args.max_rss_mib:
        failures.append(f"RSS peaked at {summary['rss_mib_peak']} MiB > {args.max_rss_mib}")
    # Flat: RSS moves with what gRPC has buffered at the moment (up to
    # max_concurrent_streams calls per connection), which on a busy machine swings between
    # ~35 and ~250 MiB within seconds; the server gives freed memory back every
    # --malloc_trim_interval_s (10 s), so the lowest sample of a stretch is about what
    # stays in use. A leak lifts that floor above anything the same load needed early on:
    # the last third's floor must stay within the first third's range (its peak, or its
    # floor + --rss-growth-mib). The peak is bounded separately.
    ceiling = max(summary["rss_mib_early_peak"],
                  summary["rss_mib_early_floor"] + args.rss_growth_mib)
    if summary["rss_mib_late_floor"] > ceiling:
        failures.append("RSS grew: late floor {} MiB above the early range {}-{} MiB".format(
            summary["rss_mib_late_floor"], summary["rss_mib_early_floor"], ceiling))
    if summary["fds_end"] > summary["fds_start"] + 8:
        failures.append(f"open fds grew from {summary['fds_start']} to {summary['fds_end']}")
    if health.returncode != 0:
        failures.append(f"not SERVING afterwards: {summary['health_after']}")
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--capacity-seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=4,
                        help="client connections, for the capacity and the soak alike")
    parser.add_argument("--max-rss-mib", type=float, default=512)
    parser.add_argument("--rss-growth-mib", type=float, default=32,
                        help="how far the late RSS floor may rise above the early floor "
                             "(or up to the early peak, if that is higher)")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra server flag (repeatable)")
    args = parser.parse_args()

    server_binary = os.environ.get("TC_SERVER_BINARY",
                                   os.path.join(args.build, "server", "tensorcompute-server"))
    cli = os.environ.get("TC_CLI_BINARY", os.path.join(args.build, "client", "tensorcompute"))
    # One CPU thread: the load tester gets the other core. A queue that drains well within the
    # deadline: beyond it the server refuses at once (UNAVAILABLE) instead of letting calls
    # wait past their deadline. 64 calls per connection: what gRPC buffers before the server
    # sees a call (request, response and its serialized copy: ~580 KiB here) is bounded by
    # connections x max_concurrent_streams; at the default 256, a CPU-starved server could
    # hold ~580 MiB of it (one 60 s run peaked at 543 MiB), at 64 about 145 MiB.
    flags = ["--cpu_threads=1", "--queue_capacity=64", "--max_concurrent_streams=64",
             *args.server_flag]
    server = ServerProcess("--metrics_listen=", *flags, binary=server_binary, stop_timeout=60)
    failures = []
    summary = None
    try:
        with server:
            summary = soak(server, cli, args, flags, failures)
        code = server.returncode
    except subprocess.TimeoutExpired:  # still running 60 s after SIGTERM
        if summary is None:
            raise  # the soak itself failed first
        code = "killed after 60 s"
    if code != 0:
        failures.append(f"server exit code {code} after SIGTERM")
    summary["server_exit"] = code
    summary["failures"] = failures
    print(json.dumps(summary, indent=2))
    if failures:
        print("soak: FAILED\n" + "".join(server.output[-20:]), file=sys.stderr)
        return 1
    print("soak: every invariant held", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
