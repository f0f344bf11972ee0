"""The Prometheus endpoint of the real tensorcompute-server, scraped over HTTP and parsed with
prometheus_client's parser (not by us): the families are there with the right types, and the
counters move by exactly what was sent.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY and
TC_CLI_BINARY set.
"""

import json
import os
import subprocess
import tempfile
import unittest
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from prometheus_scrape import labels, scrape
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")


def write(directory, name, obj):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not CLI or not os.path.exists(CLI):
            raise unittest.SkipTest(f"TC_CLI_BINARY not set or missing: {CLI!r}")
        cls.tmp = tempfile.TemporaryDirectory(prefix="metrics_test.")
        d = cls.tmp.name
        cls.params = write(d, "params.json", {"dtype": "float32", "shape": [3, 2],
                                              "values": [1, 2, 3, 4, 5, 6]})
        cls.indices = write(d, "indices.json", {"dtype": "int64", "values": [2, -3]})
        cls.bad_indices = write(d, "bad.json", {"dtype": "int64", "values": [7]})
        cls.nd_indices = write(d, "nd.json", {"dtype": "int32", "shape": [2, 2],
                                              "values": [0, 0, 2, 1]})

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli(self, target, *args):
        return subprocess.run([CLI, *args, "--target", target], capture_output=True, text=True,
                              timeout=60)

    def test_families_have_their_types(self):
        with ServerProcess("--cpu_threads=1") as server:
            self.assertIsNotNone(server.metrics_port, "".join(server.output))
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
                text = response.read().decode()
        types = {f.name: f.type for f in text_string_to_metric_families(text)}
        expected = {
            "tensorcompute_requests": "counter",
            "tensorcompute_request_duration_seconds": "histogram",
            "tensorcompute_inflight_requests": "gauge",
            "tensorcompute_queue_depth": "gauge",
            "tensorcompute_inflight_batches": "gauge",
            "tensorcompute_batch_size": "histogram",
            "tensorcompute_executor_batches": "counter",
            "tensorcompute_executor_busy_seconds": "counter",
            "tensorcompute_device_info": "gauge",
        }
        for name, kind in expected.items():
            self.assertEqual(types.get(name), kind, f"{name} in\n{text}")

    def test_counters_move_with_requests(self):
        with ServerProcess("--cpu_threads=1") as server:
            before = scrape(server.metrics_port)
            gather_ok = labels(rpc="Gather", code="OK")
            self.assertEqual(before[("tensorcompute_requests_total", gather_ok)], 0)
            self.assertEqual(before[("tensorcompute_inflight_requests", labels())], 0)
            self.assertEqual(before[("tensorcompute_queue_depth", labels())], 0)
            self.assertEqual(
                before[("tensorcompute_device_info", labels(device="cpu", description="cpu"))], 1)

            for _ in range(3):
                r = self.cli(server.target, "gather", "--params", self.params, "--indices",
                             self.indices)
                self.assertEqual(r.returncode, 0, r.stderr)
            r = self.cli(server.target, "gather-nd", "--params", self.params, "--indices",
                         self.nd_indices)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = self.cli(server.target, "gather", "--params", self.params, "--indices",
                         self.bad_indices)
            self.assertEqual(r.returncode, 3, r.stderr)  # INVALID_ARGUMENT
            load = self.cli(server.target, "load", "--requests", "200", "--concurrency", "4",
                            "--warmup", "0", "--json", "-")
            self.assertEqual(load.returncode, 0, load.stderr)
            report = json.loads(load.stdout)
            self.assertEqual(report["by_code"], {"OK": 200})

            after = scrape(server.metrics_port)

        def delta(name, **kv):
            key = (name, labels(**kv))
            return after.get(key, 0) - before.get(key, 0)

        # The load test's warm-up is 0: exactly its 200 calls, all Gathers, were sent.
        self.assertEqual(delta("tensorcompute_requests_total", rpc="Gather", code="OK"), 203)
        self.assertEqual(delta("tensorcompute_requests_total", rpc="GatherNd", code="OK"), 1)
        self.assertEqual(
            delta("tensorcompute_requests_total", rpc="Gather", code="INVALID_ARGUMENT"), 1)
        # Every answer is in the latency histogram, and the +Inf bucket holds them all.
        self.assertEqual(delta("tensorcompute_request_duration_seconds_count", rpc="Gather"), 204)
        self.assertEqual(
            delta("tensorcompute_request_duration_seconds_bucket", rpc="Gather", le="+Inf"), 204)
        self.assertEqual(delta("tensorcompute_request_duration_seconds_count", rpc="GatherNd"), 1)
        self.assertGreater(delta("tensorcompute_request_duration_seconds_sum", rpc="Gather"), 0)
        # Each request that reached compute was in one batch (the bad index is found there).
        batched = delta("tensorcompute_batch_size_sum")
        self.assertEqual(batched, 205)
        batches = delta("tensorcompute_batch_size_count")
        self.assertGreaterEqual(batches, 1)
        self.assertLessEqual(batches, 205)
        self.assertEqual(delta("tensorcompute_executor_batches_total", device="cpu"), batches)
        self.assertGreater(delta("tensorcompute_executor_busy_seconds_total", device="cpu"), 0)
        # Idle again.
        self.assertEqual(after[("tensorcompute_inflight_requests", labels())], 0)
        self.assertEqual(after[("tensorcompute_queue_depth", labels())], 0)
        self.assertEqual(after[("tensorcompute_inflight_batches", labels())], 0)

    def test_empty_listen_serves_no_metrics(self):
        with ServerProcess("--cpu_threads=1", "--metrics_listen=") as server:
            self.assertEqual(server.metrics_port, 0, "".join(server.output))

    def test_metrics_port_in_use_refuses_to_start(self):
        with ServerProcess("--cpu_threads=1") as first:
            process = subprocess.run(
                [os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                 f"--metrics_listen=127.0.0.1:{first.metrics_port}"],
                capture_output=True, text=True, timeout=30)
        self.assertEqual(process.returncode, 1, process.stdout + process.stderr)
        self.assertIn(f"cannot serve metrics on 127.0.0.1:{first.metrics_port}",
                      process.stdout + process.stderr)


if __name__ == "__main__":
    unittest.main()
