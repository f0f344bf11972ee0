"""End-to-end tests of the Python client (client/python) against the real tensorcompute-server.

Needs $TC_SERVER_BINARY and the `tensorcompute` package installed in this Python (ctest's
python_client.install does it). Run by hand:

    .venv/bin/pip install --no-deps --no-build-isolation ./client/python
    cd tests/client && PYTHONPATH=../testing \\
        TC_SERVER_BINARY=../../build/server/tensorcompute-server \\
        ../../.venv/bin/python3 -m unittest -v python_client_test

Results are checked bit for bit against numpy references (np.take, and a gather_nd written
here) on random data from a fixed seed; embedding_bag against a NumPy loop written here, bit
for bit where the arithmetic allows it (see ref_embedding_bag).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import unittest

import grpc
import ml_dtypes
import numpy as np

import tensorcompute
from tensorcompute import Client, TensorComputeError
from embedding_bag_reference import EB_FLOAT_DTYPES, EB_MODES, mismatch, random_bag_case, \
    ref_embedding_bag
from server_process import ServerProcess

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "client", "python", "examples", "gather_example.py")

NUMERIC_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16,
]

_server = None
_client = None


def setUpModule():
    global _server, _client
    _server = ServerProcess("--cpu_threads=2")
    _server.__enter__()
    _client = Client(_server.target, timeout=30.0)


def tearDownModule():
    if _client is not None:
        _client.close()
    if _server is not None:
        _server.__exit__(None, None, None)


def dead_target():
    """127.0.0.1:<a port nobody listens on>."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# --- numpy references ---------------------------------------------------------------------

def ref_gather(params, indices, axis=None, batch_dims=0):
    params, indices = np.asarray(params), np.asarray(indices)
    b = batch_dims + indices.ndim if batch_dims < 0 else batch_dims
    axis = b if axis is None else (axis + params.ndim if axis < 0 else axis)
    n = int(np.prod(params.shape[:b], dtype=np.int64))
    bp = params.reshape((n,) + params.shape[b:])
    bi = indices.reshape((n,) + indices.shape[b:])
    out_shape = params.shape[:axis] + indices.shape[b:] + params.shape[axis + 1:]
    out = np.empty((n,) + out_shape[b:], dtype=params.dtype)
    for k in range(n):
        out[k] = np.take(bp[k], bi[k], axis=axis - b)
    return out.reshape(out_shape)


def ref_gather_nd(params, indices, batch_dims=0):
    params, indices = np.asarray(params), np.asarray(indices)
    b, depth = batch_dims, indices.shape[-1]
    n = int(np.prod(params.shape[:b], dtype=np.int64))
    bp = params.reshape((n,) + params.shape[b:])
    bi = indices.reshape((n,) + indices.shape[b:])
    out_shape = indices.shape[:-1] + params.shape[b + depth:]
    out = np.empty((n,) + out_shape[b:], dtype=params.dtype)
    for k in range(n):
        out[k] = bp[k][tuple(np.moveaxis(bi[k], -1, 0))]
    return out.reshape(out_shape)


