"""KServe v2 lookups by keys (issue 42): a keyed table's model takes an INT64 input `keys` in
place of `indices`, with the parameters `missing` and `return_found` and the output `found`
(docs/kserve.md, "Keyed tables"), through NVIDIA's unmodified tritonclient over gRPC (raw and
typed contents) and HTTP (JSON and binary data).

Against the real tensorcompute-server, on random keyed tables with random int64 keys (INT64_MIN,
INT64_MAX, 0 and negative ones among them): Gather and EmbeddingBag under every missing-key
policy, with and without the found mask, checked against a NumPy dictionary reference (key ->
row of the table extended by the zero row and the default row; exact for Gather and unweighted
SUM/MAX, within embedding_bag_reference's bound otherwise) and byte for byte against the native
API's answer by keys (the bundled CLI, which writes .npy). Then every error with its message (the
native API's words), gRPC's code and HTTP's status, and the model metadata and configuration.

Run by ctest with .venv-triton's Python, from tests/server with tests/testing on PYTHONPATH and
TC_SERVER_BINARY, TC_CLI_BINARY set.
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
import grpc

from compact_reference import float16_meaning
from embedding_bag_reference import EB_MODES, mismatch, ref_embedding_bag
from keyed_reference import INT64_MAX, INT64_MIN, KeyedReference as Reference, random_keys
from reserved_ports import ReservedPorts
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")
# The ways a request travels: gRPC raw_input_contents, gRPC typed contents, HTTP JSON data,
# HTTP binary data.
TRANSPORTS = ("grpc", "grpc-typed", "http-json", "http-binary")


class KserveKeysTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--http_listen=127.0.0.1:0", "--cpu_threads=2").__enter__()
        cls.http = httpclient.InferenceServerClient(url=f"127.0.0.1:{cls.server.http_port}")
        cls.grpc = grpcclient.InferenceServerClient(url=cls.server.target)
        cls.stub = service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(cls.server.target))
        cls.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(42042)
        # "kz": policy zero, with a default row and room for more keys; "ke": policy error, no
        # default row; "kh": stored as float16, policy default; "plain": no keys at all.
        cls.tables, cls.policy, cls.has_default = {}, {}, {}
        for name, missing, default, storage in (("kz", "zero", True, "as-is"),
                                                ("ke", "error", False, "as-is"),
                                                ("kh", "default", True, "float16")):
            n = int(rng.integers(20, 60))
            rows = (rng.standard_normal((n, 4)) * 8).astype(np.float32)
            keys = random_keys(rng, n)
            default_row = (rng.standard_normal(4) * 8).astype(np.float32) if default else None
            flags = ["--keys", cls.npy(f"{name}_keys.npy", keys), "--missing", missing,
                     "--capacity", str(n + 7), "--storage", storage]
            if default:
                flags += ["--default-row", cls.npy(f"{name}_default.npy", default_row)]
            cls.cli("put", name, "--input", cls.npy(f"{name}.npy", rows), *flags)
            if storage == "float16":  # the rows and default row it stores mean these
                rows = float16_meaning(rows)
                default_row = float16_meaning(default_row)
            cls.tables[name] = Reference(rows, keys, default_row)
            cls.policy[name], cls.has_default[name] = missing, default
        cls.cli("put", "plain", "--input",
                cls.npy("plain.npy", rng.standard_normal((5, 4)).astype(np.float32)))

    @classmethod
    def tearDownClass(cls):
        cls.http.close()
        cls.grpc.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    @classmethod
    def cli(cls, *args):
        return subprocess.run([CLI, *args, "--target", cls.server.target], check=True,
                              capture_output=True, text=True)

    @classmethod
    def npy(cls, name, array):
        path = os.path.join(cls.tmp.name, name)
        np.save(path, array)
        return path

    # ---- the calls ----

    def infer(self, transport, model, tensors, parameters, found_output=False):
        """(output, found or None) of one infer call. tensors: name -> array (int64 keys and
        offsets, float32 weights); found_output: ask for "found" as a requested output rather
        than (only) by the return_found parameter."""
        if transport == "grpc-typed":
            return self.infer_typed(model, tensors, parameters, found_output)
        http = transport.startswith("http")
        module = httpclient if http else grpcclient
        inputs = []
        for name, array in tensors.items():
            datatype = {np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                        np.dtype(np.float32): "FP32"}[array.dtype]
            tensor = module.InferInput(name, list(array.shape), datatype)
            if http:
                tensor.set_data_from_numpy(array, binary_data=transport == "http-binary")
            else:
                tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = None
        if found_output:
            names = ["output", "found"]
            outputs = ([httpclient.InferRequestedOutput(n, binary_data=transport == "http-binary")
                        for n in names] if http
                       else [grpcclient.InferRequestedOutput(n) for n in names])
        client = self.http if http else self.grpc
        result = client.infer(model, inputs, outputs=outputs, parameters=parameters)
        found = result.as_numpy("found")
        return result.as_numpy("output"), found

    def infer_typed(self, model, tensors, parameters, found_output):
        """infer over gRPC with every input in its typed contents field."""
        request = service_pb2.ModelInferRequest(model_name=model)
        for name, array in tensors.items():
            tensor = request.inputs.add(name=name, shape=list(array.shape))
            if array.dtype == np.int64:
                tensor.datatype = "INT64"
                tensor.contents.int64_contents.extend(array.ravel().tolist())
            elif array.dtype == np.int32:
                tensor.datatype = "INT32"
                tensor.contents.int_contents.extend(array.ravel().tolist())
            else:
                tensor.datatype = "FP32"
                tensor.contents.fp32_contents.extend(array.ravel().tolist())
        for key, value in (parameters or {}).items():
            if isinstance(value, bool):
                request.parameters[key].bool_param = value
            elif isinstance(value, int):
                request.parameters[key].int64_param = value
            else:
                request.parameters[key].string_param = value
        if found_output:
            request.outputs.add(name="output")
            request.outputs.add(name="found")
        try:
            response = self.stub.ModelInfer(request)
        except grpc.RpcError as error:
            raise InferenceServerException(msg=error.details(), status=str(error.code()))
        arrays = {}
        for i, output in enumerate(response.outputs):
            dtype = {"FP32": np.float32, "BOOL": np.bool_}[output.datatype]
            arrays[output.name] = np.frombuffer(response.raw_output_contents[i],
                                                dtype=dtype).reshape(list(output.shape))
        self.assertEqual(len(response.outputs), len(response.raw_output_contents))
        return arrays["output"], arrays.get("found")

    def native(self, op, table, keys, missing, extra=()):
        """The native API's (output, found) by keys, through the CLI."""
        out = os.path.join(self.tmp.name, "native_out.npy")
        found = os.path.join(self.tmp.name, "native_found.npy")
        args = [op, "--params-name", table, "--keys", self.npy("native_keys.npy", keys),
                "--out", out, "--found-out", found, *extra]
        if missing is not None:
            args += ["--missing", missing]
        self.cli(*args)
        return np.load(out), np.load(found)

    # ---- Gather ----

    def test_gather_by_keys_equals_the_dict_and_the_native_api(self):
        rng = np.random.default_rng(4211)
        for table, reference in self.tables.items():
            policies = [None, "zero", "error"] + (["default"] if self.has_default[table] else [])
            for missing in policies:
                policy = missing or self.policy[table]
                fraction = 0.0 if policy == "error" else 0.4
                for shape in [(), (int(rng.integers(0, 40)),), (3, int(rng.integers(1, 9)))]:
                    keys = reference.lookup(rng, shape, fraction)
                    slots, found = reference.slots(keys, policy)
                    want = reference.extended[slots]
                    native, native_found = self.native("gather", table, keys, missing)
                    self.assertEqual(native.tobytes(), want.tobytes())
                    np.testing.assert_array_equal(native_found, found)
                    parameters = {} if missing is None else {"missing": missing}
                    for transport in TRANSPORTS:
                        what = f"{table} missing={missing} keys {shape} {transport}"
                        with self.subTest(what):
                            by_output = bool(rng.integers(2))
                            asked = dict(parameters)
                            if not by_output:
                                asked["return_found"] = True
                            out, got_found = self.infer(transport, table, {"keys": keys}, asked,
                                                        found_output=by_output)
                            self.assertEqual((out.dtype, out.shape), (want.dtype, want.shape))
                            self.assertEqual(out.tobytes(), native.tobytes())
                            self.assertEqual(got_found.dtype, np.bool_)
                            self.assertEqual(got_found.shape, keys.shape)
                            np.testing.assert_array_equal(got_found, found)
                            plain, no_found = self.infer(transport, table, {"keys": keys},
                                                         parameters)
                            self.assertIsNone(no_found)
                            self.assertEqual(plain.tobytes(), native.tobytes())

    def test_the_extreme_keys_and_an_empty_lookup(self):
        reference = self.tables["kz"]
        keys = np.array([[INT64_MIN, INT64_MAX], [0, -1]], np.int64)
        slots, found = reference.slots(keys, "default")
        for transport in TRANSPORTS:
            out, got = self.infer(transport, "kz", {"keys": keys},
                                  {"missing": "DEFAULT", "return_found": True})
            np.testing.assert_array_equal(out, reference.extended[slots])
            np.testing.assert_array_equal(got, found)
            self.assertTrue(got.all())  # the table holds every special key
            out, got = self.infer(transport, "kz", {"keys": np.zeros((0,), np.int64)},
                                  {"return_found": True})
            self.assertEqual((out.shape, got.shape), ((0, 4), (0,)))

    # ---- EmbeddingBag ----

    def test_embedding_bag_by_keys_every_mode_and_policy(self):
        rng = np.random.default_rng(4212)
        for table, reference in self.tables.items():
            policies = [None, "zero", "skip", "error"] + (
                ["default"] if self.has_default[table] else [])
            for missing in policies:
                policy = missing or self.policy[table]
                fraction = 0.0 if policy == "error" else 0.35
                for mode in EB_MODES * 3:
                    fixed = bool(rng.integers(2))
                    weighted = mode == "sum" and bool(rng.integers(2))
                    bags = int(rng.integers(0, 9))
                    tensors, kwargs, extra = {}, {}, []
                    if fixed:
                        keys = reference.lookup(rng, (bags, int(rng.integers(0, 4))), fraction)
                    else:
                        sizes = rng.integers(0, 5, size=bags)
                        keys = reference.lookup(rng, (int(sizes.sum()),), fraction)
                        offsets = np.cumsum(np.concatenate([[0], sizes]))[:-1].astype(np.int64)
                        tensors["offsets"] = offsets
                        kwargs["offsets"] = offsets
                        extra += ["--offsets", self.npy("offsets.npy", offsets)]
                    if weighted:
                        weights = rng.standard_normal(keys.shape).astype(np.float32)
                        tensors["per_sample_weights"] = weights
                        kwargs["per_sample_weights"] = weights
                        extra += ["--per-sample-weights", self.npy("weights.npy", weights)]
                    slots, found = reference.slots(keys, policy)
                    want, bound = ref_embedding_bag(
                        reference.extended, slots, mode=mode,
                        padding_idx=reference.n if policy == "skip" else None, **kwargs)
                    native, native_found = self.native("embedding-bag", table, keys, missing,
                                                       ["--mode", mode, *extra])
                    what = f"{table} missing={missing} {mode} keys {keys.shape} w={weighted}"
                    self.assertIsNone(mismatch(native, want, bound), what)
                    np.testing.assert_array_equal(native_found, found)
                    parameters = {"op": "embedding_bag", "mode": mode}
                    if missing is not None:
                        parameters["missing"] = missing
                    for transport in TRANSPORTS:
                        with self.subTest(f"{what} {transport}"):
                            out, got_found = self.infer(
                                transport, table, {"keys": keys, **tensors},
                                {**parameters, "return_found": True})
                            self.assertEqual(out.tobytes(), native.tobytes())
                            self.assertEqual(out.shape, native.shape)
                            np.testing.assert_array_equal(got_found, found)

    # ---- errors ----

    def assert_error(self, transport, code, message, model, tensors, parameters=None,
                     found_output=False):
        """The call fails with gRPC's `code` (HTTP: 400 for INVALID_ARGUMENT) and exactly
        `message`."""
        with self.assertRaises(InferenceServerException) as caught:
            self.infer(transport, model, tensors, parameters or {}, found_output)
        status = caught.exception.status()
        if transport.startswith("http"):
            self.assertEqual(status, {"INVALID_ARGUMENT": "400"}[code], transport)
        else:
            self.assertEqual(status, f"StatusCode.{code}", transport)
        self.assertEqual(caught.exception.message(), message, transport)

    def test_errors_are_the_native_ones(self):
        ke = self.tables["ke"]
        present = np.array(list(ke.slot)[:3], np.int64)
        absent = ke.absent(np.random.default_rng(7), 1)[0]
        grid = np.array([[present[0], present[1]], [absent, present[2]]], np.int64)
        cases = [
            ("a missing key under the ERROR policy", "ke", {"keys": grid}, {},
             f"keys[1,0] = {absent} is not a key of table 'ke'"),
            ("the same, asked for by the request", "kz", {"keys": np.array([absent], np.int64)},
             {"missing": "error"}, f"keys[0] = {absent} is not a key of table 'kz'"
             if absent not in self.tables["kz"].slot else None),
            ("indices and keys", "ke", {"indices": np.array([0], np.int64), "keys": present}, {},
             "set either indices or keys, not both"),
            ("keys on a table without keys", "plain", {"keys": present}, {},
             "table 'plain' has no keys (put it with keys); look it up by indices"),
            ("GatherNd by keys", "ke", {"keys": present}, {"op": "gather_nd"},
             "op \"gather_nd\" does not take keys: a key names a whole row, which is op "
             "\"gather\" along axis 0"),
            ("keys that are not int64", "ke", {"keys": present.astype(np.int32)}, {},
             "keys: keys are int64, got int32 [3]"),
            ("SKIP in a Gather", "ke", {"keys": present}, {"missing": "skip"},
             "missing=SKIP is for EmbeddingBag: a Gather answers a row for every key"),
            ("DEFAULT on a table without a default row", "ke", {"keys": present},
             {"missing": "default"},
             "table 'ke' has no default row (put it with one); missing=DEFAULT_ROW needs it"),
            ("a Gather by keys on another axis", "ke", {"keys": present}, {"axis": 1},
             "a Gather by keys is along axis 0 without batch_dims (a key names a whole row)"),
            ("padding_idx with keys", "ke", {"keys": present},
             {"op": "embedding_bag", "padding_idx": 0},
             "padding_idx is for indices; with keys, missing=SKIP leaves out the keys a table "
             "lacks"),
            ("missing with indices", "ke", {"indices": np.array([0], np.int64)},
             {"missing": "zero"},
             "missing and return_found are for lookups by keys; the request sends indices"),
            ("return_found with indices", "ke", {"indices": np.array([0], np.int64)},
             {"return_found": True},
             "missing and return_found are for lookups by keys; the request sends indices"),
            ("return_found on a table without keys", "plain",
             {"indices": np.array([0], np.int64)}, {"return_found": True},
             "unknown parameter 'return_found': this model takes op, axis, batch_dims, mode, "
             "include_last_offset, padding_idx"),
            ("an unknown policy", "kz", {"keys": present}, {"missing": "maybe"},
             "parameter 'missing' must be the string \"table\" (the default: the table's "
             "policy), \"error\", \"zero\", \"default\" or \"skip\" (embedding_bag only)"),
            ("a planner's words about indices", "ke",
             {"keys": present[:2], "offsets": np.array([0, 5], np.int64)},
             {"op": "embedding_bag"}, "offsets[1] = 5 is past the end of keys (2 values)"),
            ("keys on a built-in model", "gather",
             {"params": np.zeros((2,), np.float32), "keys": present}, {},
             "unknown input 'keys': model 'gather' takes params and indices (keys are for a "
             "resident table put with keys: use the table's model)"),
            ("neither indices nor keys", "ke", {}, {},
             "model 'ke' takes indices or keys; missing indices or keys"),
        ]
        for what, model, tensors, parameters, message in cases:
            if message is None:
                continue
            for transport in TRANSPORTS:
                if not tensors and transport != "grpc":
                    continue  # tritonclient needs an input over HTTP; typed is the same path
                with self.subTest(f"{what} {transport}"):
                    self.assert_error(transport, "INVALID_ARGUMENT", message, model, tensors,
                                      parameters)
        for transport in ("grpc", "http-json"):
            with self.subTest(f"output 'found' with indices {transport}"):
                self.assert_error(transport, "INVALID_ARGUMENT",
                                  "output 'found' is for lookups by keys; the request sends "
                                  "indices", "ke", {"indices": np.array([0], np.int64)},
                                  found_output=True)

    def test_hostile_keys_are_refused_before_they_cost_memory(self):
        """10^9 keys declared with one sent (raw or typed), and keys of rank 40: refused, and
        the server's memory stays put."""
        def rss_kib():
            with open(f"/proc/{self.server.pid}/status") as f:
                return int(next(line for line in f if line.startswith("VmRSS")).split()[1])

        before = rss_kib()
        for typed in (False, True):
            request = service_pb2.ModelInferRequest(model_name="kz")
            keys = request.inputs.add(name="keys", datatype="INT64", shape=[10**9])
            if typed:
                keys.contents.int64_contents.append(7)
            else:
                request.raw_input_contents.append(np.int64(7).tobytes())
            request.parameters["return_found"].bool_param = True
            with self.assertRaises(grpc.RpcError) as caught:
                self.stub.ModelInfer(request)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("input 'keys'", caught.exception.details())
        deep = np.zeros((1,) * 40, np.int64)
        with self.assertRaises(InferenceServerException) as caught:
            self.infer("grpc", "kz", {"keys": deep}, {"return_found": True})
        self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
        self.assertIn("keys", caught.exception.message())
        self.assertLess(rss_kib() - before, 64 << 10)

    def test_the_native_api_answers_the_same_errors(self):
        """The messages above are the native API's own: the CLI gets them too."""
        ke = self.tables["ke"]
        absent = ke.absent(np.random.default_rng(8), 1)[0]
        keys = np.array([[list(ke.slot)[0]], [absent]], np.int64)
        result = subprocess.run(
            [CLI, "gather", "--params-name", "ke", "--keys", self.npy("bad.npy", keys),
             "--target", self.server.target], capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(f"keys[1,0] = {absent} is not a key of table 'ke'", result.stderr)
        with self.assertRaises(InferenceServerException) as caught:
            self.infer("grpc", "ke", {"keys": keys}, {})
        self.assertIn(caught.exception.message(), result.stderr)

    # ---- the example in the docs ----

    def test_the_example_in_the_docs(self):
        """docs/kserve.md's keyed-table example prints what its comments show."""
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(repo, "docs", "kserve.md")) as f:
            text = f.read()
        section = text[text.index("## Keyed tables"):]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        expected = ""
        lines = code.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("print("):
                continue
            for shown in lines[i + 1:]:
                if not shown.startswith("#"):
                    break
                expected += shown[2:] + "\n"
        self.assertIn("[[ True False]", expected)
        self.cli("put", "users", "--input",
                 self.npy("users.npy", np.arange(8, dtype=np.float32).reshape(4, 2)),
                 "--keys", self.npy("ids.npy", np.array([90210, -42, 2**63 - 1, 7], np.int64)),
                 "--missing", "zero")
        try:
            done = subprocess.run(
                [sys.executable, "-c", code.replace("localhost:50051", self.server.target)],
                capture_output=True, text=True, timeout=60)
        finally:
            self.cli("delete", "users")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, expected)

    # ---- metadata and configuration ----

    def test_metadata_and_config_list_keys_and_found(self):
        for client in (self.grpc, self.http):
            for name in ("kz", "ke", "kh", "plain"):
                keyed = name != "plain"
                metadata = client.get_model_metadata(name, as_json=True) \
                    if client is self.grpc else client.get_model_metadata(name)
                inputs = {i["name"]: i for i in metadata["inputs"]}
                outputs = {o["name"]: o for o in metadata["outputs"]}
                self.assertEqual(sorted(inputs), ["indices", "keys"] if keyed else ["indices"])
                self.assertEqual(sorted(outputs), ["found", "output"] if keyed else ["output"])
                if keyed:
                    self.assertEqual(inputs["keys"]["datatype"], "INT64")
                    self.assertEqual([int(d) for d in inputs["keys"]["shape"]], [-1])
                    self.assertEqual(outputs["found"]["datatype"], "BOOL")
                config = client.get_model_config(name, as_json=True) \
                    if client is self.grpc else client.get_model_config(name)
                if "config" in config:
                    config = config["config"]
                config_inputs = {i["name"]: i for i in config["input"]}
                self.assertEqual(sorted(config_inputs), sorted(inputs))
                self.assertEqual(sorted(o["name"] for o in config["output"]), sorted(outputs))
                parameters = {k: v["string_value"] for k, v in config["parameters"].items()}
                if keyed:
                    self.assertEqual(config_inputs["keys"]["data_type"], "TYPE_INT64")
                    self.assertTrue(config_inputs["keys"].get("optional", False))
                    self.assertTrue(config_inputs["indices"].get("optional", False))
                    reference = self.tables[name]
                    self.assertEqual(parameters["keyed"], "true")
                    self.assertEqual(parameters["missing"], self.policy[name])
                    self.assertEqual(parameters["default_row"],
                                     "true" if self.has_default[name] else "false")
                    self.assertEqual(outputs["output"]["datatype"], "FP32")
                    self.assertEqual(parameters["capacity"], str(reference.n + 7))
                    self.assertEqual(parameters["keys"], str(reference.n))
                else:
                    self.assertNotIn("keyed", parameters)
                    self.assertFalse(config_inputs["indices"].get("optional", False))


