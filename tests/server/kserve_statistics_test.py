"""Triton's ModelStatistics and ModelConfig, through NVIDIA's unmodified tritonclient, over gRPC
and HTTP, against the real tensorcompute-server (server/kserve/model_statistics.h,
model_config.h).

Known traffic goes to the built-in `gather` model and to a preloaded table, over KServe gRPC,
KServe HTTP and the native API (the CLI): get_inference_statistics() then counts exactly those
requests, successes and failures apart, on both protocols alike, and its stage times add up to
its success time. get_model_config() describes each model as ModelMetadata does.

Run by ctest with .venv-triton's Python, from tests/server with tests/testing on PYTHONPATH and
TC_SERVER_BINARY, TC_CLI_BINARY set.
"""

import json
import os
import subprocess
import tempfile
import time
import unittest

import numpy as np
import tritonclient.grpc as tcgrpc
import tritonclient.http as tchttp
from tritonclient.utils import InferenceServerException

from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")


def gather_inputs(module, params, indices):
    p = module.InferInput("params", list(params.shape), "FP32")
    p.set_data_from_numpy(params)
    i = module.InferInput("indices", list(indices.shape), "INT64")
    i.set_data_from_numpy(indices)
    return [p, i]


def table_inputs(module, indices):
    i = module.InferInput("indices", list(indices.shape), "INT64")
    i.set_data_from_numpy(indices)
    return [i]


class KserveStatisticsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kserve_statistics_test.")
        cls.table = np.arange(40, dtype=np.float32).reshape(10, 4)
        cls.table_path = os.path.join(cls.tmp.name, "emb.npy")
        np.save(cls.table_path, cls.table)
        cls.server = ServerProcess("--http_listen=127.0.0.1:0", "--max_queue_delay_us=250",
                                   "--max_batch_size=16", f"--preload=emb={cls.table_path}")
        cls.server.__enter__()
        deadline = time.time() + 30
        cls.grpc = tcgrpc.InferenceServerClient(cls.server.target)
        cls.http = tchttp.InferenceServerClient(f"127.0.0.1:{cls.server.http_port}")
        while not cls.grpc.is_server_ready():
            if time.time() > deadline:
                raise RuntimeError("the server never became ready (preload)")
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.grpc.close()
        cls.http.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def stats(self, client, name=""):
        if client is self.grpc:
            return client.get_inference_statistics(name, as_json=True)["model_stats"]
        return client.get_inference_statistics(name)["model_stats"]

    @staticmethod
    def count(entry, field):
        # gRPC's JSON (protobuf's mapping) writes 64-bit integers as strings, HTTP as numbers;
        # fields never set are left out in gRPC's.
        node = entry
        for part in field.split("."):
            node = node.get(part, {} if part != field.split(".")[-1] else 0)
        return int(node)

    def test_counts_follow_the_traffic_on_both_protocols(self):
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        good = np.array([3, 0], dtype=np.int64)
        bad = np.array([9], dtype=np.int64)
        before = {e["name"]: e for e in self.stats(self.http)}
        ok_calls, failed_calls = 0, 0
        for client, module in ((self.grpc, tcgrpc), (self.http, tchttp)):
            for _ in range(3):
                result = client.infer("gather", gather_inputs(module, params, good))
                np.testing.assert_array_equal(result.as_numpy("output"), params[[3, 0]])
                ok_calls += 1
            with self.assertRaises(InferenceServerException):
                client.infer("gather", gather_inputs(module, params, bad))
            failed_calls += 1
            result = client.infer("emb", table_inputs(module, np.array([9, 1], dtype=np.int64)))
            np.testing.assert_array_equal(result.as_numpy("output"), self.table[[9, 1]])
        # The native API counts toward the same model (the CLI calls Gather with params_name).
        indices_file = os.path.join(self.tmp.name, "indices.json")
        with open(indices_file, "w") as f:
            json.dump({"dtype": "int64", "values": [2]}, f)
        native = subprocess.run([CLI, "gather", "--target", self.server.target, "--params-name",
                                 "emb", "--indices", indices_file],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(native.returncode, 0, native.stderr)

        for client in (self.grpc, self.http):
            gather = self.stats(client, "gather")
            self.assertEqual(len(gather), 1)
            g = gather[0]
            self.assertEqual(g["name"], "gather")
            self.assertEqual(g["version"], "1")
            b = before["gather"]
            self.assertEqual(self.count(g, "inference_count") - int(b["inference_count"]), ok_calls)
            self.assertEqual(self.count(g, "execution_count") - int(b["execution_count"]),
                             ok_calls)
            self.assertEqual(self.count(g, "inference_stats.success.count") -
                             int(b["inference_stats"]["success"]["count"]), ok_calls)
            self.assertEqual(self.count(g, "inference_stats.fail.count") -
                             int(b["inference_stats"]["fail"]["count"]), failed_calls)
            self.assertGreater(self.count(g, "last_inference"), 1.7e12)
            # The four stages of the successes are their whole time (to a few ns per request).
            success_ns = self.count(g, "inference_stats.success.ns")
            parts = sum(self.count(g, f"inference_stats.{s}.ns")
                        for s in ("queue", "compute_input", "compute_infer", "compute_output"))
            n = self.count(g, "inference_stats.success.count")
            self.assertLessEqual(abs(success_ns - parts), 4 * n, g)
            self.assertGreater(self.count(g, "inference_stats.compute_infer.ns"), 0)
            for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
                self.assertEqual(self.count(g, f"inference_stats.{stage}.count"), n)

            emb = self.stats(client, "emb")[0]
            self.assertEqual(self.count(emb, "inference_count") -
                             int(before["emb"]["inference_count"]), 3)  # 2 KServe + 1 native
            memory = emb["memory_usage"]
            self.assertEqual(len(memory), 1)
            self.assertEqual(memory[0]["type"], "CPU")
            self.assertEqual(int(memory[0]["byte_size"]), self.table.nbytes)

    def test_every_model_when_no_name_is_given(self):
        for client in (self.grpc, self.http):
            names = [e["name"] for e in self.stats(client)]
            self.assertEqual(names, ["gather", "gather_nd", "embedding_bag", "emb"])

    def test_unknown_model_or_version_is_not_found(self):
        with self.assertRaises(InferenceServerException) as grpc_error:
            self.grpc.get_inference_statistics("nope")
        self.assertEqual(grpc_error.exception.status(), "StatusCode.NOT_FOUND")
        self.assertIn("model 'nope' not found", grpc_error.exception.message())
        with self.assertRaises(InferenceServerException) as http_error:
            self.http.get_inference_statistics("gather", model_version="2")
        self.assertIn("has no version '2'", http_error.exception.message())
        with self.assertRaises(InferenceServerException):
            self.grpc.get_model_config("nope")
        with self.assertRaises(InferenceServerException) as config_error:
            self.http.get_model_config("nope")
        self.assertEqual(config_error.exception.status(), "404")

    def test_a_token_is_needed_first_on_both_protocols(self):
        tokens = os.path.join(self.tmp.name, "tokens")
        with open(tokens, "w") as f:
            f.write("s3cret\n")
        auth = {"authorization": "Bearer s3cret"}
        with ServerProcess(f"--auth_token_file={tokens}", "--http_listen=127.0.0.1:0") as server:
            grpc_client = tcgrpc.InferenceServerClient(server.target)
            http_client = tchttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            try:
                for call in (lambda c, **kw: c.get_inference_statistics("gather", **kw),
                             lambda c, **kw: c.get_model_config("gather", **kw)):
                    with self.assertRaises(InferenceServerException) as refused:
                        call(grpc_client)
                    self.assertEqual(refused.exception.status(), "StatusCode.UNAUTHENTICATED")
                    with self.assertRaises(InferenceServerException) as refused:
                        call(http_client)
                    self.assertEqual(refused.exception.status(), "401")
                    call(grpc_client, headers=auth)
                    call(http_client, headers=auth)
            finally:
                grpc_client.close()
                http_client.close()

    def test_model_config_describes_the_models(self):
        grpc_config = self.grpc.get_model_config("emb", as_json=True)["config"]
        http_config = self.http.get_model_config("emb")
        for config in (grpc_config, http_config):
            self.assertEqual(config["name"], "emb")
            self.assertEqual(config["platform"], "tensorcompute")
            self.assertEqual(config["backend"], "tensorcompute")
            self.assertEqual([i["name"] for i in config["input"]], ["indices"])
            self.assertEqual(config["input"][0]["data_type"], "TYPE_INT64")
            self.assertEqual(config["output"][0]["name"], "output")
            self.assertEqual(config["output"][0]["data_type"], "TYPE_FP32")
            self.assertEqual(config["parameters"]["storage"]["string_value"], "AS_IS")
            self.assertEqual(config["parameters"]["shape"]["string_value"], "[10,4]")
            self.assertEqual(
                int(config["dynamic_batching"]["max_queue_delay_microseconds"]), 250)
            self.assertEqual(config["dynamic_batching"]["preferred_batch_size"], [16])
        bag = self.http.get_model_config("embedding_bag")
        self.assertEqual([i["name"] for i in bag["input"]],
                         ["params", "indices", "offsets", "per_sample_weights"])
        self.assertEqual([i["optional"] for i in bag["input"]], [False, False, True, True])
        # The proto object too: tritonclient parses the gRPC answer with Triton's own messages.
        proto = self.grpc.get_model_config("gather").config
        self.assertEqual(proto.name, "gather")
        self.assertEqual([i.name for i in proto.input], ["params", "indices"])


if __name__ == "__main__":
    unittest.main()