def random_array(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    values = rng.standard_normal(shape) * 100
    special = [np.nan, -0.0, np.inf, -np.inf]
    flat = values.reshape(-1)
    flat[:min(len(special), flat.size)] = special[:flat.size]
    return values.astype(dtype)


def random_indices(rng, size, shape, dtype):
    """Indices in [-size, size), so negative ones are included."""
    return rng.integers(-size, size, size=shape).astype(dtype) if size else \
        np.zeros(shape, dtype=dtype)


# Gather cases: (params shape, indices shape or None for a scalar, axis, batch_dims).
GATHER_CASES = [
    ((5,), (4,), None, 0),
    ((4, 3, 2), (2, 3), 1, 0),
    ((4, 3, 2), (5,), -1, 0),
    ((4, 3), None, 0, 0),          # scalar indices: the axis disappears
    ((3,), None, None, 0),         # scalar output
    ((2, 5, 3), (2, 4), None, 1),  # axis unset = batch_dims
    ((2, 3, 4), (2, 6), 2, 1),
    ((2, 3, 4), (2, 3, 2), 2, -1),
    ((2, 3, 4, 2), (2, 3, 5), -1, 2),
    ((0, 3), (0,), 0, 0),          # zero-size params and indices
    ((4, 0), (2,), 0, 0),
    ((3, 4), (2, 0), 1, 0),
]

# GatherNd cases: (params shape, indices shape, batch_dims).
GATHER_ND_CASES = [
    ((4, 3), (3, 2), 0),           # elements
    ((4, 3, 2), (5, 1), 0),        # slices
    ((4, 3, 2), (2, 3, 2), 0),
    ((4, 3), (2,), 0),             # one full index: scalar output
    ((2, 4, 3), (2, 5, 1), 1),
    ((2, 4, 3), (2, 5, 2), 1),
    ((2, 3, 4, 5), (2, 3, 2, 1), 2),
    ((4, 3), (0, 2), 0),           # zero-size indices
    ((3, 0), (2, 1), 0),           # zero-size slices
]


class DtypeTest(unittest.TestCase):
    def assertBitsEqual(self, out, ref):
        self.assertIsInstance(out, np.ndarray)
        self.assertEqual(out.dtype, ref.dtype)
        self.assertEqual(out.shape, ref.shape)
        self.assertTrue(out.flags.writeable)
        self.assertEqual(out.tobytes(), ref.tobytes())

    def test_gather_every_dtype(self):
        rng = np.random.default_rng(1234)
        for dtype in NUMERIC_DTYPES:
            for case_number, (pshape, ishape, axis, batch_dims) in enumerate(GATHER_CASES):
                index_dtype = (np.int32, np.int64)[case_number % 2]
                with self.subTest(dtype=np.dtype(dtype).name, case=case_number):
                    params = random_array(rng, dtype, pshape)
                    b = batch_dims + (len(ishape) if ishape else 0) if batch_dims < 0 else \
                        batch_dims
                    a = b if axis is None else axis % len(pshape)
                    if ishape is None:
                        indices = index_dtype(rng.integers(-pshape[a], pshape[a]))
                    else:
                        indices = random_indices(rng, pshape[a], ishape, index_dtype)
                        # the batch dims of indices must match params
                        self.assertEqual(indices.shape[:b], pshape[:b])
                    out = _client.gather(params, indices, axis=axis, batch_dims=batch_dims)
                    self.assertBitsEqual(out, ref_gather(params, indices, axis, batch_dims))

    def test_gather_nd_every_dtype(self):
        rng = np.random.default_rng(5678)
        for dtype in NUMERIC_DTYPES:
            for case_number, (pshape, ishape, b) in enumerate(GATHER_ND_CASES):
                index_dtype = (np.int64, np.int32)[case_number % 2]
                with self.subTest(dtype=np.dtype(dtype).name, case=case_number):
                    params = random_array(rng, dtype, pshape)
                    depth = ishape[-1]
                    indices = np.stack(
                        [random_indices(rng, pshape[b + k], ishape[:-1], index_dtype)
                         for k in range(depth)], axis=-1)
                    out = _client.gather_nd(params, indices, batch_dims=b)
                    self.assertBitsEqual(out, ref_gather_nd(params, indices, b))

    def test_python_lists_and_scalars(self):
        out = _client.gather([[1, 2], [3, 4], [5, 6]], [-1, 0])
        self.assertEqual(out.dtype, np.int64)
        np.testing.assert_array_equal(out, [[5, 6], [1, 2]])
        out = _client.gather([1.5, 2.5, 3.5], 1)
        self.assertEqual(out.shape, ())
        self.assertEqual(out, 2.5)
        out = _client.gather_nd([[True, False], [False, True]], [[1, 1], [0, 1]])
        np.testing.assert_array_equal(out, [True, False])
        out = _client.gather([1, 2, 3], [])  # an empty list of indices is sent as int64
        self.assertEqual(out.shape, (0,))

    def test_big_endian_and_non_contiguous_inputs(self):
        params = np.arange(24, dtype=">i4").reshape(4, 6)[:, ::2]
        indices = np.array([2, -1], dtype=">i8")
        out = _client.gather(params, indices, axis=0)
        self.assertEqual(out.dtype, np.int32)
        np.testing.assert_array_equal(out, np.take(params, indices, axis=0))

    def test_large_messages_both_ways(self):
        # 8 MiB each way: over gRPC's default 4 MiB receive limit, under the 64 MiB set.
        params = np.arange(2 << 20, dtype=np.float32).reshape(-1, 1024)
        out = _client.gather(params, np.arange(params.shape[0] - 1, -1, -1))
        np.testing.assert_array_equal(out, params[::-1])


class StringTest(unittest.TestCase):
    def test_str_input(self):
        params = np.array(["alpha", "", "gamma", "d\u00e9j\u00e0 vu \U0001F600"])
        out = _client.gather(params, [3, 1, -4])
        self.assertEqual(out.dtype, object)
        self.assertEqual(out.tolist(),
                         ["d\u00e9j\u00e0 vu \U0001F600".encode("utf-8"), b"", b"alpha"])

    def test_bytes_input(self):
        params = np.array([[b"a", b"bb"], [b"", b"\xff\xfe"]])
        out = _client.gather_nd(params, [[1, 1], [0, 1], [1, 0]])
        self.assertEqual(out.tolist(), [b"\xff\xfe", b"bb", b""])

    def test_object_array_with_non_utf8_and_nul_bytes(self):
        params = np.empty((2, 3), dtype=object)
        params[:] = [[b"\x00\x01\x00", "x", b"\xc3\x28"], ["", b"", "\u00fc"]]
        out = _client.gather(params, [[2, 0]], axis=1)
        self.assertEqual(out.shape, (2, 1, 2))
        self.assertEqual(out.tolist(),
                         [[[b"\xc3\x28", b"\x00\x01\x00"]], [["\u00fc".encode(), b""]]])

    def test_strings_against_reference(self):
        rng = np.random.default_rng(99)
        words = np.array([bytes(rng.integers(0, 256, size=n, dtype=np.uint8))
                          for n in rng.integers(0, 9, size=60)], dtype=object)
        params = words.reshape(3, 4, 5)
        indices = random_indices(rng, 4, (3, 2), np.int32)
        out = _client.gather(params, indices, axis=1, batch_dims=1)
        self.assertEqual(out.tolist(), ref_gather(params, indices, 1, 1).tolist())
        nd = random_indices(rng, 3, (6, 1), np.int64)
        self.assertEqual(_client.gather_nd(params, nd).tolist(),
                         ref_gather_nd(params, nd).tolist())

    def test_empty_and_scalar_string_outputs(self):
        out = _client.gather(np.array(["a", "b"]), np.zeros((0, 2), dtype=np.int64))
        self.assertEqual((out.dtype, out.shape), (np.dtype(object), (0, 2)))
        out = _client.gather_nd(np.array([["a", "b"]]), [0, 1])
        self.assertEqual((out.shape, out.item()), ((), b"b"))


class ErrorTest(unittest.TestCase):
    def assertRpcError(self, code, contains, call, *args, **kwargs):
        with self.assertRaises(TensorComputeError) as raised:
            call(*args, **kwargs)
        e = raised.exception
        self.assertEqual(e.code, code, str(e))
        self.assertIn(contains, e.message)
        self.assertEqual(str(e), f"{code.name}: {e.message}")
        return e

    def test_gather_index_out_of_range(self):
        e = self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "is not in [-3, 3)",
                                _client.gather, [1, 2, 3], [[0, 1], [7, 2]])
        self.assertEqual(str(e), "INVALID_ARGUMENT: indices[1,0] = 7 is not in [-3, 3)")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "indices[1] = -4 is not in [-3, 3)",
                            _client.gather, [1, 2, 3], np.array([0, -4], dtype=np.int32))

    def test_gather_nd_index_out_of_range(self):
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "indices[1,1] = 3 is not in [-3, 3)",
                            _client.gather_nd, np.zeros((2, 3)), [[0, 0], [1, 3]])

    def test_bad_axis_and_batch_dims(self):
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "axis = 2 is not in [-2, 2)",
                            _client.gather, np.zeros((2, 3)), [0], axis=2)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "batch_dims",
                            _client.gather, np.zeros((2, 3)), [[0]], batch_dims=3)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "batch_dims",
                            _client.gather_nd, np.zeros((2, 3)), [[0]], batch_dims=-1)

    def test_non_integer_indices(self):
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "int32 or int64",
                            _client.gather, [1, 2, 3], [0.0, 1.0])
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "int32 or int64",
                            _client.gather_nd, [1, 2, 3], np.array([[1]], dtype=np.uint8))

    def test_scalar_params(self):
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "rank >= 1",
                            _client.gather, 5, [0])

    def test_unsupported_dtypes_raise_type_error_before_any_rpc(self):
        with Client(dead_target(), timeout=5) as client:  # an RPC would fail otherwise
            for params in [np.array(["2020-01-01"], dtype="datetime64[D]"),
                           np.array([1], dtype="timedelta64[s]"),
                           np.zeros(2, dtype="V4"),
                           np.zeros(2, dtype=[("a", "i4")]),
                           np.array([1, "a"], dtype=object),
                           np.zeros(2, dtype=ml_dtypes.float8_e4m3fn)]:
                with self.subTest(dtype=str(params.dtype)):
                    with self.assertRaisesRegex(TypeError, r"^params: .*supported"):
                        client.gather(params, [0])
            with self.assertRaisesRegex(TypeError, r"^indices: unsupported dtype"):
                client.gather_nd([1, 2], np.zeros((1, 1), dtype="datetime64[D]"))

    def test_request_over_the_servers_message_limit(self):
        with ServerProcess("--cpu_threads=1", "--max_message_bytes=1048576") as server, \
                Client(server.target, timeout=10) as client:
            self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                client.gather, np.zeros(300_000, dtype=np.float32), [0])
            # a small request whose output would not fit
            self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "max_output_bytes",
                                client.gather, np.zeros((1, 100_000), dtype=np.float32),
                                np.zeros(4, dtype=np.int32))
            np.testing.assert_array_equal(client.gather([7, 8], [1]), [8])  # still serving

    def test_request_over_the_clients_message_limit(self):
        with Client(_server.target, timeout=10, max_message_bytes=1024) as client:
            self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                client.gather, np.zeros(1000, dtype=np.float32), [0])
            # a small request whose response is over it
            self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                client.gather, np.zeros((2, 16)), np.zeros(8, dtype=np.int32))

    def test_unreachable_server(self):
        with Client(dead_target(), timeout=2) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError) as raised:
                client.gather([1, 2], [0])
            self.assertIn(raised.exception.code,
                          (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))
            self.assertLess(time.monotonic() - started, 5)

    def test_closed_client(self):
        client = Client(_server.target)
        client.close()
        with self.assertRaises(ValueError):
            client.gather([1], [0])


