"""KServe v2 over HTTP/REST (--http_listen), through NVIDIA's unmodified tritonclient.http.

Runs with .venv-triton's Python (tritonclient pins its own protobuf). Every datatype, as JSON
and as binary data, on `gather`, `gather_nd` and a preloaded table, is compared with a NumPy
reference and, byte for byte, with the same request over KServe gRPC (tritonclient.grpc, on the
server's main port). Also: metadata, health, errors and their HTTP statuses, the body limit,
bearer tokens, and the curl examples of docs/kserve.md's "HTTP/REST" section. EmbeddingBag:
random requests on the `embedding_bag` model and on preloaded tables with op=embedding_bag, as
JSON and as binary data, against tests/testing/embedding_bag_reference.py, and their errors.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import ml_dtypes
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from embedding_bag_reference import EB_FLOAT_DTYPES, EB_MODES, kserve_inputs, \
    kserve_parameters, mismatch, random_bag_case, ref_embedding_bag
from server_process import ServerProcess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# tritonclient.http's datatypes (BF16 only as binary data: the client refuses it as JSON).
DTYPES = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16, "BYTES": np.object_,
}


def random_params(datatype, shape, rng):
    if datatype == "BYTES":
        flat = [f"s{v}".encode() * (v % 3) for v in rng.integers(0, 1000, size=int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if datatype in ("FP16", "FP32", "FP64", "BF16"):
        return (rng.standard_normal(shape) * 100).astype(DTYPES[datatype])
    info = np.iinfo(DTYPES[datatype])
    return rng.integers(info.min, info.max, size=shape, dtype=DTYPES[datatype], endpoint=True)


def gather_reference(params, indices, axis, batch_dims):
    """tf.gather with batch_dims, by loops over the batch."""
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    return np.stack([gather_reference(p, i, axis - 1, batch_dims - 1)
                     for p, i in zip(params, indices)])


def gather_nd_reference(params, indices, batch_dims):
    if batch_dims > 0:
        return np.stack([gather_nd_reference(p, i, batch_dims - 1)
                         for p, i in zip(params, indices)])
    flat = indices.reshape(-1, indices.shape[-1])
    out = [params[tuple(row)] for row in flat]
    return np.array(out, dtype=params.dtype).reshape(
        indices.shape[:-1] + params.shape[indices.shape[-1]:])


def as_bytes(array):
    """Comparable bytes of an output array (BYTES: its elements, as bytes)."""
    if array.dtype == np.object_:
        return [x if isinstance(x, bytes) else str(x).encode() for x in array.ravel()]
    return array.tobytes()


def make_inputs(module, tensors, binary):
    inputs = []
    for name, (datatype, array) in tensors.items():
        tensor = module.InferInput(name, list(array.shape), datatype)
        if module is httpclient:
            tensor.set_data_from_numpy(array, binary_data=binary or datatype == "BF16")
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


class KserveHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.table = np.arange(12, dtype=np.float32).reshape(4, 3)
        table_path = os.path.join(cls.tmp.name, "table.npy")
        np.save(table_path, cls.table)
        cls.table64 = np.random.default_rng(64).standard_normal((9, 5))
        table64_path = os.path.join(cls.tmp.name, "table64.npy")
        np.save(table64_path, cls.table64)
        cls.server = ServerProcess("--http_listen=127.0.0.1:0",
                                   f"--preload=table={table_path},table64={table64_path}")
        cls.server.__enter__()
        cls.http_url = f"127.0.0.1:{cls.server.http_port}"
        cls.http = httpclient.InferenceServerClient(url=cls.http_url)
        cls.grpc = grpcclient.InferenceServerClient(url=cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.http.close()
        cls.grpc.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def infer_both(self, model, tensors, binary, parameters=None):
        """The output over HTTP and over gRPC; asserts their bytes are equal."""
        result = self.http.infer(
            model, make_inputs(httpclient, tensors, binary),
            outputs=[httpclient.InferRequestedOutput("output", binary_data=binary)],
            parameters=parameters)
        over_grpc = self.grpc.infer(model, make_inputs(grpcclient, tensors, binary),
                                    parameters=parameters)
        out = result.as_numpy("output")
        expected = over_grpc.as_numpy("output")
        self.assertEqual(as_bytes(out), as_bytes(expected), f"{model} HTTP vs gRPC")
        self.assertEqual(out.shape, expected.shape)
        return out

    def check_equal(self, out, reference, what):
        self.assertEqual(out.shape, reference.shape, what)
        self.assertEqual(as_bytes(out), as_bytes(reference.astype(out.dtype)
                                                 if out.dtype != np.object_ else reference), what)

    def test_health_and_metadata(self):
        self.assertTrue(self.http.is_server_live())
        self.assertTrue(self.http.is_server_ready())
        self.assertTrue(self.http.is_model_ready("gather"))
        self.assertTrue(self.http.is_model_ready("table", model_version="1"))
        self.assertFalse(self.http.is_model_ready("nope"))
        metadata = self.http.get_server_metadata()
        self.assertEqual(metadata["name"], "tensorcompute")
        self.assertIn("binary_tensor_data", metadata["extensions"])
        model = self.http.get_model_metadata("gather_nd")
        self.assertEqual(model["name"], "gather_nd")
        self.assertEqual(model["versions"], ["1"])
        self.assertEqual([i["name"] for i in model["inputs"]], ["params", "indices"])
        table = self.http.get_model_metadata("table", model_version="1")
        self.assertEqual(table["outputs"][0]["datatype"], "FP32")
        with self.assertRaises(InferenceServerException) as caught:
            self.http.get_model_metadata("nope")
        self.assertEqual(caught.exception.status(), "404")
        self.assertIn("model 'nope' not found", caught.exception.message())

    def test_gather_every_datatype_json_and_binary(self):
        rng = np.random.default_rng(1)
        indices = np.array([[2, 0], [-1, 1]], dtype=np.int64)
        for datatype in DTYPES:
            for binary in (False, True):
                with self.subTest(datatype=datatype, binary=binary):
                    params = random_params(datatype, (3, 4), rng)
                    tensors = {"params": (datatype, params), "indices": ("INT64", indices)}
                    out = self.infer_both("gather", tensors, binary, {"axis": 0})
                    self.check_equal(out, gather_reference(params, indices, 0, 0), datatype)

    def test_gather_nd_every_datatype_json_and_binary(self):
        rng = np.random.default_rng(2)
        indices = np.array([[0, 1], [1, 2], [0, 0]], dtype=np.int32)
        for datatype in DTYPES:
            for binary in (False, True):
                with self.subTest(datatype=datatype, binary=binary):
                    params = random_params(datatype, (2, 3, 2), rng)
                    tensors = {"params": (datatype, params), "indices": ("INT32", indices)}
                    out = self.infer_both("gather_nd", tensors, binary)
                    self.check_equal(out, gather_nd_reference(params, indices, 0), datatype)

    def test_axis_and_batch_dims(self):
        rng = np.random.default_rng(3)
        params = random_params("FP32", (2, 3, 4), rng)
        indices = np.array([[2, 0, 1], [1, 1, 0]], dtype=np.int64)
        for binary in (False, True):
            out = self.infer_both("gather", {"params": ("FP32", params),
                                             "indices": ("INT64", indices)},
                                  binary, {"axis": 1, "batch_dims": 1})
            self.check_equal(out, gather_reference(params, indices, 1, 1), "batch_dims=1")
            out = self.infer_both("gather", {"params": ("FP32", params),
                                             "indices": ("INT64", indices)},
                                  binary, {"axis": 2})
            self.check_equal(out, gather_reference(params, indices, 2, 0), "axis=2")
            nd_indices = np.array([[1], [2]], dtype=np.int64)
            out = self.infer_both("gather_nd", {"params": ("FP32", params),
                                                "indices": ("INT64", nd_indices)},
                                  binary, {"batch_dims": 1})
            self.check_equal(out, gather_nd_reference(params, nd_indices, 1), "nd batch_dims=1")

    def test_resident_table_as_a_model(self):
        indices = np.array([3, 0, -1], dtype=np.int64)
        for binary in (False, True):
            out = self.infer_both("table", {"indices": ("INT64", indices)}, binary)
            self.check_equal(out, np.take(self.table, indices, axis=0), "table")
            nd = np.array([[1, 2], [3, 0]], dtype=np.int64)
            out = self.infer_both("table", {"indices": ("INT64", nd)}, binary,
                                  {"op": "gather_nd"})
            self.check_equal(out, gather_nd_reference(self.table, nd, 0), "table gather_nd")

    def bag_cases(self, rng, dtype, table=None):
        """random_bag_case over every mode, weighted or not, offsets or fixed bags."""
        for mode in EB_MODES:
            for weighted in (False, True) if mode != "max" else (False,):
                for fixed in (False, True):
                    yield random_bag_case(rng, dtype, mode, weighted, fixed, table=table)

    def test_embedding_bag_random_requests_json_and_binary(self):
        rng = np.random.default_rng(23)
        for dtype in EB_FLOAT_DTYPES:
            for params, indices, kwargs in self.bag_cases(rng, dtype):
                for binary in (False, True):
                    what = f"{np.dtype(dtype).name} {indices.shape} {kwargs} binary={binary}"
                    with self.subTest(what):
                        out = self.infer_both("embedding_bag",
                                              kserve_inputs(params, indices, kwargs), binary,
                                              kserve_parameters(kwargs, mode_case=str.lower))
                        self.assertIsNone(
                            mismatch(out, *ref_embedding_bag(params, indices, **kwargs)), what)

    def test_embedding_bag_on_preloaded_tables(self):
        rng = np.random.default_rng(24)
        for name, table in (("table", self.table), ("table64", self.table64)):
            for _, indices, kwargs in self.bag_cases(rng, table.dtype.type, table=table):
                for binary in (False, True):
                    what = f"{name} {indices.shape} {kwargs} binary={binary}"
                    with self.subTest(what):
                        out = self.infer_both(name, kserve_inputs(None, indices, kwargs), binary,
                                              kserve_parameters(kwargs, op=True))
                        self.assertIsNone(
                            mismatch(out, *ref_embedding_bag(table, indices, **kwargs)), what)

    def test_embedding_bag_metadata_and_errors_are_400(self):
        model = self.http.get_model_metadata("embedding_bag")
        self.assertEqual([i["name"] for i in model["inputs"]],
                         ["params", "indices", "offsets", "per_sample_weights"])
        self.assertEqual(model["outputs"][0]["shape"], [-1, -1])
        self.assertTrue(self.http.is_model_ready("embedding_bag"))
        params = '{"name": "params", "datatype": "FP32", "shape": [2, 1], "data": [1, 2]}'
        indices = '{"name": "indices", "datatype": "INT64", "shape": [2], "data": [1, 0]}'
        offsets = '{"name": "offsets", "datatype": "INT32", "shape": [1], "data": [0]}'
        cases = [
            ("embedding_bag", [params, indices, offsets], '{"mode": "avg"}',
             "parameter 'mode' must be the string \"sum\" (the default), \"mean\", \"max\" or "
             "\"sqrtn\" (in any case), not \"avg\""),
            ("embedding_bag", [params, indices, offsets], '{"include_last_offset": "yes"}',
             "parameter 'include_last_offset' must be a boolean (bool_param)"),
            ("embedding_bag", [params, indices, offsets], '{"padding_idx": 0.5}',
             "parameter 'padding_idx' must be an integer (int64_param)"),
            ("embedding_bag", [params, indices, offsets], '{"batch_dims": 0}',
             "unknown parameter 'batch_dims': this model takes mode, include_last_offset, "
             "padding_idx"),
            ("embedding_bag", [indices, offsets], "{}",
             "model 'embedding_bag' takes params and indices, and optionally offsets and "
             "per_sample_weights; missing params"),
            ("embedding_bag", [params, indices, offsets, offsets.replace("offsets", "lengths")],
             "{}", "unknown input 'lengths': model 'embedding_bag' takes params and indices"),
            ("embedding_bag", [params, indices.replace("[1, 0]", "[1, 2]"), offsets], "{}",
             "indices[1] = 2 is not in [-2, 2)"),
            ("table", [indices], '{"op": "embedding"}',
             "parameter 'op' must be the string \"gather\" (the default), \"gather_nd\" or "
             "\"embedding_bag\""),
            ("table", [indices, offsets], '{"op": "embedding_bag", "padding_idx": 4}',
             "padding_idx"),
            ("table", [indices, offsets], '{"op": "gather_nd", "mode": "sum"}',
             "parameter 'mode' is for op \"embedding_bag\", not \"gather_nd\""),
        ]
        for model, inputs, parameters, message in cases:
            with self.subTest(message=message):
                body = f'{{"inputs": [{", ".join(inputs)}], "parameters": {parameters}}}'
                status, reply = self.post(f"/v2/models/{model}/infer", body.encode())
                self.assertEqual(status, 400, reply)
                self.assertIn(message, reply["error"])

    def test_large_and_small_answers_alternate_on_one_connection(self):
        # The front end keeps each thread's buffers between calls and releases them after one
        # of more than 4 MiB (server/kserve/http_front_end.cc, InferScratch); answers are sent from the
        # response in place. Sizes that grow, shrink and cross that line, on one keep-alive
        # connection, each checked against NumPy.
        rng = np.random.default_rng(7)
        params = rng.standard_normal((8192, 256)).astype(np.float32)  # 8 MiB, rows of 1 KiB
        for rows in (6000, 16, 6000, 6000, 3, 1500, 0, 7000, 1):
            indices = rng.integers(-8192, 8192, rows).astype(np.int64)
            for binary in (True, False) if rows <= 16 else (True,):
                with self.subTest(rows=rows, binary=binary):
                    out = self.infer_both(
                        "gather", {"params": ("FP32", params), "indices": ("INT64", indices)},
                        binary)
                    self.check_equal(out, params[indices], f"{rows} rows")

    def test_out_of_range_index_is_400_with_the_plan_message(self):
        tensors = {"params": ("INT32", np.array([1, 2, 3], dtype=np.int32)),
                   "indices": ("INT64", np.array([0, 7], dtype=np.int64))}
        for binary in (False, True):
            with self.assertRaises(InferenceServerException) as caught:
                self.http.infer("gather", make_inputs(httpclient, tensors, binary))
            self.assertEqual(caught.exception.status(), "400")
            self.assertIn("indices[1] = 7 is not in [-3, 3)", caught.exception.message())

    def post(self, path, body, headers=None, url=None):
        """(status, parsed JSON body) of a raw POST."""
        request = urllib.request.Request(f"http://{url or self.http_url}{path}", data=body,
                                         headers=headers or {}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path, headers=None, url=None):
        request = urllib.request.Request(f"http://{url or self.http_url}{path}",
                                         headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_malformed_requests_are_400_and_the_server_lives_on(self):
        cases = [
            (b'{"inputs": [', "not valid JSON"),
            (b'[1, 2]', "must be a JSON object"),
            (b'{"inputs": [{"name": "params", "datatype": "INT8", "shape": [2], '
             b'"data": [1, 2, 3]}]}', "shape [2] has 2 elements but 'data' holds 3"),
            (b'{"inputs": [{"name": "params", "datatype": "INT8", "shape": [1], '
             b'"data": [300]}]}', "does not fit INT8"),
            (b'{"inputs": [{"name": "params", "datatype": "FP32", "shape": [1], "data": [1]}]}',
             "missing indices"),
            (b'\xff\xfe', "not valid JSON"),
        ]
        for body, message in cases:
            with self.subTest(body=body):
                status, reply = self.post("/v2/models/gather/infer", body)
                self.assertEqual(status, 400)
                self.assertIn(message, reply["error"])
        status, reply = self.post("/v2/models/gather/infer", b"{}",
                                  {"Inference-Header-Content-Length": "99"})
        self.assertEqual(status, 400)
        self.assertIn("Inference-Header-Content-Length is 99", reply["error"])
        status, reply = self.post("/v2/models/nope/versions/1/infer", b'{"inputs": []}')
        self.assertEqual(status, 404)
        status, reply = self.get("/v2/models/gather/versions/2")
        self.assertEqual(status, 404)
        self.assertIn("has no version '2'", reply["error"])
        status, reply = self.get("/v3/nothing")
        self.assertEqual(status, 404)
        self.assertIn("no such endpoint", reply["error"])
        self.assertTrue(self.http.is_server_live())

    def test_body_limit_and_tokens(self):
        with tempfile.NamedTemporaryFile("w", suffix=".tokens") as tokens:
            tokens.write("s3cret\n")
            tokens.flush()
            with ServerProcess("--http_listen=127.0.0.1:0", "--max_message_bytes=200000",
                               f"--auth_token_file={tokens.name}") as server:
                url = f"127.0.0.1:{server.http_port}"
                self.assertEqual(self.get("/v2/health/live", url=url)[0], 200)
                self.assertEqual(self.get("/v2/health/ready", url=url)[0], 200)
                status, reply = self.get("/v2", url=url)
                self.assertEqual(status, 401)
                self.assertIn("Bearer", reply["error"])
                self.assertEqual(self.get("/v2", {"Authorization": "Bearer wrong"}, url)[0], 401)
                self.assertEqual(self.get("/v2", {"Authorization": "Bearer s3cret"}, url)[0], 200)
                client = httpclient.InferenceServerClient(url=url)
                with self.assertRaises(InferenceServerException) as caught:
                    client.get_server_metadata()
                self.assertEqual(caught.exception.status(), "401")
                tensors = {"params": ("FP32", np.arange(4, dtype=np.float32)),
                           "indices": ("INT64", np.array([3], dtype=np.int64))}
                result = client.infer("gather", make_inputs(httpclient, tensors, True),
                                      headers={"Authorization": "Bearer s3cret"})
                self.assertEqual(result.as_numpy("output").tolist(), [3.0])
                client.close()
                status, reply = self.post("/v2/models/gather/infer", b" " * 300000,
                                          {"Authorization": "Bearer s3cret"}, url)
                self.assertEqual(status, 413)
                self.assertIn("max_message_bytes", reply["error"])

    def test_drain_answers_503_then_closes(self):
        with ServerProcess("--http_listen=127.0.0.1:0", "--drain_notice_ms=3000") as server:
            url = f"127.0.0.1:{server.http_port}"
            self.assertEqual(self.get("/v2", url=url)[0], 200)
            server.signal(signal.SIGTERM)
            deadline = time.monotonic() + 2
            while self.get("/v2/health/ready", url=url)[0] != 503:
                self.assertLess(time.monotonic(), deadline, "ready never turned 503")
                time.sleep(0.05)
            status, reply = self.get("/v2", url=url)
            self.assertEqual(status, 503)
            self.assertIn("draining", reply["error"])
            self.assertEqual(self.get("/v2/health/live", url=url)[0], 200)

    def test_the_load_tester_over_http(self):
        """`tensorcompute load --protocol kserve-http`: inline params and the preloaded table,
        with one request in four carrying an out-of-range index; every answer as expected."""
        cli = os.environ.get("TC_CLI_BINARY", "")
        if not cli or not os.path.exists(cli):
            self.skipTest(f"TC_CLI_BINARY not set or missing: {cli!r}")
        cases = {
            "inline": (["--rows", "64", "--slice", "16", "--indices", "8"], 8 * 16 * 4),
            "table": (["--params-name", "table", "--dtype", "float32", "--params-shape", "4,3",
                       "--indices", "5"], 5 * 3 * 4),
        }
        for name, (flags, output_bytes) in cases.items():
            with self.subTest(name):
                run = subprocess.run(
                    [cli, "load", "--protocol", "kserve-http", "--target", self.http_url,
                     "--requests", "200", "--concurrency", "3", "--warmup", "0", "--distinct",
                     "4", "--invalid-fraction", "0.25", "--json", "-", *flags],
                    capture_output=True, text=True, timeout=120)
                self.assertEqual(run.returncode, 0, run.stderr)
                report = json.loads(run.stdout)
                self.assertEqual(report["sent"], 200)
                self.assertEqual(report["by_code"], {"OK": 150, "INVALID_ARGUMENT": 50})
                self.assertEqual(report["unexpected"], 0)
                # Each OK answer: a JSON header, then the output's raw bytes.
                self.assertGreater(report["bytes_received"], 150 * output_bytes)
        refused = subprocess.run(
            [cli, "load", "--protocol", "kserve-http", "--target", self.http_url, "--rate", "10",
             "--requests", "5"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("closed loop only", refused.stderr)

    def test_curl_examples_in_the_docs(self):
        """Every ```sh block of docs/kserve.md's HTTP/REST section, run against this server,
        prints the ```output block below it (JSON compared as JSON)."""
        with open(os.path.join(REPO, "docs", "kserve.md")) as f:
            text = f.read()
        section = text[text.index("## HTTP/REST"):]
        next_section = re.search(r"\n## ", section[3:])
        if next_section:
            section = section[:next_section.start() + 3]
        pairs = re.findall(r"```sh\n(.*?)```\n+```output\n(.*?)```", section, re.S)
        self.assertGreaterEqual(len(pairs), 5)
        for command, expected in pairs:
            with self.subTest(command=command):
                command = command.replace("localhost:8000", self.http_url)
                done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                      timeout=60, cwd=self.tmp.name)
                self.assertEqual(done.returncode, 0, done.stderr)
                try:
                    self.assertEqual(json.loads(done.stdout), json.loads(expected))
                except json.JSONDecodeError:
                    self.assertEqual(done.stdout.strip(), expected.strip())


if __name__ == "__main__":
    unittest.main()
