"""Where a request's time goes, as the real tensorcompute-server reports it: each answer's own
timing (gRPC trailing metadata tc-queue-us / tc-compute-us / tc-server-us, HTTP Server-Timing),
the caller's W3C traceparent or x-request-id in the error log and echoed in error answers, and
the stage and size histograms of /metrics (server/admission/call_record.h, server/prometheus_metrics.h),
which count exactly the requests sent, with exactly their bytes, and agree with Triton's
statistics (GET /v2/models/{name}/stats) read from the same counters.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set, after
the Python client is installed into .venv.
"""

import json
import os
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np

from prometheus_scrape import labels, scrape
from server_process import ServerProcess
from tensorcompute import _common
from tensorcompute.v1 import tensorcompute_pb2_grpc

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def gather(params, indices, params_name=None):
    return _common.gather_request(params, indices, 0, 0, params_name)


class StageTimingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="stage_timing_test.")
        cls.table = np.arange(64, dtype=np.float32).reshape(16, 4)
        path = os.path.join(cls.tmp.name, "emb.npy")
        np.save(path, cls.table)
        cls.server = ServerProcess("--http_listen=127.0.0.1:0", "--queue_capacity=77",
                                   "--cpu_threads=2", f"--preload=emb={path}")
        cls.server.__enter__()
        cls.channel = grpc.insecure_channel(cls.server.target)
        cls.stub = tensorcompute_pb2_grpc.TensorComputeStub(cls.channel)
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        deadline = time.time() + 30
        while scrape(cls.server.metrics_port).get(("tensorcompute_serving", labels()), 0) != 1:
            if time.time() > deadline:
                raise RuntimeError("never SERVING")
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def http(self, path, body=None, headers=None):
        request = urllib.request.Request(f"http://127.0.0.1:{self.server.http_port}{path}",
                                         data=body, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def test_grpc_answers_carry_their_timing(self):
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        response, call = self.stub.Gather.with_call(gather(params, [3, 1]))
        trailers = dict(call.trailing_metadata())
        queue, compute, total = (int(trailers[k]) for k in
                                 ("tc-queue-us", "tc-compute-us", "tc-server-us"))
        self.assertGreaterEqual(queue, 0)
        self.assertGreaterEqual(compute, 0)
        self.assertLessEqual(queue + compute, total)
        self.assertLess(total, 10_000_000)
        np.testing.assert_array_equal(_common.output(response), params[[3, 1]])
        # A call that never reached compute has only the server's time.
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.Gather(gather(None, [0], params_name="no_such_table"))
        self.assertEqual(error.exception.code(), grpc.StatusCode.NOT_FOUND)
        trailers = dict(error.exception.trailing_metadata())
        self.assertIn("tc-server-us", trailers)
        self.assertNotIn("tc-queue-us", trailers)

    def test_request_ids_reach_the_log_and_error_answers(self):
        params = np.zeros((2, 2), np.float32)
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.Gather(gather(params, [5]), metadata=[("traceparent", TRACEPARENT)])
        self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(dict(error.exception.trailing_metadata())["traceparent"], TRACEPARENT)
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.Gather(gather(params, [6]), metadata=[("x-request-id", "req-42")])
        self.assertEqual(dict(error.exception.trailing_metadata())["x-request-id"], "req-42")
        # Invalid ids are ignored, not echoed: a bad traceparent, an x-request-id with a space
        # or too long.
        for metadata in ([("traceparent", "00-" + "0" * 32 + "-00f067aa0ba902b7-01")],
                         [("x-request-id", "a b")], [("x-request-id", "x" * 129)]):
            with self.assertRaises(grpc.RpcError) as error:
                self.stub.Gather(gather(params, [7]), metadata=metadata)
            trailers = dict(error.exception.trailing_metadata())
            self.assertNotIn("traceparent", trailers)
            self.assertNotIn("x-request-id", trailers)
        # HTTP: echoed in the error answer's header.
        status, headers, _ = self.http("/v2/models/emb/infer", json.dumps(
            {"inputs": [{"name": "indices", "datatype": "INT64", "shape": [1],
                         "data": [99]}]}).encode(), {"x-request-id": "http-7"})
        self.assertEqual(status, 400)
        self.assertEqual(headers.get("x-request-id"), "http-7")
        deadline = time.time() + 10
        while time.time() < deadline:
            log = "".join(self.server.output)
            if f"trace_id={TRACE_ID} rpc=Gather code=INVALID_ARGUMENT" in log and \
                    "request_id=req-42 rpc=Gather" in log and \
                    "request_id=http-7 rpc=ModelInfer" in log:
                break
            time.sleep(0.05)
        log = "".join(self.server.output)
        self.assertIn(f"trace_id={TRACE_ID} rpc=Gather code=INVALID_ARGUMENT", log)
        self.assertIn("request_id=req-42 rpc=Gather", log)
        self.assertIn("request_id=http-7 rpc=ModelInfer", log)
        self.assertNotIn("request_id=a", log)

    def test_http_answers_carry_server_timing(self):
        body = json.dumps({"inputs": [{"name": "indices", "datatype": "INT64", "shape": [2],
                                       "data": [3, 0]}]}).encode()
        status, headers, reply = self.http("/v2/models/emb/infer", body)
        self.assertEqual(status, 200, reply)
        timing = dict(part.strip().split(";dur=") for part in headers["Server-Timing"].split(","))
        self.assertEqual(set(timing), {"queue", "compute", "total"})
        self.assertLessEqual(float(timing["queue"]) + float(timing["compute"]),
                             float(timing["total"]))

    def test_histograms_count_the_requests_and_their_bytes(self):
        def families(port):
            s = scrape(port)
            return lambda name, **kv: s.get((name, labels(**kv)), 0)

        before = families(self.server.metrics_port)
        params = np.arange(30, dtype=np.float32).reshape(10, 3)
        sizes_in, sizes_out = [], []
        for n in (1, 5, 9):
            request = gather(params, list(range(n)))
            response, _ = self.stub.Gather.with_call(request)
            sizes_in.append(request.ByteSize())
            sizes_out.append(response.ByteSize())
        table_calls = 4
        for _ in range(table_calls):
            self.stub.Gather(gather(None, [1, 2], params_name="emb"))
        after = families(self.server.metrics_port)

        def delta(name, **kv):
            return after(name, **kv) - before(name, **kv)

        self.assertEqual(delta("tensorcompute_request_size_bytes_count", rpc="Gather"),
                         3 + table_calls)
        table_request = gather(None, [1, 2], params_name="emb").ByteSize()
        self.assertEqual(delta("tensorcompute_request_size_bytes_sum", rpc="Gather"),
                         sum(sizes_in) + table_calls * table_request)
        self.assertEqual(delta("tensorcompute_response_size_bytes_count", rpc="Gather"),
                         3 + table_calls)
        self.assertGreaterEqual(delta("tensorcompute_response_size_bytes_sum", rpc="Gather"),
                                sum(sizes_out))
        for family in ("tensorcompute_queue_duration_seconds",
                       "tensorcompute_compute_duration_seconds",
                       "tensorcompute_request_duration_seconds"):
            self.assertEqual(delta(family + "_count", rpc="Gather"), 3 + table_calls, family)
            self.assertEqual(delta(family + "_bucket", rpc="Gather", le="+Inf"),
                             3 + table_calls, family)
        for family in ("tensorcompute_model_queue_duration_seconds",
                       "tensorcompute_model_compute_duration_seconds",
                       "tensorcompute_model_request_duration_seconds"):
            self.assertEqual(delta(family + "_count", model="gather"), 3, family)
            self.assertEqual(delta(family + "_count", model="emb"), table_calls, family)
        self.assertEqual(delta("tensorcompute_resident_lookups_total", tensor="emb"), table_calls)
        # The same counters as Triton's statistics: the table's requests over every protocol.
        status, _, body = self.http("/v2/models/emb/stats")
        self.assertEqual(status, 200)
        stats = json.loads(body)["model_stats"][0]
        answered = stats["inference_stats"]["success"]["count"] + \
            stats["inference_stats"]["fail"]["count"]
        now = scrape(self.server.metrics_port)
        self.assertEqual(answered, now[("tensorcompute_model_request_duration_seconds_count",
                                        labels(model="emb"))])

    def test_gauges_of_capacity_slots_and_health(self):
        s = scrape(self.server.metrics_port)
        self.assertEqual(s[("tensorcompute_queue_capacity", labels())], 77)
        self.assertEqual(s[("tensorcompute_executor_slots", labels(device="cpu"))], 2)
        self.assertEqual(s[("tensorcompute_device_up", labels(device="cpu"))], 1)
        self.assertEqual(s[("tensorcompute_serving", labels())], 1)


if __name__ == "__main__":
    unittest.main()