class ChannelTest(unittest.TestCase):
    def test_health(self):
        self.assertEqual(_client.health(), "SERVING")
        with self.assertRaises(TensorComputeError) as raised:
            _client.health("no.such.Service")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_draining_server_is_skipped_and_says_not_serving(self):
        # The call channel watches health: once the server drains (NOT_SERVING during its
        # notice period) calls go to the other address without an error; health() still asks
        # it and gets the answer.
        with ServerProcess("--cpu_threads=1", "--drain_notice_ms=6000") as draining:
            target = f"ipv4:{draining.target},{_server.target}"
            with Client(target, timeout=10) as client, \
                    Client(draining.target, timeout=10) as direct:
                for _ in range(4):
                    np.testing.assert_array_equal(client.gather([4, 5, 6], [2]), [6])
                draining._process.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + 5
                while direct.health() != "NOT_SERVING" and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertEqual(direct.health(), "NOT_SERVING")
                time.sleep(0.5)  # the watch on the call channel hears it too
                for _ in range(10):
                    np.testing.assert_array_equal(client.gather([4, 5, 6], [2]), [6])

    def test_target_uris(self):
        port = _server.port
        for target in [f"dns:///127.0.0.1:{port}", f"ipv4:127.0.0.1:{port}",
                       f"ipv4:127.0.0.1:{port},{dead_target()}"]:
            with self.subTest(target=target), Client(target, timeout=10) as client:
                for _ in range(4):  # round_robin over the addresses skips the dead one
                    np.testing.assert_array_equal(client.gather([4, 5, 6], [2, 0]), [6, 4])

    def test_context_manager_and_version(self):
        with Client(_server.target) as client:
            self.assertIs(client.__enter__(), client)
            self.assertEqual(client.health(), "SERVING")
        self.assertEqual(tensorcompute.__version__, "0.1.0")

    def test_per_call_timeout(self):
        with Client(dead_target(), timeout=60) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError):
                client.gather([1], [0], timeout=0.5)
            self.assertLess(time.monotonic() - started, 5)


