"""What the benchmarks in tools/bench share: the build's binaries, and servers started the way
the tests start them.

    from bench_server import ReservedPorts, ServerProcess, use_build, wait_serving
    cli = use_build(args.build)              # ServerProcess now starts BUILD's server
    with ServerProcess("--preload=t=FILE") as server:
        wait_serving(cli, server.target)     # health SERVING: the table is in
        ... `cli load --target server.target ...` ...

A server is tests/testing/server_process.py's ServerProcess: the one place that reads the
server's "port=N" start-up line (and http_port=, metrics_port=), which keeps reading its output
afterwards, so that a chatty server never blocks on a full pipe, and stops it (SIGTERM, then
SIGKILL after `stop_timeout` s) when the `with` block ends. Its metrics endpoint is on a free
port too. Ports that must be known before a server starts (shards listing their peers) come from
tests/testing/reserved_ports.py's ReservedPorts. Importing this module puts tests/testing on
sys.path, so a benchmark may import the other test helpers there (EdgeProcess, make_certs).
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "testing"))

from reserved_ports import ReservedPorts  # noqa: E402,F401 (for the benchmarks)
from server_process import ServerProcess  # noqa: E402,F401


def use_build(build):
    """Makes `build`'s tensorcompute-server the one ServerProcess starts ($TC_SERVER_BINARY),
    and returns the path of its CLI, `tensorcompute`."""
    os.environ["TC_SERVER_BINARY"] = os.path.join(build, "server", "tensorcompute-server")
    return os.path.join(build, "client", "tensorcompute")


def random_table(path, rows=262144, cols=64):
    """Writes a float32 [rows, cols] .npy of standard normal values (seed 1) to `path`, in a child
    process of the same interpreter, so that the benchmark itself never imports NumPy."""
    subprocess.run([sys.executable, "-c", (
        "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).standard_normal("
        "(int(sys.argv[2]), int(sys.argv[3]))).astype(np.float32))"), path, str(rows),
        str(cols)], check=True)


def wait_serving(cli, target, attempts=600):
    """Waits until `tensorcompute health` at `target` says SERVING (a server is NOT_SERVING
    until its --preload tables are in; main.cc prints the start-up line once Server::Start has
    loaded them, so this takes one call): `attempts` tries 0.1 s apart, then returns all the
    same, and the benchmark's first call finds out."""
    for _ in range(attempts):
        health = subprocess.run([cli, "health", "--target", target], capture_output=True,
                                text=True)
        if health.returncode == 0 and "NOT_SERVING" not in health.stdout:
            return
        time.sleep(0.1)