class KserveKeysBudgetTest(unittest.TestCase):
    """A lookup by keys holds a slot (8 bytes) a key, and a byte a key for the found mask, beside
    its keys: over KServe too they count against --max_inflight_bytes before they are made, in
    the native API's words (keyed_tables_test.py's KeyedBudgetTest)."""

    def test_the_slots_of_the_keys_are_charged_to_the_budget(self):
        rng = np.random.default_rng(4244)
        rows = rng.standard_normal((10, 1)).astype(np.float32)
        keys = random_keys(rng, 10)
        budget = 1_650_000
        with ServerProcess("--cpu_threads=2", "--http_listen=127.0.0.1:0",
                           f"--max_inflight_bytes={budget}") as server, \
                tempfile.TemporaryDirectory() as tmp:
            rows_path, keys_path = os.path.join(tmp, "r.npy"), os.path.join(tmp, "k.npy")
            np.save(rows_path, rows)
            np.save(keys_path, keys)
            subprocess.run([CLI, "put", "small", "--input", rows_path, "--keys", keys_path,
                            "--target", server.target], check=True, capture_output=True)
            grpc_client = grpcclient.InferenceServerClient(url=server.target)
            http_client = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.http_port}")
            position = {int(k): i for i, k in enumerate(keys)}

            def infer(client, looked):
                module = grpcclient if client is grpc_client else httpclient
                tensor = module.InferInput("keys", [len(looked)], "INT64")
                if client is grpc_client:
                    tensor.set_data_from_numpy(looked)
                else:
                    tensor.set_data_from_numpy(looked, binary_data=True)
                return client.infer("small", [tensor], parameters={"return_found": True})

            # 100,000 keys over HTTP: 800 kB of binary body and 800 kB decoded from it fit the
            # budget; with their 800 kB of slots and 100 kB of mask they do not. (Over gRPC a
            # ModelInferRequest is held to its decoded bound before it is parsed, three times
            # its raw bytes, which is more than the keys and their slots: that refusal comes
            # first. KeyedLookupBytes, which both front ends charge, is kserve_keys_test.cc's.)
            many = rng.choice(keys, 100_000)
            with self.assertRaises(InferenceServerException) as caught:
                infer(http_client, many)
            self.assertEqual(caught.exception.status(), "429")
            self.assertIn("(the slots of 100000 keys), more than the whole "
                          f"max_inflight_bytes budget of {budget}", caught.exception.message())
            # A tenth of them is served, with its found mask (once the refused call has let go
            # of its bytes: until then the server answers UNAVAILABLE, "retry").
            few = many[:10_000]
            for client in (grpc_client, http_client):
                deadline = time.monotonic() + 30
                while True:
                    try:
                        result = infer(client, few)
                        break
                    except InferenceServerException as error:
                        if (error.status() not in ("StatusCode.UNAVAILABLE", "503")
                                or time.monotonic() > deadline):
                            raise
                        time.sleep(0.05)
                np.testing.assert_array_equal(result.as_numpy("output"),
                                              rows[[position[int(k)] for k in few]])
                self.assertTrue(result.as_numpy("found").all())
            grpc_client.close()
            http_client.close()