class RetryTest(unittest.TestCase):
    def test_retries_back_off_then_give_up(self):
        target = dead_target()
        with Client(target, timeout=2, retries=0) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError) as raised:
                client.gather([1], [0])
            no_retry_s = time.monotonic() - started
            self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        with Client(target, timeout=10, retries=3) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError) as raised:
                client.gather([1], [0])
            elapsed = time.monotonic() - started
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        # three sleeps of at least 0.05 + 0.1 + 0.2 s; at most 0.1 + 0.2 + 0.4 s plus the calls
        self.assertGreaterEqual(elapsed, 0.35)
        self.assertLess(elapsed, 0.7 + 3 * no_retry_s + 2)

    def test_retries_stay_within_the_timeout(self):
        with Client(dead_target(), timeout=1.0, retries=100) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError) as raised:
                client.gather([1], [0])
            elapsed = time.monotonic() - started
        self.assertIn(raised.exception.code,
                      (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))
        self.assertLess(elapsed, 2.0)

    def test_retries_reach_a_server_that_starts_late(self):
        target = dead_target()
        port = target.rsplit(":", 1)[1]
        result = {}

        def call():
            with Client(target, timeout=20, retries=20) as client:
                try:
                    result["out"] = client.gather([1, 2, 3], [2])
                except TensorComputeError as e:
                    result["error"] = e

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)  # the first attempts are refused
        with ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{port}"):
            caller.join(timeout=20)
        self.assertFalse(caller.is_alive())
        self.assertNotIn("error", result)
        np.testing.assert_array_equal(result["out"], [3])


