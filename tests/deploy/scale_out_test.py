"""Scale-out on one machine: what Kubernetes does with replicas, done with processes on
loopback, asserting that nothing is lost.

Three tensorcompute-server replicas; the bundled load tester (`tensorcompute load`) drives all
three with client-side round-robin and retries on UNAVAILABLE (gathers are idempotent).

  1. Before any fault, every replica serves a fair share (each at least 20%), read from each
     replica's own Prometheus counters.
  2. Mid-run, SIGTERM one replica: it drains (exit 0, its log says so); no request fails.
  3. Then SIGKILL another: calls in flight to it fail over by retry; the run still ends with
     every request answered OK (sent = OK), and the survivor carries the rest.

The figures (requests, QPS, retries, errors, shares) are printed in the test output.
Run by ctest from tests/deploy (tests/testing on PYTHONPATH) with TC_SERVER_BINARY and
TC_CLI_BINARY set.
"""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

from child_process import popen
from prometheus_scrape import requests_ok, scrape
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")
REPLICAS = 3
# Retries: with two replicas down, an attempt may meet both before the survivor.
RETRIES = 6


def load_command(targets, *args):
    return [CLI, "load", "--target", ",".join(targets), "--retries", str(RETRIES),
            "--timeout", "20", "--concurrency", "12", "--rows", "1024", "--slice", "16",
            "--indices", "64", "--warmup", "0", "--progress-interval", "1", *args]


def summary(label, report):
    return (f"{label}: sent={report['sent']} OK={report['by_code'].get('OK', 0)} "
            f"errors={report['errors']} retries={report['retries']} "
            f"qps={report['qps']:.0f} seconds={report['seconds']:.1f} by_code={report['by_code']}")


class ScaleOutTest(unittest.TestCase):
    def setUp(self):
        if not CLI or not os.path.exists(CLI):
            self.skipTest(f"TC_CLI_BINARY not set or missing: {CLI!r}")
        self.tmp = tempfile.TemporaryDirectory(prefix="scale_out_test.")
        self.replicas = []
        for _ in range(REPLICAS):
            replica = ServerProcess("--cpu_threads=1", "--drain_timeout_s=10")
            replica.__enter__()
            self.replicas.append(replica)

    def tearDown(self):
        for replica in self.replicas:
            if replica._process.poll() is None:
                replica.__exit__(None, None, None)
        self.tmp.cleanup()

    def test_replicas_share_load_and_survive_each_other(self):
        targets = [r.target for r in self.replicas]

        # --- 1. fair shares before any fault -----------------------------------------------
        before = [requests_ok(scrape(r.metrics_port)) for r in self.replicas]
        run = subprocess.run(load_command(targets, "--requests", "6000", "--json", "-"),
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        report = json.loads(run.stdout)
        print(summary("scale-out phase 1 (3 replicas)", report), flush=True)
        self.assertEqual(report["by_code"], {"OK": 6000})
        served = [requests_ok(scrape(r.metrics_port)) - b for r, b in zip(self.replicas, before)]
        shares = [s / sum(served) for s in served]
        print("scale-out phase 1 shares: " + ", ".join(f"{s:.1%}" for s in shares), flush=True)
        self.assertEqual(sum(served), 6000)
        for share in shares:
            self.assertGreaterEqual(share, 0.20)

        # --- 2 and 3. SIGTERM one replica, then SIGKILL another, under load ------------------
        survivor = self.replicas[2]
        survivor_before = requests_ok(scrape(survivor.metrics_port))
        report_path = os.path.join(self.tmp.name, "report.json")
        load = popen(load_command(targets, "--duration", "9", "--json", report_path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(2.5)
        drained = self.replicas[0]._process
        drained.send_signal(signal.SIGTERM)
        self.assertEqual(drained.wait(timeout=30), 0, "the SIGTERMed replica must exit 0")
        time.sleep(1.0)
        drained_log = "".join(self.replicas[0].output)
        self.assertIn("received SIGTERM, draining", drained_log)
        self.assertIn("drained:", drained_log)
        time.sleep(1.0)
        killed = self.replicas[1]._process
        killed.send_signal(signal.SIGKILL)
        self.assertEqual(killed.wait(timeout=10), -signal.SIGKILL)
        killed_at = time.monotonic()

        _, stderr = load.communicate(timeout=300)
        self.assertEqual(load.returncode, 0, stderr)
        with open(report_path) as f:
            report = json.load(f)
        survivor_served = requests_ok(scrape(survivor.metrics_port)) - survivor_before
        print(summary("scale-out phase 2 (SIGTERM one, SIGKILL another)", report), flush=True)
        print(f"scale-out phase 2: survivor answered {survivor_served} of {report['sent']} "
              f"({survivor_served / max(report['sent'], 1):.1%}); the load ran "
              f"{time.monotonic() - killed_at:.1f} s after the SIGKILL", flush=True)

        # Nothing lost: every request sent was answered OK, through retries where needed.
        self.assertGreater(report["sent"], 0)
        self.assertEqual(report["by_code"], {"OK": report["sent"]}, stderr)
        self.assertEqual(report["errors"], 0)
        self.assertEqual(report["unexpected"], 0)
        # Two of three replicas went away mid-run: the survivor carried more than its third.
        self.assertGreater(survivor_served, report["sent"] / REPLICAS)
        self.assertEqual(survivor._process.poll(), None, "the survivor must still be up")


if __name__ == "__main__":
    unittest.main()
