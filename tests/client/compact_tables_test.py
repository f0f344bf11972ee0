"""Compact resident tables (issue 24) end to end: the Python client against the real
tensorcompute-server, checked against the NumPy references of the formulas
(tests/testing/compact_reference.py) byte for byte.

- INT8_ROWWISE quantizes as FBGEMM's reference formula does, on random tables with constant
  rows, zeros of both signs, float32's extremes and dims 1 to 1024: every row gathered is the
  NumPy dequantization of the NumPy quantization, and a prequantized upload of the NumPy bytes
  gathers to the same rows.
- FLOAT16 rounds to nearest even (ties included) and refuses what would overflow.
- Gather and every embedding_bag form on every kind equal the reference on the float32 table
  the stored values mean, and the server's own answer on that table sent inline.

Needs $TC_SERVER_BINARY and the `tensorcompute` package (ctest's python_client.install).
"""

import unittest

import grpc
import numpy as np

from tensorcompute import STORAGE_KINDS, Client, TensorComputeError
from compact_reference import dequantize_rowwise8, float16_meaning, quantize_rowwise8, \
    random_compact_table
from embedding_bag_reference import EB_MODES, mismatch, random_bag_case, ref_embedding_bag
from server_process import ServerProcess

_server = None
_client = None


def setUpModule():
    global _server, _client
    _server = ServerProcess("--cpu_threads=2")
    _server.__enter__()
    _client = Client(_server.target, timeout=60.0)


def tearDownModule():
    if _client is not None:
        _client.close()
    if _server is not None:
        _server.__exit__(None, None, None)


class CompactTablesTest(unittest.TestCase):
    def tearDown(self):
        for info in _client.list_tensors():
            _client.delete_tensor(info.name)

    def assertSameBytes(self, got, want, what):
        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape), what)
        problem = mismatch(got, want, None)
        if problem:
            self.fail(f"{what}: {problem}")

    def test_int8_rowwise_is_fbgemms_formula_byte_for_byte(self):
        rng = np.random.default_rng(2420)
        for dim in (1, 2, 3, 8, 17, 64, 255, 256, 1000, 1024):
            table = random_compact_table(rng, 24, dim)
            fused = quantize_rowwise8(table)
            want = dequantize_rowwise8(fused)
            info = _client.put_tensor("q8", table, storage="int8-rowwise", replace=True,
                                      chunk_bytes=1000)
            self.assertEqual((info.storage, info.dtype, info.shape, info.bytes),
                             ("int8-rowwise", "float32", (24, dim), 24 * (dim + 8)))
            every_row = np.arange(24)
            self.assertSameBytes(_client.gather(None, every_row, params_name="q8"), want,
                                 f"int8-rowwise dim {dim}")
            info = _client.put_tensor("pre", fused, storage="int8-rowwise-prequantized",
                                      replace=True)
            self.assertEqual((info.storage, info.dtype, info.shape),
                             ("int8-rowwise-prequantized", "float32", (24, dim)))
            self.assertSameBytes(_client.gather(None, every_row, params_name="pre"), want,
                                 f"prequantized dim {dim}")

    def test_float16_rounds_to_nearest_even_and_refuses_overflow(self):
        ties = np.array([[1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, -65519.99, -0.0, np.inf,
                          2 ** -25, 3 * 2 ** -25]], np.float32)
        info = _client.put_tensor("f16", ties, storage="float16")
        self.assertEqual((info.storage, info.bytes), ("float16", ties.size * 2))
        got = _client.gather(None, [0], params_name="f16")
        self.assertSameBytes(got, float16_meaning(ties), "float16 ties")
        self.assertEqual(got[0, :2].tolist(), [1.0, 1 + 2 ** -9])
        rng = np.random.default_rng(2421)
        table = (rng.standard_normal((100, 33)) * 1000).astype(np.float32)
        _client.put_tensor("f16", table, storage="FLOAT16", replace=True, chunk_bytes=999)
        self.assertSameBytes(_client.gather(None, np.arange(100), params_name="f16"),
                             float16_meaning(table), "float16 table")
        table[7, 5] = 70000
        with self.assertRaises(TensorComputeError) as raised:
            _client.put_tensor("f16_big", table, storage="float16")
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("element [7, 5] = 70000 is beyond float16's range", str(raised.exception))
        self.assertNotIn("f16_big", [t.name for t in _client.list_tensors()])

    def test_every_lookup_on_every_kind_equals_the_reference(self):
        rng = np.random.default_rng(2422)
        table = (rng.standard_normal((60, 16)) * 5).astype(np.float32)
        fused = quantize_rowwise8(table)
        kinds = {"float16": (table, float16_meaning(table)),
                 "int8-rowwise": (table, dequantize_rowwise8(fused)),
                 "int8-rowwise-prequantized": (fused, dequantize_rowwise8(fused))}
        for storage, (sent, meaning) in kinds.items():
            _client.put_tensor("t", sent, storage=storage, replace=True)
            indices = rng.integers(-60, 60, (3, 4))
            self.assertSameBytes(_client.gather(None, indices, params_name="t"),
                                 np.take(meaning, indices, axis=0), f"{storage} gather")
            for mode in EB_MODES:
                for weighted in ((False,) if mode == "max" else (False, True)):
                    for fixed in (False, True):
                        _, idx, kwargs = random_bag_case(rng, np.float32, mode, weighted, fixed,
                                                         table=meaning)
                        what = f"{storage} {mode} weighted={weighted} fixed={fixed}"
                        out = _client.embedding_bag(None, idx, params_name="t", **kwargs)
                        problem = mismatch(out, *ref_embedding_bag(meaning, idx, **kwargs))
                        if problem:
                            self.fail(f"{what}: {problem}")
                        self.assertSameBytes(out, _client.embedding_bag(meaning, idx, **kwargs),
                                             f"{what} vs inline")
            with self.assertRaises(TensorComputeError) as raised:
                _client.gather_nd(None, [[1, 2]], params_name="t")
            self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("GatherNd is not served on compact tables", str(raised.exception))

    def test_kinds_and_their_refusals(self):
        self.assertEqual(list(STORAGE_KINDS),
                         ["as-is", "float16", "int8-rowwise", "int8-rowwise-prequantized"])
        with self.assertRaisesRegex(ValueError, "storage must be one of"):
            _client.put_tensor("x", np.zeros((2, 2), np.float32), storage="int4")
        for storage, array, words in (
                ("float16", np.zeros((2, 2), np.int32), "takes a float32 table"),
                ("int8-rowwise", np.array([[1, np.nan]], np.float32), "is not finite"),
                ("int8-rowwise", np.array([[-3e38, 3e38]], np.float32), "overflows float32"),
                ("int8-rowwise-prequantized", np.zeros((2, 8), np.uint8), "dim >= 1 codes")):
            with self.subTest(storage=storage, words=words):
                with self.assertRaises(TensorComputeError) as raised:
                    _client.put_tensor("x", array, storage=storage)
                self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(words, str(raised.exception))
        self.assertEqual(_client.list_tensors(), [])


if __name__ == "__main__":
    unittest.main()