class KserveKeysShardedTest(unittest.TestCase):
    """A table sharded by key (docs/resident-tables.md): a KServe lookup by keys sent to any
    shard's server is routed by key as a native one is, with the found mask."""

    def test_any_shard_answers_every_key(self):
        rng = np.random.default_rng(4245)
        n, shards = 300, 3
        keys = random_keys(rng, n)
        rows = rng.standard_normal((n, 4)).astype(np.float32)
        reference = Reference(rows, keys)
        with tempfile.TemporaryDirectory() as tmp:
            rows_path, keys_path = os.path.join(tmp, "t.npy"), os.path.join(tmp, "k.npy")
            np.save(rows_path, rows)
            np.save(keys_path, keys)
            reservation = ReservedPorts(shards)
            ports = reservation.numbers
            peers = ",".join(f"ipv4:127.0.0.1:{p}" for p in ports)
            servers = []
            try:
                for index, port in enumerate(ports):
                    servers.append(ServerProcess(
                        "--cpu_threads=1", f"--listen=127.0.0.1:{port}", "--http_listen=127.0.0.1:0",
                        f"--preload=T={rows_path}", f"--preload_keys=T={keys_path}:zero",
                        f"--shard_index={index}", f"--shard_count={shards}",
                        f"--shard_peers={peers}").__enter__())
                for server in servers:
                    for transport in ("grpc", "http-binary"):
                        looked = reference.lookup(rng, (4, 5), 0.3)
                        slots, found = reference.slots(looked, "zero")
                        tensor_module = httpclient if transport.startswith("http") else grpcclient
                        client = (httpclient.InferenceServerClient(
                            url=f"127.0.0.1:{server.http_port}")
                                  if transport.startswith("http")
                                  else grpcclient.InferenceServerClient(url=server.target))
                        tensor = tensor_module.InferInput("keys", [4, 5], "INT64")
                        if transport.startswith("http"):
                            tensor.set_data_from_numpy(looked, binary_data=True)
                        else:
                            tensor.set_data_from_numpy(looked)
                        result = client.infer("T", [tensor], parameters={"return_found": True})
                        np.testing.assert_array_equal(result.as_numpy("output"),
                                                      reference.extended[slots])
                        np.testing.assert_array_equal(result.as_numpy("found"), found)
                        client.close()
            finally:
                for server in servers:
                    server.__exit__(None, None, None)
                reservation.close()


if __name__ == "__main__":
    unittest.main()