class EmbeddingBagTest(unittest.TestCase):
    def assertMatchesReference(self, out, params, indices, **kwargs):
        self.assertIsInstance(out, np.ndarray)
        self.assertTrue(out.flags.writeable)
        problem = mismatch(out, *ref_embedding_bag(params, indices, **kwargs))
        if problem:
            self.fail(problem)

    def test_random_calls_match_the_numpy_loop(self):
        # Every params dtype, mode, weights or not (never with max), offsets (with and without
        # include_last_offset) or fixed bags; padding_idx, empty bags, negative indices, int32
        # and int64 indices and offsets at random.
        rng = np.random.default_rng(2323)
        for dtype in EB_FLOAT_DTYPES:
            for mode in EB_MODES:
                for weighted in ((False,) if mode == "max" else (False, True)):
                    for fixed_bags in (False, True):
                        for case in range(3):
                            params, indices, kwargs = random_bag_case(rng, dtype, mode,
                                                                      weighted, fixed_bags)
                            with self.subTest(dtype=np.dtype(dtype).name, mode=mode,
                                              weighted=weighted, fixed_bags=fixed_bags,
                                              case=case):
                                out = _client.embedding_bag(params, indices, **kwargs)
                                self.assertMatchesReference(out, params, indices, **kwargs)

    def test_a_small_example_by_hand(self):
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        bags = {"indices": [0, 2, 3], "offsets": [0, 2]}  # bags {0, 2} and {3}
        np.testing.assert_array_equal(_client.embedding_bag(params, **bags),
                                      [[6, 8, 10], [9, 10, 11]])
        np.testing.assert_array_equal(_client.embedding_bag(params, **bags, mode="MEAN"),
                                      [[3, 4, 5], [9, 10, 11]])
        np.testing.assert_array_equal(_client.embedding_bag(params, **bags, mode="max"),
                                      [[6, 7, 8], [9, 10, 11]])
        np.testing.assert_allclose(_client.embedding_bag(params, **bags, mode="sqrtn"),
                                   [[6 / 2 ** .5, 8 / 2 ** .5, 10 / 2 ** .5], [9, 10, 11]],
                                   rtol=1e-6)
        # Python lists of weights go as float32; include_last_offset; padding_idx skips row 2
        # (and MEAN does not count it); a fixed-bag form of the same bags with one more index.
        np.testing.assert_array_equal(
            _client.embedding_bag(params, [0, 2, 3], [0, 2, 3], per_sample_weights=[2, 1, .5],
                                  include_last_offset=True),
            [[6, 9, 12], [4.5, 5, 5.5]])
        np.testing.assert_array_equal(
            _client.embedding_bag(params, [[0, 2], [3, -2]], mode="mean", padding_idx=-2),
            [[0, 1, 2], [9, 10, 11]])
        self.assertEqual(_client.embedding_bag(params, np.zeros((0, 2), np.int64)).shape, (0, 3))

    def test_nan_results_are_the_positive_quiet_nan(self):
        # inf + -inf is -NaN on x86; the server writes +NaN, bit for bit the reference's. MAX
        # keeps a NaN only as a bag's first row.
        for dtype in EB_FLOAT_DTYPES:
            params = np.array([[np.inf, 1], [-np.inf, 2], [np.nan, 3]]).astype(dtype)
            for mode, indices in (("sum", [[0, 1], [1, 2]]), ("max", [[2, 0], [0, 2]])):
                with self.subTest(dtype=np.dtype(dtype).name, mode=mode):
                    indices = np.array(indices)
                    out = _client.embedding_bag(params, indices, mode=mode)
                    self.assertTrue(np.isnan(out.astype(np.float64)[:, 0]).any())
                    self.assertMatchesReference(out, params, indices, mode=mode)

    def test_by_name_equals_inline(self):
        rng = np.random.default_rng(2324)
        table = rng.standard_normal((50, 8)).astype(np.float32)
        _client.put_tensor("eb_table", table, replace=True)
        try:
            for mode, weighted in (("sum", False), ("mean", True), ("max", False),
                                   ("sqrtn", True)):
                _, indices, kwargs = random_bag_case(rng, np.float32, mode, weighted, False)
                indices = random_indices(rng, 50, indices.shape, indices.dtype)
                with self.subTest(mode=mode, weighted=weighted):
                    by_name = _client.embedding_bag(None, indices, params_name="eb_table",
                                                    **kwargs)
                    self.assertEqual(by_name.tobytes(),
                                     _client.embedding_bag(table, indices, **kwargs).tobytes())
                    self.assertMatchesReference(by_name, table, indices, **kwargs)
        finally:
            _client.delete_tensor("eb_table")
        with self.assertRaises(TensorComputeError) as e:
            _client.embedding_bag(None, [[0]], params_name="eb_table")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("eb_table", e.exception.message)

    def test_server_errors_raise_with_their_codes(self):
        params = np.arange(8, dtype=np.float32).reshape(4, 2)
        cases = [
            (dict(indices=[0, 9, 1], offsets=[0, 1]), "indices[1] = 9 is not in [-4, 4)"),
            (dict(indices=[0, 1, 2], offsets=[0, 2, 1]),
             "offsets[2] = 1 is less than offsets[1] = 2"),
            (dict(indices=[0, 1], offsets=[1]), "offsets[0] = 1 must be 0"),
            (dict(indices=[0, 1], offsets=[0, 1], include_last_offset=True),
             "must equal the number of indices, 2"),
            (dict(indices=[[0, 1]], per_sample_weights=[[1, 1]], mode="max"),
             "not supported with mode MAX"),
            (dict(indices=[[0, 1]], per_sample_weights=np.ones((1, 2))),
             "per_sample_weights must be float32 (the params' dtype), got float64"),
            (dict(indices=[[0, 1]], per_sample_weights=[1, 1]),
             "per_sample_weights must have the shape of indices [1,2]"),
            (dict(indices=[0, 1]), "offsets"),  # rank 1 without offsets
            (dict(indices=[[0]], padding_idx=4), "padding_idx = 4 is not in [-4, 4)"),
            (dict(indices=[[0.0]]), "indices must be int32 or int64, got float64"),
        ]
        for kwargs, words in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(TensorComputeError) as e:
                    _client.embedding_bag(params, **kwargs)
                self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(words, e.exception.message)
                self.assertEqual(str(e.exception), f"INVALID_ARGUMENT: {e.exception.message}")
        with self.assertRaises(TensorComputeError) as e:
            _client.embedding_bag(np.arange(8).reshape(4, 2), [[0]])
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("params must be float16, bfloat16, float32 or float64, got int64",
                      e.exception.message)

    def test_client_side_errors_before_any_rpc(self):
        with Client(dead_target(), timeout=5) as client:  # an RPC would fail otherwise
            for mode in ("median", "", None, 0):
                with self.subTest(mode=mode), self.assertRaises(ValueError):
                    client.embedding_bag(np.zeros((2, 2), np.float32), [[0]], mode=mode)
            with self.assertRaises(ValueError):
                client.embedding_bag(np.zeros((2, 2), np.float32), [[0]], params_name="t")
            with self.assertRaises(ValueError):
                client.embedding_bag(None, [[0]])
            with self.assertRaises(TypeError):
                client.embedding_bag(np.zeros((2, 2), np.float32), [[0]], padding_idx=1.5)


