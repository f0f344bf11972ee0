"""KServe v2 over gRPC, with NVIDIA's unmodified tritonclient (docs/kserve.md).

Against the real tensorcompute-server: server and model metadata, readiness, infer on `gather`
and `gather_nd` for every datatype tritonclient has (raw and typed contents), the axis and
batch_dims parameters, out-of-range indices and other errors (code and message), a resident
table used as a model, and auth. Results are checked against NumPy and, byte for byte, against
the native API (the bundled CLI writes its answer as .npy). EmbeddingBag: random requests over
every mode, params datatype, weights, offsets or fixed bags and padding_idx, on the
`embedding_bag` model and on resident tables with op=embedding_bag, against the NumPy reference
of tests/testing/embedding_bag_reference.py (exact where the server's float32 order makes it
so, a tight bound elsewhere: see there), and their errors.

Run by ctest with .venv-triton's Python (tritonclient pins its own protobuf), from tests/server
with tests/testing on PYTHONPATH and TC_SERVER_BINARY, TC_CLI_BINARY set.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np
import tritonclient.grpc as tc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from compact_reference import dequantize_rowwise8, float16_meaning, quantize_rowwise8
from embedding_bag_reference import EB_FLOAT_DTYPES, EB_MODES, kserve_inputs, \
    kserve_parameters, mismatch, random_bag_case, ref_embedding_bag
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")

# tritonclient's datatypes, all of which tensorcompute takes (BF16 separately: NumPy has none).
DATATYPES = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}


def random_tensor(rng, datatype, shape):
    dtype = DATATYPES[datatype]
    if datatype == "BYTES":
        flat = [bytes(rng.integers(0, 256, rng.integers(0, 6), dtype=np.uint8))
                for _ in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def gather_reference(params, indices, axis, batch_dims):
    """tf.gather semantics, negative indices from the end."""
    axis = axis % params.ndim
    if batch_dims == 0:
        return np.take(params, indices % params.shape[axis], axis=axis)
    return np.stack([gather_reference(p, i, axis - 1, batch_dims - 1)
                     for p, i in zip(params, indices)])


def gather_nd_reference(params, indices, batch_dims):
    if batch_dims > 0:
        return np.stack([gather_nd_reference(p, i, batch_dims - 1)
                         for p, i in zip(params, indices)])
    depth = indices.shape[-1]
    flat = indices.reshape(-1, depth)
    out = [params[tuple(i % params.shape[k] for k, i in enumerate(row))] for row in flat]
    return np.array(out, dtype=params.dtype).reshape(
        indices.shape[:-1] + params.shape[depth:])


def inputs(params, params_datatype, indices):
    out = []
    if params is not None:
        p = tc.InferInput("params", list(params.shape), params_datatype)
        p.set_data_from_numpy(params)
        out.append(p)
    i = tc.InferInput("indices", list(indices.shape), "INT64" if indices.dtype == np.int64
                      else "INT32")
    i.set_data_from_numpy(indices)
    out.append(i)
    return out


class KserveGrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess().__enter__()
        cls.client = tc.InferenceServerClient(cls.server.target)
        cls.stub = service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(cls.server.target))
        cls.rng = np.random.default_rng(20261123)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def cli(self, *args):
        return subprocess.run([CLI, *args, "--target", self.server.target], check=True,
                              capture_output=True, text=True)

    def npy(self, name, array):
        path = os.path.join(self.tmp.name, name)
        np.save(path, array)
        return path

    def assert_code(self, call, code, message):
        with self.assertRaises(InferenceServerException) as raised:
            call()
        self.assertEqual(raised.exception.status(), f"StatusCode.{code}")
        self.assertIn(message, raised.exception.message())

    # ---- health and metadata ----

    def test_server_is_live_and_ready_with_its_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        metadata = self.client.get_server_metadata(as_json=True)
        self.assertEqual(metadata["name"], "tensorcompute")
        self.assertRegex(metadata["version"], r"^\d+\.\d+\.\d+$")

    def test_model_metadata_and_readiness(self):
        for model, inputs_ in (("gather", ["params", "indices"]),
                               ("gather_nd", ["params", "indices"])):
            self.assertTrue(self.client.is_model_ready(model))
            self.assertTrue(self.client.is_model_ready(model, "1"))
            metadata = self.client.get_model_metadata(model, as_json=True)
            self.assertEqual(metadata["name"], model)
            self.assertEqual(metadata["versions"], ["1"])
            self.assertEqual([i["name"] for i in metadata["inputs"]], inputs_)
            self.assertEqual([o["name"] for o in metadata["outputs"]], ["output"])
            self.assertEqual(metadata["outputs"][0]["shape"], ["-1"])
        self.assert_code(lambda: self.client.get_model_metadata("nope"), "NOT_FOUND",
                         "model 'nope' not found")
        self.assert_code(lambda: self.client.is_model_ready("gather", "2"), "NOT_FOUND",
                         "has no version '2'")

    # ---- infer: every datatype, both operations ----

    def test_gather_every_datatype_equals_numpy_and_the_native_api(self):
        for datatype in DATATYPES:
            with self.subTest(datatype=datatype):
                params = random_tensor(self.rng, datatype, (4, 5, 3))
                indices = self.rng.integers(-5, 5, (2, 3)).astype(np.int32)
                result = self.client.infer("gather", inputs(params, datatype, indices),
                                           parameters={"axis": 1})
                out = result.get_output("output")
                self.assertEqual(out.datatype, datatype)
                self.assertEqual(list(out.shape), [4, 2, 3, 3])
                got = result.as_numpy("output")
                expected = gather_reference(params, indices, 1, 0)
                np.testing.assert_array_equal(got, expected)
                if datatype != "BYTES":  # the CLI writes strings as NumPy |S, compared below
                    native = os.path.join(self.tmp.name, "native.npy")
                    self.cli("gather", "--params", self.npy("p.npy", params),
                             "--indices", self.npy("i.npy", indices), "--axis", "1",
                             "--out", native)
                    self.assertEqual(np.load(native).tobytes(), got.tobytes())

    def test_bytes_equal_the_native_api(self):
        params = np.array([[b"a", b""], [b"bcd", b"\x00\xff"]], dtype=np.object_)
        indices = np.array([1, 0, -1], dtype=np.int64)
        got = self.client.infer("gather", inputs(params, "BYTES", indices)).as_numpy("output")
        native = os.path.join(self.tmp.name, "native_s.npy")
        self.cli("gather", "--params", self.npy("ps.npy", params.astype("S")),
                 "--indices", self.npy("is.npy", indices), "--out", native)
        self.assertEqual([list(r) for r in got], [list(r) for r in np.load(native)])
        self.assertEqual(got.tolist(), [[b"bcd", b"\x00\xff"], [b"a", b""], [b"bcd", b"\x00\xff"]])

    def test_gather_nd_every_datatype_with_batch_dims(self):
        for datatype in DATATYPES:
            with self.subTest(datatype=datatype):
                params = random_tensor(self.rng, datatype, (2, 3, 4, 2))
                indices = np.stack([self.rng.integers(-3, 3, (2, 5)),
                                    self.rng.integers(-4, 4, (2, 5))], axis=-1)
                result = self.client.infer("gather_nd", inputs(params, datatype, indices),
                                           parameters={"batch_dims": 1})
                np.testing.assert_array_equal(result.as_numpy("output"),
                                              gather_nd_reference(params, indices, 1))

    def test_axis_and_batch_dims(self):
        params = random_tensor(self.rng, "FP32", (3, 4, 5))
        indices = self.rng.integers(-5, 5, (3, 2)).astype(np.int64)
        for parameters, axis, batch_dims in (({"axis": -1, "batch_dims": 1}, -1, 1),
                                             ({"axis": 2}, 2, 0), ({"batch_dims": 1}, 1, 1)):
            with self.subTest(parameters=parameters):
                idx = indices % 4 if axis == 1 else indices
                got = self.client.infer("gather", inputs(params, "FP32", idx),
                                        parameters=parameters).as_numpy("output")
                np.testing.assert_array_equal(got, gather_reference(params, idx, axis, batch_dims))

    def test_typed_contents_equal_raw(self):
        """Inputs in InferTensorContents instead of raw_input_contents."""
        params = np.arange(12, dtype=np.int16).reshape(3, 4) - 6
        request = service_pb2.ModelInferRequest(model_name="gather", id="typed-1")
        p = request.inputs.add(name="params", datatype="INT16", shape=[3, 4])
        p.contents.int_contents.extend(params.ravel().tolist())
        i = request.inputs.add(name="indices", datatype="INT32", shape=[2])
        i.contents.int_contents.extend([2, -3])
        request.parameters["axis"].int64_param = 0
        response = self.stub.ModelInfer(request)
        self.assertEqual(response.id, "typed-1")
        self.assertEqual(response.model_name, "gather")
        self.assertEqual(list(response.outputs[0].shape), [2, 4])
        got = np.frombuffer(response.raw_output_contents[0], dtype="<i2").reshape(2, 4)
        np.testing.assert_array_equal(got, params[[2, 0]])

        strings = service_pb2.ModelInferRequest(model_name="gather")
        s = strings.inputs.add(name="params", datatype="BYTES", shape=[3])
        s.contents.bytes_contents.extend([b"x", b"yy", b"zzz"])
        j = strings.inputs.add(name="indices", datatype="INT64", shape=[2])
        j.contents.int64_contents.extend([-1, 1])
        raw = self.stub.ModelInfer(strings).raw_output_contents[0]
        self.assertEqual(raw, b"\x03\x00\x00\x00zzz\x02\x00\x00\x00yy")

    def test_bf16_raw(self):
        bits = np.array([0x3F80, 0x4000, 0xC040, 0x0000], dtype="<u2")  # 1, 2, -3, 0
        request = service_pb2.ModelInferRequest(model_name="gather")
        request.inputs.add(name="params", datatype="BF16", shape=[4])
        request.inputs.add(name="indices", datatype="INT32", shape=[2])
        request.raw_input_contents.extend([bits.tobytes(), np.array([3, 2], "<i4").tobytes()])
        response = self.stub.ModelInfer(request)
        self.assertEqual(response.outputs[0].datatype, "BF16")
        self.assertEqual(response.raw_output_contents[0], bits[[3, 2]].tobytes())

    # ---- errors ----

    def test_an_out_of_range_index_is_invalid_argument_with_the_index(self):
        params = np.zeros((3, 2), np.float32)
        self.assert_code(
            lambda: self.client.infer("gather", inputs(params, "FP32",
                                                       np.array([[0], [7]], np.int32))),
            "INVALID_ARGUMENT", "indices[1,0] = 7 is not in [-3, 3)")

    def test_malformed_requests(self):
        params = np.zeros((3, 2), np.float32)
        good = np.array([1], np.int32)
        cases = [
            (lambda: self.client.infer("nope", inputs(params, "FP32", good)), "NOT_FOUND",
             "model 'nope' not found"),
            (lambda: self.client.infer("gather", inputs(params, "FP32", good),
                                       parameters={"axes": 1}),
             "INVALID_ARGUMENT", "unknown parameter 'axes'"),
            (lambda: self.client.infer("gather", inputs(params, "FP32", good),
                                       parameters={"axis": "one"}),
             "INVALID_ARGUMENT", "parameter 'axis' must be an integer"),
            (lambda: self.client.infer("gather", inputs(params, "FP32", good),
                                       parameters={"axis": 2}),
             "INVALID_ARGUMENT", "axis"),
            (lambda: self.client.infer("gather", inputs(None, "FP32", good)), "INVALID_ARGUMENT",
             "missing params"),
            (lambda: self.client.infer("gather_nd", inputs(params, "FP32", good),
                                       parameters={"axis": 0}),
             "INVALID_ARGUMENT", "unknown parameter 'axis'"),
            (lambda: self.client.infer("gather", inputs(params, "FP32", good),
                                       outputs=[tc.InferRequestedOutput("out")]),
             "INVALID_ARGUMENT", "unknown output 'out'"),
            (lambda: self.client.infer("gather", inputs(params, "FP32",
                                                        np.array([1.0], np.float32)
                                                        .view(np.int32))),
             "INVALID_ARGUMENT", "is not in [-3, 3)"),
        ]
        for call, code, message in cases:
            with self.subTest(message=message):
                self.assert_code(call, code, message)

        # Raw bytes one short; a datatype the protocol does not have; raw for one input only.
        def raw(datatype, shape, data, indices=b"\x00\x00\x00\x00", n_raw=2):
            request = service_pb2.ModelInferRequest(model_name="gather")
            request.inputs.add(name="params", datatype=datatype, shape=shape)
            request.inputs.add(name="indices", datatype="INT32", shape=[1])
            request.raw_input_contents.extend([data, indices][:n_raw])
            return lambda: self.stub.ModelInfer(request)
        for call, code, message in (
                (raw("FP32", [2], b"\x00" * 7), grpc.StatusCode.INVALID_ARGUMENT,
                 "input 'params': FP32 shape [2] needs 8 bytes but raw_input_contents[0] has 7"),
                (raw("COMPLEX64", [1], b"\x00" * 8), grpc.StatusCode.INVALID_ARGUMENT,
                 "unknown datatype 'COMPLEX64'"),
                (raw("FP32", [1], b"\x00" * 4, n_raw=1), grpc.StatusCode.INVALID_ARGUMENT,
                 "raw_input_contents has 1 entries for 2 inputs"),
                (raw("BYTES", [2], b"\x01\x00\x00\x00a\x05\x00\x00\x00b"),
                 grpc.StatusCode.INVALID_ARGUMENT, "element 1 says it has 5 bytes")):
            with self.subTest(message=message):
                with self.assertRaises(grpc.RpcError) as raised:
                    call()
                self.assertEqual(raised.exception.code(), code)
                self.assertIn(message, raised.exception.details())

    # ---- embedding_bag ----

    def bag_infer(self, model, tensors, parameters):
        request = []
        for name, (datatype, array) in tensors.items():
            tensor = tc.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            request.append(tensor)
        return self.client.infer(model, request, parameters=parameters).as_numpy("output")

    def check_bag(self, out, params, indices, kwargs, what):
        """The answer equals the reference's bytes, or is within its bound (see
        ref_embedding_bag: exact for unweighted SUM and MAX)."""
        self.assertIsNone(mismatch(out, *ref_embedding_bag(params, indices, **kwargs)), what)

    def test_embedding_bag_random_requests_equal_numpy(self):
        rng = np.random.default_rng(20261125)
        mode_cases = (str.lower, str.upper, str.capitalize)
        k = 0
        for dtype in EB_FLOAT_DTYPES:
            for mode in EB_MODES:
                for weighted in (False, True) if mode != "max" else (False,):
                    for fixed in (False, True):
                        for _ in range(4):
                            params, indices, kwargs = random_bag_case(rng, dtype, mode, weighted,
                                                                      fixed)
                            what = f"{np.dtype(dtype).name} {indices.shape} {kwargs}"
                            with self.subTest(what):
                                out = self.bag_infer(
                                    "embedding_bag", kserve_inputs(params, indices, kwargs),
                                    kserve_parameters(kwargs, mode_case=mode_cases[k % 3]))
                                self.check_bag(out, params, indices, kwargs, what)
                            k += 1

    def test_embedding_bag_on_resident_tables(self):
        rng = np.random.default_rng(20261126)
        for dtype in (np.float16, np.float32, np.float64):  # what .npy carries (not bfloat16)
            table = (rng.standard_normal((int(rng.integers(5, 40)), 6)) * 4).astype(dtype)
            name = f"bags_{np.dtype(dtype).name}"
            self.cli("put", name, "--input", self.npy(f"{name}.npy", table))
            self.assertTrue(self.client.is_model_ready(name))
            for mode in EB_MODES:
                for weighted in (False, True) if mode != "max" else (False,):
                    for fixed in (False, True):
                        for _ in range(2):
                            _, indices, kwargs = random_bag_case(rng, dtype, mode, weighted, fixed,
                                                                 table=table)
                            what = f"{name} {indices.shape} {kwargs}"
                            with self.subTest(what):
                                out = self.bag_infer(name, kserve_inputs(None, indices, kwargs),
                                                     kserve_parameters(kwargs, op=True))
                                self.check_bag(out, table, indices, kwargs, what)
                                # The same request with the table inline: the same bytes.
                                inline = self.bag_infer(
                                    "embedding_bag", kserve_inputs(table, indices, kwargs),
                                    kserve_parameters(kwargs))
                                self.assertEqual(inline.tobytes(), out.tobytes(), what)
            # Without op, the table still gathers.
            got = self.bag_infer(name, {"indices": ("INT64", np.array([1, -1]))}, None)
            self.assertEqual(got.tobytes(), table[[1, -1]].tobytes())
            self.cli("delete", name)

    def test_compact_tables_are_float32_models(self):
        # A table stored int8-rowwise or float16 (put --storage) is an FP32 model: its gathers
        # and pooled lookups return what the native API returns, the float32 rows the stored
        # values mean (the NumPy reference of the formulas).
        rng = np.random.default_rng(20261127)
        table = (rng.standard_normal((30, 8)) * 4).astype(np.float32)
        path = self.npy("compact.npy", table)
        for storage, meaning in (("int8-rowwise", dequantize_rowwise8(quantize_rowwise8(table))),
                                 ("float16", float16_meaning(table))):
            name = storage.replace("-", "_")
            self.cli("put", name, "--input", path, "--storage", storage)
            self.assertTrue(self.client.is_model_ready(name))
            metadata = self.client.get_model_metadata(name, as_json=True)
            self.assertEqual(metadata["outputs"][0]["datatype"], "FP32")
            got = self.bag_infer(name, {"indices": ("INT64", np.array([[1, -1], [29, 0]]))},
                                 None)
            self.assertEqual(got.tobytes(), meaning[[[1, -1], [29, 0]]].tobytes(), storage)
            for mode in EB_MODES:
                _, indices, kwargs = random_bag_case(rng, np.float32, mode, mode != "max", False,
                                                     table=meaning)
                what = f"{storage} {mode}"
                out = self.bag_infer(name, kserve_inputs(None, indices, kwargs),
                                     kserve_parameters(kwargs, op=True))
                self.check_bag(out, meaning, indices, kwargs, what)
                inline = self.bag_infer("embedding_bag", kserve_inputs(meaning, indices, kwargs),
                                        kserve_parameters(kwargs))
                self.assertEqual(inline.tobytes(), out.tobytes(), what)
            self.assert_code(
                lambda: self.client.infer(name, inputs(None, None, np.array([[3, 1]], np.int32)),
                                          parameters={"op": "gather_nd"}),
                "INVALID_ARGUMENT", "GatherNd is not served on compact tables")
            self.cli("delete", name)

    def test_embedding_bag_metadata_and_errors(self):
        self.assertTrue(self.client.is_model_ready("embedding_bag"))
        metadata = self.client.get_model_metadata("embedding_bag", as_json=True)
        self.assertEqual([i["name"] for i in metadata["inputs"]],
                         ["params", "indices", "offsets", "per_sample_weights"])
        self.assertEqual([o["name"] for o in metadata["outputs"]], ["output"])
        self.assertEqual(metadata["outputs"][0]["shape"], ["-1", "-1"])

        table = np.arange(8, dtype=np.float32).reshape(4, 2)
        self.cli("put", "bag_errors", "--input", self.npy("bag_errors.npy", table))
        params = ("FP32", table)
        indices = ("INT64", np.array([0, 5], np.int64))
        offsets = ("INT32", np.array([0], np.int32))

        def call(model, parameters=None, **tensors):
            return lambda: self.bag_infer(model, tensors, parameters)

        cases = [
            (call("embedding_bag", {"mode": "median"}, params=params, indices=indices,
                  offsets=offsets),
             "parameter 'mode' must be the string \"sum\" (the default), \"mean\", \"max\" or "
             "\"sqrtn\" (in any case), not \"median\""),
            (call("embedding_bag", {"mode": 2}, params=params, indices=indices, offsets=offsets),
             "parameter 'mode' must be the string"),
            (call("embedding_bag", {"include_last_offset": 1}, params=params, indices=indices,
                  offsets=offsets),
             "parameter 'include_last_offset' must be a boolean (bool_param)"),
            (call("embedding_bag", {"padding_idx": "0"}, params=params, indices=indices,
                  offsets=offsets),
             "parameter 'padding_idx' must be an integer (int64_param)"),
            (call("embedding_bag", {"axis": 0}, params=params, indices=indices, offsets=offsets),
             "unknown parameter 'axis': this model takes mode, include_last_offset, padding_idx"),
            (call("embedding_bag", indices=indices, offsets=offsets),
             "model 'embedding_bag' takes params and indices, and optionally offsets and "
             "per_sample_weights; missing params"),
            (call("embedding_bag", params=params, indices=indices, offsets=offsets,
                  weights=("FP32", np.ones(2, np.float32))),
             "unknown input 'weights': model 'embedding_bag' takes params and indices"),
            (call("embedding_bag", params=params, indices=indices),
             "indices of rank 1 need offsets"),
            (call("embedding_bag", params=params, indices=indices, offsets=offsets),
             "indices[1] = 5 is not in [-4, 4)"),
            (call("embedding_bag", {"mode": "max"}, params=params, indices=indices,
                  offsets=offsets, per_sample_weights=("FP32", np.ones(2, np.float32))),
             "per_sample_weights are not supported with mode MAX"),
            (call("bag_errors", {"op": "pool"}, indices=indices),
             "parameter 'op' must be the string \"gather\" (the default), \"gather_nd\" or "
             "\"embedding_bag\""),
            (call("bag_errors", {"op": "embedding_bag", "axis": 0}, indices=indices,
                  offsets=offsets),
             "parameter 'axis' is for op \"gather\", not \"embedding_bag\""),
            (call("bag_errors", {"mode": "sum"}, indices=indices),
             "parameter 'mode' is for op \"embedding_bag\", not \"gather\""),
            (call("bag_errors", None, indices=indices, offsets=offsets),
             "unknown input 'offsets': model 'bag_errors' takes indices with op \"gather\""),
            (call("bag_errors", {"op": "embedding_bag"}, params=params, indices=indices),
             "unknown input 'params': model 'bag_errors' takes indices, and optionally offsets"),
        ]
        for run, message in cases:
            with self.subTest(message=message):
                self.assert_code(run, "INVALID_ARGUMENT", message)
        self.cli("delete", "bag_errors")

    def test_the_embedding_bag_example_in_the_docs(self):
        """docs/kserve.md's EmbeddingBag tritonclient example prints, for the model and for a
        table, the output its comment shows."""
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(repo, "docs", "kserve.md")) as f:
            text = f.read()
        section = text[text.index("## EmbeddingBag"):]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        shown = re.search(r"print\(.*?\n((?:# .*\n)+)", code).group(1)
        expected = "".join(line[2:] + "\n" for line in shown.splitlines())
        self.cli("put", "emb", "--input",
                 self.npy("doc_emb.npy", np.arange(8, dtype=np.float32).reshape(4, 2)))
        try:
            done = subprocess.run(
                [sys.executable, "-c", code.replace("localhost:50051", self.server.target)],
                capture_output=True, text=True, timeout=60)
        finally:
            self.cli("delete", "emb")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, expected * 2)

    # ---- resident tables as models ----

    def test_a_resident_table_is_a_model_taking_only_indices(self):
        table = random_tensor(self.rng, "FP32", (50, 8))
        self.cli("put", "emb", "--input", self.npy("emb.npy", table))
        self.assertTrue(self.client.is_model_ready("emb"))
        metadata = self.client.get_model_metadata("emb", as_json=True)
        self.assertEqual([i["name"] for i in metadata["inputs"]], ["indices"])
        self.assertEqual(metadata["outputs"][0]["datatype"], "FP32")

        indices = self.rng.integers(-50, 50, (4, 3)).astype(np.int64)
        got = self.client.infer("emb", inputs(None, None, indices)).as_numpy("output")
        np.testing.assert_array_equal(got, gather_reference(table, indices, 0, 0))
        native = os.path.join(self.tmp.name, "native_emb.npy")
        self.cli("gather", "--params-name", "emb", "--indices", self.npy("ie.npy", indices),
                 "--out", native)
        self.assertEqual(np.load(native).tobytes(), got.tobytes())

        got = self.client.infer("emb", inputs(None, None, np.array([[3, -1]], np.int32)),
                                parameters={"op": "gather_nd"}).as_numpy("output")
        np.testing.assert_array_equal(got, table[[3], [7]])
        got = self.client.infer("emb", inputs(None, None, np.array([5, 0], np.int32)),
                                parameters={"axis": 1}).as_numpy("output")
        np.testing.assert_array_equal(got, table[:, [5, 0]])
        self.assert_code(
            lambda: self.client.infer("emb", inputs(table, "FP32", np.array([0], np.int32))),
            "INVALID_ARGUMENT", "unknown input 'params': model 'emb' takes indices")

        self.cli("put", "cplx", "--input",
                 self.npy("c.npy", np.ones((2, 2), np.complex64)))
        self.assertFalse(self.client.is_model_ready("cplx"))
        self.assert_code(
            lambda: self.client.infer("cplx", inputs(None, None, np.array([0], np.int32))),
            "INVALID_ARGUMENT", "complex64 tensor, which has no KServe v2 datatype")
        self.cli("delete", "emb")
        self.assert_code(lambda: self.client.is_model_ready("emb"), "NOT_FOUND",
                         "model 'emb' not found")


class KserveGrpcAuthTest(unittest.TestCase):
    def test_the_token_is_needed_except_for_the_probes(self):
        with tempfile.NamedTemporaryFile("w", suffix=".tokens") as tokens:
            tokens.write("s3cret\n")
            tokens.flush()
            with ServerProcess(f"--auth_token_file={tokens.name}") as server:
                client = tc.InferenceServerClient(server.target)
                self.assertTrue(client.is_server_live())
                self.assertTrue(client.is_server_ready())
                params = np.arange(6, dtype=np.float32)
                request = inputs(params, "FP32", np.array([5], np.int32))
                with self.assertRaises(InferenceServerException) as raised:
                    client.infer("gather", request)
                self.assertEqual(raised.exception.status(), "StatusCode.UNAUTHENTICATED")
                with self.assertRaises(InferenceServerException):
                    client.get_model_metadata("gather")
                got = client.infer("gather", request,
                                   headers={"authorization": "Bearer s3cret"}).as_numpy("output")
                np.testing.assert_array_equal(got, [5.0])
                client.close()


if __name__ == "__main__":
    unittest.main()