class ExampleTest(unittest.TestCase):
    def test_example_script(self):
        run = subprocess.run([sys.executable, EXAMPLE, "--target", _server.target],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("gather(params, [3, -1, 0], axis=0) =\n[[ 9. 10. 11.]\n [ 9. 10. 11.]\n"
                      " [ 0.  1.  2.]]", run.stdout)
        self.assertIn("gather_nd(params, [[0, 1], [2, 2], [-1, 0]]) = [1. 8. 9.]", run.stdout)

    def test_example_script_unreachable(self):
        run = subprocess.run([sys.executable, EXAMPLE, "--target", dead_target(),
                              "--timeout", "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 1)
        self.assertRegex(run.stderr, r"^error: (UNAVAILABLE|DEADLINE_EXCEEDED): ")


class ResidentTensorTest(unittest.TestCase):
    """put_tensor / list_tensors / delete_tensor / params_name, on two servers of their own
    with a 1 MiB message limit (so uploads must be chunked)."""

    @classmethod
    def setUpClass(cls):
        cls.a = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576")
        cls.a.__enter__()
        cls.b = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576")
        cls.b.__enter__()
        cls.client = Client(cls.a.target, timeout=60.0)
        cls.both = Client(f"ipv4:{cls.a.target},{cls.b.target}", timeout=60.0)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.both.close()
        cls.a.__exit__(None, None, None)
        cls.b.__exit__(None, None, None)

    def tearDown(self):
        for server in (self.a, self.b):
            with Client(server.target) as c:
                for t in c.list_tensors():
                    c.delete_tensor(t.name)

    def assertSameArray(self, got, want):
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.shape, want.shape)
        if want.dtype == object:
            self.assertEqual(got.tolist(), want.tolist())
        else:
            self.assertEqual(got.tobytes(), want.tobytes())

    def test_a_memmap_is_uploaded_without_a_copy_of_it_whole(self):
        """put_tensor reads a np.memmap chunk by chunk as it sends: the Python heap (numpy's
        buffers included, which tracemalloc sees) never holds more than a few chunks of a
        64 MiB table; what the server stores is the file's content, big-endian converted."""
        rows, dim = 1 << 16, 256  # 64 MiB of float32
        with tempfile.TemporaryDirectory() as tmp:
            for dtype in (np.dtype("<f4"), np.dtype(">f4")):
                path = os.path.join(tmp, f"table{dtype.byteorder}.npy")
                table = np.lib.format.open_memmap(path, mode="w+", dtype=dtype,
                                                  shape=(rows, dim))
                table[:] = np.arange(rows, dtype=np.float32)[:, None] + \
                    np.arange(dim, dtype=np.float32)[None, :] / 1024
                table.flush()
                del table
                mapped = np.load(path, mmap_mode="r")
                self.assertIsInstance(mapped, np.memmap)
                tracemalloc.start()
                try:
                    info = self.client.put_tensor("mapped", mapped, replace=True,
                                                  chunk_bytes=1 << 19)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                self.assertEqual((info.dtype, info.shape), ("float32", (rows, dim)))
                self.assertLess(peak, 8 << 20, f"{dtype}: traced peak {peak} bytes")
                sample = np.array([0, 1, rows // 2, rows - 1])
                got = self.client.gather(None, sample, params_name="mapped")
                self.assertEqual(got.tobytes(), mapped[sample].astype("<f4").tobytes())
                del mapped

    def test_put_list_gather_by_name_delete(self):
        rng = np.random.default_rng(11)
        table = rng.standard_normal((40, 5)).astype(np.float32)
        info = self.client.put_tensor("emb", table)
        self.assertIsInstance(info, tensorcompute.TensorInfo)
        self.assertEqual((info.name, info.dtype, info.shape, info.bytes, info.device,
                          info.version), ("emb", "float32", (40, 5), 800, "cpu", 1))
        self.assertLess(abs(info.created.timestamp() - time.time()), 60)
        self.assertEqual([t.name for t in self.client.list_tensors()], ["emb"])
        indices = np.array([[39, 0], [-1, 4]])
        self.assertSameArray(self.client.gather(None, indices, params_name="emb"),
                             self.client.gather(table, indices))
        self.assertSameArray(self.client.gather(None, indices, params_name="emb"),
                             np.take(table, indices, axis=0))
        self.assertSameArray(self.client.gather_nd(None, indices, params_name="emb"),
                             ref_gather_nd(table, indices))
        deleted = self.client.delete_tensor("emb")
        self.assertEqual(deleted.name, "emb")
        self.assertEqual(self.client.list_tensors(), [])
        for call in (lambda: self.client.gather(None, [0], params_name="emb"),
                     lambda: self.client.delete_tensor("emb")):
            with self.assertRaises(TensorComputeError) as e:
                call()
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_params_xor_params_name(self):
        with self.assertRaises(ValueError):
            self.client.gather([1, 2], [0], params_name="x")
        with self.assertRaises(ValueError):
            self.client.gather_nd(None, [[0]])
        with self.assertRaises(ValueError):
            self.client.put_tensor("x", [1], chunk_bytes=0)

    def test_large_and_string_tables_in_many_chunks(self):
        rng = np.random.default_rng(12)
        big = rng.standard_normal((1024, 384))  # 3 MiB float64, 3x the message limit
        self.client.put_tensor("big", big, chunk_bytes=100_000)
        ids = rng.integers(-1024, 1024, size=50)
        self.assertSameArray(self.client.gather(None, ids, params_name="big"),
                             np.take(big, ids, axis=0))
        words = np.array([b"", "\u00e9t\u00e9".encode(), b"x" * 5000, b"\x00\xff", b"b", b""] * 50,
                         dtype=object).reshape(100, 3)
        self.client.put_tensor("words", words, chunk_bytes=1000)
        ids = rng.integers(0, 100, size=20)
        self.assertSameArray(self.client.gather(None, ids, params_name="words"),
                             np.take(words, ids, axis=0))
        empty = np.zeros((0, 3), dtype=np.int16)
        self.assertEqual(self.client.put_tensor("empty", empty).shape, (0, 3))
        bf16 = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 2)
        self.assertEqual(self.client.put_tensor("bf16", bf16, chunk_bytes=3).dtype, "bfloat16")
        self.assertSameArray(self.client.gather(None, [2, 0], params_name="bf16"), bf16[[2, 0]])
        # 1 MiB chunks plus framing pass the server's 1 MiB limit.
        with self.assertRaises(TensorComputeError) as e:
            self.client.put_tensor("too_big_chunks", big)
        self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(sorted(t.name for t in self.client.list_tensors()),
                         ["bf16", "big", "empty", "words"])

    def test_already_exists_and_replace(self):
        self.client.put_tensor("t", np.arange(3, dtype=np.int32))
        with self.assertRaises(TensorComputeError) as e:
            self.client.put_tensor("t", np.arange(4, dtype=np.int32))
        self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        info = self.client.put_tensor("t", np.array([7, 8], dtype=np.int64), replace=True)
        self.assertEqual((info.version, info.dtype, info.shape), (2, "int64", (2,)))
        self.assertSameArray(self.client.gather(None, [1], params_name="t"),
                             np.array([8], dtype=np.int64))

    def test_all_targets(self):
        table = np.arange(8, dtype=np.int64).reshape(4, 2)
        self.both.put_tensor("shared", table, all_targets=True)
        for server in (self.a, self.b):
            with Client(server.target) as c:
                self.assertEqual([t.name for t in c.list_tensors()], ["shared"])
        for _ in range(4):  # round-robin over both replicas: each answers
            self.assertSameArray(self.both.gather(None, [3, 0], params_name="shared"),
                                 table[[3, 0]])
        with Client(self.a.target) as c:
            c.delete_tensor("shared")
        with self.assertRaises(TensorComputeError) as e:
            self.both.put_tensor("shared", table, all_targets=True)
        self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        self.assertIn(f"put shared: failed on 1 of 2 targets: ipv4:{self.b.target}: "
                      "ALREADY_EXISTS", e.exception.message)
        self.assertIn(f"succeeded on: ipv4:{self.a.target}", e.exception.message)
        self.both.delete_tensor("shared", all_targets=True)
        for server in (self.a, self.b):
            with Client(server.target) as c:
                self.assertEqual(c.list_tensors(), [])


    def test_admin_token(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            reader_file, admin_file = os.path.join(tmp, "reader"), os.path.join(tmp, "admin")
            with open(reader_file, "w") as f:
                f.write("reader\n")
            with open(admin_file, "w") as f:
                f.write("admin\n")
            with ServerProcess("--cpu_threads=2", f"--auth_token_file={reader_file}",
                               f"--admin_token_file={admin_file}") as server, \
                    Client(server.target, auth_token="reader") as reader, \
                    Client(server.target, auth_token="reader", admin_token="admin") as admin:
                with self.assertRaises(TensorComputeError) as e:
                    reader.put_tensor("t", [1, 2])
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
                admin.put_tensor("t", [1, 2])
                self.assertEqual([t.name for t in reader.list_tensors()], ["t"])
                self.assertEqual(reader.gather(None, [1], params_name="t").tolist(), [2])
                with self.assertRaises(TensorComputeError) as e:
                    reader.delete_tensor("t")
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
                admin.delete_tensor("t")
        with self.assertRaises(ValueError):
            Client(self.a.target, admin_token="two\nlines")


if __name__ == "__main__":
    unittest.main()
