"""Keyed tables (issue 42) end to end: the Python clients (sync and asyncio) against the real
tensorcompute-server, on random tables with random int64 keys (negative ones, 0, INT64_MIN and
INT64_MAX among them), checked against a NumPy dictionary reference.

The reference (tests/testing/keyed_reference.py): a keyed table put with rows R and keys K
(capacity C >= len(R)) answers a lookup by keys as the same lookup by indices on the "extended"
table R + [zeros] + [default row] would, each key replaced by its row (key -> position in K), a
missing one by the zero row (missing="zero", and "skip" in bags as padding_idx) or the default
row ("default"). So every keyed answer is compared
  - with NumPy on that extended table (exactly for Gather and unweighted SUM/MAX; within
    embedding_bag_reference's bound otherwise), and
  - byte for byte with the server's own by-index answer on the extended table put under
    another name with the same storage (float16 and int8-rowwise included: the answer of a
    keyed lookup is the by-index answer of the keys' slots).

Needs $TC_SERVER_BINARY and the `tensorcompute` package (ctest's python_client.install).
Run by hand:

    .venv/bin/pip install --no-deps --no-build-isolation ./client/python
    cd tests/client && PYTHONPATH=../testing \\
        TC_SERVER_BINARY=../../build/server/tensorcompute-server \\
        ../../.venv/bin/python3 -m unittest -v keyed_tables_test
"""

import asyncio
import os
import subprocess
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

import tensorcompute.aio
from tensorcompute import Client, KeyedInfo, TensorComputeError
from tensorcompute import _common
from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc as pb_grpc
from compact_reference import dequantize_rowwise8, float16_meaning, quantize_rowwise8
from embedding_bag_reference import EB_MODES, mismatch, ref_embedding_bag
from keyed_reference import (INT64_MAX, INT64_MIN, SPECIAL_KEYS, KeyedReference as Reference,
                             random_keys)
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


# --- the reference ---------------------------------------------------------------------------

def absent_keys(rng, keys, n):
    """n keys that are not in `keys` (the extremes and 0 first, when absent)."""
    present = set(keys.tolist())
    out = [k for k in SPECIAL_KEYS if k not in present]
    while len(out) < n:
        k = int(rng.integers(INT64_MIN, INT64_MAX, dtype=np.int64, endpoint=True))
        if k not in present and k not in out:
            out.append(k)
    return np.array(rng.permutation(out)[:n], np.int64)


def lookup_keys(rng, keys, shape, missing_fraction):
    """Random lookup keys of `shape`: present ones (repeats allowed) and, with probability
    missing_fraction each, absent ones."""
    n = int(np.prod(shape, dtype=np.int64))
    out = keys[rng.integers(0, len(keys), size=n)] if len(keys) else np.zeros(n, np.int64)
    absent = absent_keys(rng, keys, max(1, n))
    mask = rng.random(n) < missing_fraction
    out = np.where(mask, absent[rng.integers(0, len(absent), size=n)], out)
    return out.astype(np.int64).reshape(shape)


def random_bags(rng, keys, missing_fraction, fixed):
    """(lookup keys, embedding_bag keyword arguments for the bag layout)."""
    bags = int(rng.integers(0, 9))
    if fixed:
        return lookup_keys(rng, keys, (bags, int(rng.integers(0, 5))), missing_fraction), {}
    sizes = rng.integers(0, 6, size=bags)
    looked = lookup_keys(rng, keys, (int(sizes.sum()),), missing_fraction)
    ends = np.cumsum(np.concatenate([[0], sizes])).astype(np.int64)
    last = bool(rng.integers(2))
    return looked, {"offsets": ends if last else ends[:-1], "include_last_offset": last}


class KeyedTest(unittest.TestCase):

    def tearDown(self):
        for info in _client.list_tensors():
            _client.delete_tensor(info.name)

    def assertSameBytes(self, got, want, what):
        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape), what)
        problem = mismatch(got, want, None)
        if problem:
            self.fail(f"{what}: {problem}")

    def assertRaisesMessage(self, code, message, fn, *args, **kwargs):
        with self.assertRaises(TensorComputeError) as caught:
            fn(*args, **kwargs)
        self.assertEqual((caught.exception.code, caught.exception.message), (code, message))

    def put_pair(self, name, rows, keys, storage="as-is", missing=None, default_row=None,
                 capacity=None, logical=None, chunk_bytes=_common.DEFAULT_CHUNK_BYTES):
        """Puts `rows` keyed as `name` and its extended table by indices as name + ".ref";
        returns the Reference (over `logical`, the float32 values a compact kind stores)."""
        _client.put_tensor(name, rows, keys=keys, storage=storage, missing=missing,
                           default_row=default_row, capacity=capacity, chunk_bytes=chunk_bytes)
        reference = Reference(rows, keys, default_row)
        _client.put_tensor(name + ".ref", reference.extended, storage=storage)
        if logical is not None:
            logical_default = None if default_row is None else logical(
                np.asarray(default_row, rows.dtype)[None])[0]
            reference = Reference(logical(rows), keys, logical_default)
        return reference

    # --- Gather ------------------------------------------------------------------------------

    def test_gather_by_keys_is_the_gather_of_their_rows(self):
        rng = np.random.default_rng(4201)
        for dtype in (np.float32, np.int32, np.float64, np.int8):
            for trial in range(3):
                n = int(rng.integers(5, 60))
                row_shape = [(4,), (3, 2), ()][trial]
                rows = (rng.standard_normal((n,) + row_shape) * 50).astype(dtype)
                keys = random_keys(rng, n)
                default_row = (rng.standard_normal(row_shape) * 50).astype(dtype)
                reference = self.put_pair("t", rows, keys, missing="zero",
                                          default_row=default_row,
                                          capacity=n + int(rng.integers(0, 5)),
                                          chunk_bytes=int(rng.integers(8, 200)))
                for shape in [(), (int(rng.integers(0, 20)),), (3, int(rng.integers(1, 6)))]:
                    for missing in (None, "zero", "default", "error"):
                        fraction = 0.0 if missing == "error" else 0.3
                        looked = lookup_keys(rng, keys, shape, fraction)
                        policy = "zero" if missing is None else missing
                        slots, found = reference.slots(looked, policy)
                        what = f"{np.dtype(dtype)} {row_shape} keys {shape} missing={missing}"
                        out, got_found = _client.gather(None, keys=looked, params_name="t",
                                                        missing=missing, return_found=True)
                        self.assertSameBytes(out, reference.extended[slots], what)
                        self.assertEqual(got_found.dtype, np.bool_)
                        np.testing.assert_array_equal(got_found, found, what)
                        by_index = _client.gather(None, slots, params_name="t.ref")
                        self.assertSameBytes(out, by_index, what + " vs by index")
                        plain = _client.gather(None, keys=looked, params_name="t",
                                               missing=missing)
                        self.assertSameBytes(plain, out, what + " without found")
                _client.delete_tensor("t")
                _client.delete_tensor("t.ref")

    def test_keys_may_be_any_signed_integers_and_lists(self):
        rng = np.random.default_rng(4202)
        rows = rng.standard_normal((6, 3)).astype(np.float32)
        keys = np.array([-5, 7, 0, INT64_MAX, INT64_MIN, 123456789012], np.int64)
        _client.put_tensor("t", rows, keys=keys.tolist())
        np.testing.assert_array_equal(
            _client.gather(None, keys=np.array([7, -5], np.int32), params_name="t"), rows[[1, 0]])
        np.testing.assert_array_equal(
            _client.gather(None, keys=[INT64_MIN, INT64_MAX], params_name="t"), rows[[4, 3]])
        np.testing.assert_array_equal(_client.gather(None, keys=0, params_name="t"), rows[2])
        out, found = _client.gather(None, keys=[], params_name="t", return_found=True)
        self.assertEqual((out.shape, found.shape, found.dtype), ((0, 3), (0,), np.bool_))

    # --- EmbeddingBag ------------------------------------------------------------------------

    def test_embedding_bag_by_keys_is_the_bag_of_their_rows(self):
        rng = np.random.default_rng(4203)
        n, dim = 40, 7
        rows = (rng.standard_normal((n, dim)) * 3).astype(np.float32)
        keys = random_keys(rng, n)
        default_row = rng.standard_normal(dim).astype(np.float32)
        reference = self.put_pair("t", rows, keys, default_row=default_row)
        for mode in EB_MODES:
            for missing in ("error", "zero", "default", "skip"):
                for fixed in (False, True):
                    for weighted in (False, True):
                        if weighted and mode == "max":
                            continue
                        fraction = 0.0 if missing == "error" else 0.35
                        looked, layout = random_bags(rng, keys, fraction, fixed)
                        kwargs = dict(layout, mode=mode)
                        if weighted:
                            kwargs["per_sample_weights"] = rng.uniform(
                                0.5, 1.5, looked.shape).astype(np.float32)
                        slots, found = reference.slots(looked, missing)
                        pad = {"padding_idx": n} if missing == "skip" else {}
                        what = f"{mode} missing={missing} fixed={fixed} weighted={weighted}"
                        out, got_found = _client.embedding_bag(
                            None, keys=looked, params_name="t", missing=missing,
                            return_found=True, **kwargs)
                        np.testing.assert_array_equal(got_found, found, what)
                        want, bound = ref_embedding_bag(reference.extended, slots, **kwargs,
                                                        **pad)
                        problem = mismatch(out, want, bound)
                        if problem:
                            self.fail(f"{what}: {problem}")
                        by_index = _client.embedding_bag(None, slots, params_name="t.ref",
                                                         **kwargs, **pad)
                        self.assertSameBytes(out, by_index, what + " vs by index")

    def test_skip_divides_by_the_keys_found_and_an_all_missing_bag_is_zeros(self):
        rng = np.random.default_rng(4204)
        rows = rng.uniform(1, 2, (8, 4)).astype(np.float32)
        keys = random_keys(rng, 8)
        _client.put_tensor("t", rows, keys=keys, default_row=np.full(4, 100, np.float32))
        gone = absent_keys(rng, keys, 3)
        looked = np.array([keys[1], gone[0], keys[2], gone[1], gone[2]], np.int64)
        offsets = [0, 3, 4]  # bags: {1, missing, 2}, {missing}, {missing, missing}
        for mode, want in [("mean", (rows[1] + rows[2]) / 2),
                           ("sqrtn", (rows[1] + rows[2]) / np.float32(np.sqrt(2))),
                           ("sum", rows[1] + rows[2]), ("max", np.maximum(rows[1], rows[2]))]:
            out, found = _client.embedding_bag(None, keys=looked, offsets=offsets, mode=mode,
                                               params_name="t", missing="skip",
                                               return_found=True)
            np.testing.assert_allclose(out[0], want, rtol=1e-6, err_msg=mode)
            np.testing.assert_array_equal(out[1:], np.zeros((2, 4), np.float32), mode)
            np.testing.assert_array_equal(found, [True, False, True, False, False])
        # The same bags with missing="default" count the default row.
        out = _client.embedding_bag(None, keys=looked, offsets=offsets, mode="mean",
                                    params_name="t", missing="default")
        np.testing.assert_allclose(out[0], (rows[1] + rows[2] + 100) / 3, rtol=1e-6)
        np.testing.assert_array_equal(out[2], np.full(4, 100, np.float32))

    # --- compact storages --------------------------------------------------------------------

    def test_compact_storages_answer_the_by_index_bytes_of_the_keys_slots(self):
        rng = np.random.default_rng(4205)
        # (storage, what is sent for float32 rows, the float32 rows that it means)
        kinds = [("float16", lambda t: t, float16_meaning),
                 ("int8-rowwise", lambda t: t,
                  lambda t: dequantize_rowwise8(quantize_rowwise8(t))),
                 ("int8-rowwise-prequantized", quantize_rowwise8, dequantize_rowwise8)]
        for storage, sent, logical in kinds:
            for dim in (1, 5, 32):
                n = int(rng.integers(5, 50))
                rows = sent((rng.standard_normal((n, dim)) * 4).astype(np.float32))
                keys = random_keys(rng, n)
                default_row = sent((rng.standard_normal((1, dim)) * 4).astype(np.float32))[0]
                if storage != "int8-rowwise-prequantized":
                    default_row = default_row.tolist()  # a list is sent as float32
                reference = self.put_pair("c", rows, keys, storage=storage,
                                          default_row=default_row, logical=logical,
                                          chunk_bytes=int(rng.integers(16, 300)))
                info = {t.name: t for t in _client.list_tensors()}["c"]
                self.assertEqual((info.storage, info.dtype, info.shape),
                                 (storage, "float32", (n, dim)))
                for missing in ("zero", "default"):
                    what = f"{storage} dim {dim} missing={missing}"
                    looked = lookup_keys(rng, keys, (4, 6), 0.3)
                    slots, found = reference.slots(looked, missing)
                    out, got_found = _client.gather(None, keys=looked, params_name="c",
                                                    missing=missing, return_found=True)
                    np.testing.assert_array_equal(got_found, found, what)
                    self.assertSameBytes(out, _client.gather(None, slots, params_name="c.ref"),
                                         what)
                    self.assertSameBytes(out, reference.extended[slots], what + " vs NumPy")
                    for mode in EB_MODES:
                        for skip in (False, True):
                            policy = "skip" if skip else missing
                            slots, _ = reference.slots(looked, policy)
                            pad = {"padding_idx": n} if skip else {}
                            out = _client.embedding_bag(None, keys=looked, mode=mode,
                                                        params_name="c", missing=policy)
                            by_index = _client.embedding_bag(None, slots, mode=mode,
                                                             params_name="c.ref", **pad)
                            self.assertSameBytes(out, by_index, f"{what} {mode} {policy}")
                _client.delete_tensor("c")
                _client.delete_tensor("c.ref")

    # --- policies ----------------------------------------------------------------------------

    def test_a_missing_key_is_an_error_naming_its_position_value_and_table(self):
        rng = np.random.default_rng(4206)
        rows = rng.standard_normal((20, 3)).astype(np.float32)
        keys = random_keys(rng, 20)
        _client.put_tensor("users", rows, keys=keys)
        for shape in [(12,), (3, 5), ()]:
            looked = lookup_keys(rng, keys, shape, 0.0)
            flat = looked.reshape(-1)
            at = int(rng.integers(0, flat.size))
            flat[at] = absent_keys(rng, keys, 1)[0]
            if flat.size > at + 1:  # a later missing key is not the one named
                flat[at + 1:] = np.where(rng.random(flat.size - at - 1) < 0.5,
                                         absent_keys(rng, keys, 1)[0], flat[at + 1:])
            position = "[" + ",".join(str(i) for i in np.unravel_index(at, shape)) + "]" \
                if shape else ""
            message = f"keys{position} = {flat[at]} is not a key of table 'users'"
            self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT, message, _client.gather,
                                     None, keys=looked, params_name="users")
            self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT, message, _client.gather,
                                     None, keys=looked, params_name="users", missing="error",
                                     return_found=True)
            if len(shape) == 2:
                self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT, message,
                                         _client.embedding_bag, None, keys=looked,
                                         params_name="users")

    def test_a_request_overrides_the_tables_policy(self):
        rng = np.random.default_rng(4207)
        rows = rng.standard_normal((10, 2)).astype(np.float32)
        keys = random_keys(rng, 10)
        default_row = np.array([7, -7], np.float32)
        gone = absent_keys(rng, keys, 1)
        looked = np.array([keys[4], gone[0]])
        for table in ("error", "zero", "default"):
            info = _client.put_tensor("t", rows, keys=keys, missing=table,
                                      default_row=default_row, replace=True)
            self.assertEqual(info.keyed.missing, table)
            want = {"zero": np.zeros(2, np.float32), "default": default_row}
            for request in (None, "error", "zero", "default"):
                policy = table if request is None else request
                if policy == "error":
                    self.assertRaisesMessage(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"keys[1] = {gone[0]} is not a key of table 't'", _client.gather, None,
                        keys=looked, params_name="t", missing=request)
                    continue
                out = _client.gather(None, keys=looked, params_name="t", missing=request)
                np.testing.assert_array_equal(out, np.stack([rows[4], want[policy]]),
                                              f"table {table} request {request}")

    def test_policy_errors(self):
        rows = np.ones((3, 2), np.float32)
        _client.put_tensor("t", rows, keys=[1, 2, 3])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "missing=SKIP is for EmbeddingBag: a Gather answers a row for every key",
            _client.gather, None, keys=[1], params_name="t", missing="skip")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "table 't' has no default row (put it with one); missing=DEFAULT_ROW needs it",
            _client.gather, None, keys=[1], params_name="t", missing="default")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor 's': missing=SKIP is a choice of each EmbeddingBag request, not a table's "
            "policy", _client.put_tensor, "s", rows, keys=[1, 2, 3], missing="skip")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "table 'd' has no default row (put it with one); missing=DEFAULT_ROW needs it",
            self._put_default_without_row)
        with self.assertRaises(ValueError):
            _client.gather(None, keys=[1], params_name="t", missing="sometimes")

    def _put_default_without_row(self):
        # A table may say missing="default" without a default row; its lookups then refuse.
        _client.put_tensor("d", np.ones((2, 2), np.float32), keys=[5, 6], missing="default")
        _client.gather(None, keys=[7], params_name="d")

    # --- errors at put -----------------------------------------------------------------------

    def test_a_duplicate_key_names_both_positions(self):
        rng = np.random.default_rng(4208)
        for _ in range(5):
            n = int(rng.integers(2, 40))
            keys = random_keys(rng, n)
            first, second = sorted(rng.choice(n, size=2, replace=False).tolist())
            keys[second] = keys[first]
            self.assertRaisesMessage(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"tensor 'dup': keys[{second}] = {keys[first]} repeats keys[{first}]",
                _client.put_tensor, "dup", np.zeros((n, 2), np.float32), keys=keys,
                chunk_bytes=int(rng.integers(8, 64)))
            self.assertNotIn("dup", [t.name for t in _client.list_tensors()])

    def test_the_key_count_must_be_the_row_count(self):
        rows = np.arange(8, dtype=np.float32).reshape(4, 2)
        for keys in ([1, 2, 3], [1, 2, 3, 4, 5]):
            with self.assertRaisesRegex(ValueError, "one per row"):
                _client.put_tensor("t", rows, keys=keys)
        with self.assertRaisesRegex(ValueError, "rank 1"):
            _client.put_tensor("t", rows, keys=[[1, 2], [3, 4]])
        with self.assertRaisesRegex(ValueError, "signed integers"):
            _client.put_tensor("t", rows, keys=np.array([1, 2, 3, 4], np.uint64))
        with self.assertRaisesRegex(ValueError, "pass keys"):
            _client.put_tensor("t", rows, missing="zero")
        # What the server says to a client that sends too few or too many.
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor 't': the upload ended after 3 of 4 keys; nothing was stored",
            _raw_put, "t", rows, [[1, 2, 3]])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT, "tensor 't': 5 keys sent; it has 4 rows",
            _raw_put, "t", rows, [[1, 2], [3, 4, 5]])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor 'p' is not keyed (set keyed in the first message): keys are for keyed "
            "tables", _raw_put, "p", rows, [[1, 2, 3, 4]], keyed=False)
        self.assertEqual(_client.list_tensors(), [])

    def test_capacity_and_default_row_are_checked(self):
        rows = np.zeros((5, 16), np.float32)
        keys = list(range(5))
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 't': capacity 3 is below the 5 rows put",
                                 _client.put_tensor, "t", rows, keys=keys, capacity=3)
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 't': default_row must be float32 [16], got float32 [8]",
                                 _client.put_tensor, "t", rows, keys=keys,
                                 default_row=np.zeros(8, np.float32))
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 't': default_row must be float32 [16], got int32 [16]",
                                 _client.put_tensor, "t", rows, keys=keys,
                                 default_row=np.zeros(16, np.int32))
        # A converted kind's default row is float32 [dim], as its rows are sent.
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 't': default_row must be float32 [16], got float16 [16]",
                                 _client.put_tensor, "t", rows, keys=keys, storage="float16",
                                 default_row=np.zeros(16, np.float16))
        self.assertEqual(_client.list_tensors(), [])

    def test_descriptions_a_keyed_table_cannot_have(self):
        rows = np.zeros((4, 2), np.float32)
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor 't': capacity 4294967296 is above the 2147483645 rows a keyed table may have",
            _client.put_tensor, "t", rows, keys=[1, 2, 3, 4], capacity=2 ** 32)
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 'w': DT_STRING tables are not keyed",
                                 _client.put_tensor, "w", np.array(["a", "b"]), keys=[1, 2])
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "tensor 'sh': a keyed table is not sharded by row ranges: "
                                 "keyed tables are sharded by key (shard.by_key)",
                                 _client.put_tensor, "sh", rows, keys=[1, 2, 3, 4],
                                 shard=(0, 2, 8))
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor 't': a message carries 12 bytes of keys; keys are whole int64s",
            _raw_put, "t", rows, [b"\0" * 12])
        self.assertEqual(_client.list_tensors(), [])

    # --- errors at lookup --------------------------------------------------------------------

    def test_keys_need_a_keyed_resident_table(self):
        rows = np.ones((4, 2), np.float32)
        _client.put_tensor("plain", rows)
        _client.put_tensor("k", rows, keys=[10, 20, 30, 40])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "table 'plain' has no keys (put it with keys); look it up by indices",
            _client.gather, None, keys=[10], params_name="plain")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "table 'plain' has no keys (put it with keys); look it up by indices",
            _client.embedding_bag, None, keys=[[10]], params_name="plain")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "keys are for a resident table put with keys (params_name)",
            _client.gather, rows, keys=[10])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "keys are for a resident table put with keys (params_name)",
            _client.embedding_bag, rows, keys=[[10]])
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT, "keys: keys are int64, got uint64 [1]",
            _client.gather, None, keys=np.array([10], np.uint64), params_name="k")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "missing and return_found are for lookups by keys; the request sends indices",
            _client.gather, None, [1], params_name="k", return_found=True)
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "missing and return_found are for lookups by keys; the request sends indices",
            _client.embedding_bag, None, [[1]], params_name="k", missing="zero")
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "a Gather by keys is along axis 0 without batch_dims (a key names a whole row)",
            _client.gather, None, keys=[10], params_name="k", axis=1)
        self.assertRaisesMessage(
            grpc.StatusCode.INVALID_ARGUMENT,
            "padding_idx is for indices; with keys, missing=SKIP leaves out the keys a table "
            "lacks", _client.embedding_bag, None, keys=[[10]], params_name="k", padding_idx=0)
        with self.assertRaisesRegex(ValueError, "exactly one of indices and keys"):
            _client.gather(None, [1], keys=[10], params_name="k")
        both = pb.GatherRequest(params_name="k", indices=_common.to_tensor([1], "indices"),
                                keys=_common.to_tensor([10], "keys"))
        with grpc.insecure_channel(_server.target) as channel:
            with self.assertRaises(grpc.RpcError) as caught:
                pb_grpc.TensorComputeStub(channel).Gather(both, timeout=30)
        self.assertEqual((caught.exception.code(), caught.exception.details()),
                         (grpc.StatusCode.INVALID_ARGUMENT, "set either indices or keys, not both"))
        with self.assertRaisesRegex(ValueError, "exactly one of indices and keys"):
            _client.embedding_bag(None, params_name="k")
        # A keyed table is still a table by position, of its rows only: its hidden rows (the
        # zero and default rows) are out of reach of indices, for lookups and updates.
        np.testing.assert_array_equal(_client.gather(None, [3, -4], params_name="k"),
                                      rows[[3, 0]])
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "indices[0] = 4 is not in [-4, 4)", _client.gather, None, [4],
                                 params_name="k")
        self.assertRaisesMessage(grpc.StatusCode.INVALID_ARGUMENT,
                                 "indices[0] = 4 is not in [-4, 4)", _client.update_rows, "k",
                                 [4], np.ones((1, 2), np.float32))
        _client.update_rows("k", [-1], np.full((1, 2), 9, np.float32))
        np.testing.assert_array_equal(_client.gather(None, keys=[40, 41], params_name="k",
                                                     missing="zero"),
                                      [[9, 9], [0, 0]])

    # --- upload and info ---------------------------------------------------------------------

    def test_keys_stream_beside_the_rows_in_every_chunking(self):
        rng = np.random.default_rng(4209)
        for n, row_shape, chunk in [(50, (3,), 20), (50, (3,), 7), (9, (100,), 64),
                                    (30, (0,), 16), (200, (1,), 1 << 20), (17, (2, 3), 100)]:
            rows = rng.integers(-100, 100, (n,) + row_shape).astype(np.int16)
            keys = random_keys(rng, n)
            messages = list(_common._put_requests(
                "t", pb.Tensor(dtype=pb.DT_INT16, shape=rows.shape, data=rows.tobytes()), "",
                False, chunk, keyed=pb.KeyedTable(), key_bytes=keys.astype("<i8").tobytes()))
            self.assertEqual(b"".join(m.keys for m in messages), keys.astype("<i8").tobytes())
            self.assertEqual(b"".join(m.data for m in messages), rows.tobytes())
            row_bytes = rows[0].nbytes
            for m in messages:
                if 0 < row_bytes and row_bytes + 8 <= chunk:
                    self.assertLessEqual(len(m.data) + len(m.keys), chunk)
                    self.assertEqual(len(m.data) // row_bytes, len(m.keys) // 8)
                elif row_bytes == 0:
                    self.assertLessEqual(len(m.keys), max(8, chunk))
            info = _client.put_tensor("t", rows, keys=keys, chunk_bytes=chunk, replace=True)
            self.assertEqual(info.keyed.keys, n)
            order = rng.permutation(n)
            np.testing.assert_array_equal(
                _client.gather(None, keys=keys[order], params_name="t"), rows[order],
                f"{n} rows {row_shape} chunk {chunk}")

    def test_list_tensors_shows_the_keyed_info(self):
        rows = np.ones((6, 4), np.float32)
        plain = _client.put_tensor("plain", rows)
        self.assertIsNone(plain.keyed)
        put = _client.put_tensor("k", rows, keys=range(6), missing="default",
                                 default_row=[1, 2, 3, 4], capacity=10)
        self.assertEqual(put.keyed, KeyedInfo(missing="default", has_default_row=True,
                                              capacity=10, keys=6))
        # Its shape is its capacity's: lookups by position see every slot, the free ones zeros.
        self.assertEqual(put.shape, (10, 4))
        np.testing.assert_array_equal(_client.gather(None, [5, 6, 9], params_name="k"),
                                      [[1] * 4, [0] * 4, [0] * 4])
        infos = {t.name: t for t in _client.list_tensors()}
        self.assertEqual(infos["k"].keyed, put.keyed)
        self.assertIsNone(infos["plain"].keyed)
        # The key index's bound (16 bytes a key of capacity) counts with the rows.
        self.assertGreaterEqual(infos["k"].bytes, infos["plain"].bytes + 16 * 10)
        z = _client.put_tensor("z", rows, keys=np.arange(6) - 3)
        self.assertEqual(z.keyed, KeyedInfo("error", False, 6, 6))


def _raw_put(name, rows, key_chunks, keyed=True):
    """PutTensor by hand: the rows in the first message, then one message per key chunk."""
    first = pb.PutTensorRequest(name=name, dtype=pb.DT_FLOAT32, shape=rows.shape,
                                data=rows.astype("<f4").tobytes())
    if keyed:
        first.keyed.CopyFrom(pb.KeyedTable())
    messages = [first] + [
        pb.PutTensorRequest(offset=rows.nbytes,
                            keys=c if isinstance(c, bytes) else np.array(c, "<i8").tobytes())
        for c in key_chunks]
    with grpc.insecure_channel(_server.target) as channel:
        try:
            pb_grpc.TensorComputeStub(channel).PutTensor(iter(messages), timeout=30)
        except grpc.RpcError as e:
            raise TensorComputeError(e.code(), e.details()) from None


class HostileKeyedPutTest(unittest.TestCase):
    """Keyed uploads that would cost memory the server does not have are refused by their first
    message, before anything is allocated."""

    def _put(self, messages):
        with grpc.insecure_channel(_server.target) as channel:
            with self.assertRaises(grpc.RpcError) as caught:
                pb_grpc.TensorComputeStub(channel).PutTensor(iter(messages), timeout=30)
        return caught.exception

    def test_a_billion_keys_declared_is_refused_by_the_first_message(self):
        # 10^9 rows of one float: 4 GB of rows and 16 GB of key index, reserved (and refused)
        # before one key is read.
        first = pb.PutTensorRequest(name="billion", dtype=pb.DT_FLOAT32, shape=[10**9, 1])
        first.keyed.CopyFrom(pb.KeyedTable())
        error = self._put([first])
        self.assertEqual(error.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("max_resident_bytes", error.details())
        self.assertNotIn("billion", [t.name for t in _client.list_tensors()])

    def test_a_capacity_past_the_limit_is_refused(self):
        first = pb.PutTensorRequest(name="wide", dtype=pb.DT_FLOAT32, shape=[2, 1])
        first.keyed.CopyFrom(pb.KeyedTable(capacity=2**40))
        error = self._put([first])
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(error.details(), "tensor 'wide': capacity 1099511627776 is above the "
                                          "2147483645 rows a keyed table may have")

    def test_a_key_stream_longer_than_the_rows_stops_at_the_first_key_too_many(self):
        # Keys sent one message after another past the rows: refused at the one that passes
        # them, whatever follows.
        first = pb.PutTensorRequest(name="endless", dtype=pb.DT_FLOAT32, shape=[4, 1],
                                    data=np.zeros(4, "<f4").tobytes())
        first.keyed.CopyFrom(pb.KeyedTable())

        def endless():
            yield first
            key = 0
            while True:  # the server ends the call; the generator is never exhausted
                key += 1
                yield pb.PutTensorRequest(offset=16, keys=np.array([key], "<i8").tobytes())

        error = self._put(endless())
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(error.details(), "tensor 'endless': 5 keys sent; it has 4 rows")


class PreloadKeysTest(unittest.TestCase):
    """--preload_keys NAME=KEYS.npy[:POLICY]: a preloaded table keyed at start-up answers lookups
    by keys as the same table put with keys does, byte for byte, on every storage kind."""

    def test_a_preloaded_keyed_table_answers_as_a_put_one(self):
        rng = np.random.default_rng(4242)
        rows = rng.standard_normal((300, 16)).astype(np.float32)
        keys = random_keys(rng, 300)
        asked = lookup_keys(rng, keys, (40, 3), 0.25)
        with tempfile.TemporaryDirectory() as tmp:
            np.save(os.path.join(tmp, "rows.npy"), rows)
            np.save(os.path.join(tmp, "keys.npy"), keys)
            # One flag each, comma-separated (a repeated list flag keeps its last value).
            kinds = ("as-is", "float16", "int8-rowwise")
            specs = ",".join(f"t_{kind.replace('-', '_')}={tmp}/rows.npy:{kind}"
                             for kind in kinds)
            key_specs = ",".join(f"t_{kind.replace('-', '_')}={tmp}/keys.npy:zero"
                                 for kind in kinds)
            with ServerProcess("--cpu_threads=2", f"--preload={specs}",
                               f"--preload_keys={key_specs}") as server:
                with Client(server.target, timeout=60.0) as preloaded:
                    # The port serves while tables load: wait for the three.
                    deadline = time.monotonic() + 60
                    while len(preloaded.list_tensors()) < 3 and time.monotonic() < deadline:
                        time.sleep(0.05)
                    for kind in ("as-is", "float16", "int8-rowwise"):
                        name = f"t_{kind.replace('-', '_')}"
                        info = [t for t in preloaded.list_tensors() if t.name == name][0]
                        self.assertEqual(info.keyed, KeyedInfo("zero", False, 300, 300))
                        _client.put_tensor(f"put_{name}", rows, keys=keys, storage=kind,
                                           missing="zero", replace=True)
                        got, found = preloaded.gather(None, keys=asked, params_name=name,
                                                      return_found=True)
                        want, want_found = _client.gather(None, keys=asked,
                                                          params_name=f"put_{name}",
                                                          return_found=True)
                        self.assertEqual(got.tobytes(), want.tobytes(), kind)
                        self.assertEqual(found.tolist(), want_found.tolist())

    def test_bad_key_files_stop_the_start(self):
        rng = np.random.default_rng(7)
        rows = rng.standard_normal((4, 2)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            np.save(os.path.join(tmp, "rows.npy"), rows)
            np.save(os.path.join(tmp, "dup.npy"), np.array([5, -42, 6, -42], np.int64))
            np.save(os.path.join(tmp, "short.npy"), np.array([1, 2, 3], np.int64))
            np.save(os.path.join(tmp, "int32.npy"), np.array([1, 2, 3, 4], np.int32))
            cases = [
                (f"--preload_keys=t={tmp}/dup.npy", "tensor 't': keys[3] = -42 repeats keys[1]"),
                (f"--preload_keys=t={tmp}/short.npy", "holds 3 keys for 4 rows"),
                (f"--preload_keys=t={tmp}/int32.npy", "keys are int64 [rows], C order"),
                (f"--preload_keys=u={tmp}/dup.npy", "no --preload loads a table named 'u'"),
                (f"--preload_keys=t={tmp}/dup.npy:skip", "unknown policy 'skip'"),
            ]
            for flag, message in cases:
                with self.subTest(flag=flag):
                    run = subprocess.run(
                        [os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                         "--metrics_listen=127.0.0.1:0", f"--preload=t={tmp}/rows.npy", flag],
                        capture_output=True, text=True, timeout=60)
                    self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                    self.assertIn(message, run.stdout + run.stderr)


class UpdateByKeysTest(unittest.TestCase):
    """update_rows(keys=, values=, delete_keys=) on keyed tables: upserts and deletes against a
    dict, tables growing past their capacity (and refusing to past the memory budget), and
    readers during updates and growth (never a torn row, never another key's)."""

    def test_upserts_and_deletes_match_a_dict(self):
        rng = np.random.default_rng(421)
        for storage in ("as-is", "float16", "int8-rowwise"):
            keys = random_keys(rng, 40)
            rows = rng.standard_normal((40, 8)).astype(np.float32)
            name = f"upsert_{storage}"
            _client.put_tensor(name, rows, keys=keys, capacity=64, storage=storage,
                               missing="zero", replace=True)
            # What a row reads as once stored: by-index gather of a put of the same rows.
            reference = {int(k): rows[i] for i, k in enumerate(keys)}
            for step in range(6):
                present = list(reference)
                upsert = rng.permutation(np.concatenate([
                    rng.choice(np.array(present, np.int64), size=5, replace=False),
                    absent_keys(rng, np.array(present, np.int64), 4)]))
                doomed = [k for k in rng.choice(np.array(present, np.int64), size=6,
                                                replace=False).tolist()
                          if k not in set(upsert.tolist())]
                values = rng.standard_normal((len(upsert), 8)).astype(np.float32)
                sequence = _client.update_rows(name, keys=upsert, values=values,
                                               delete_keys=doomed + [12345678901])
                for k in doomed:
                    reference.pop(int(k), None)
                for k, v in zip(upsert.tolist(), values):
                    reference[int(k)] = v
                info = [t for t in _client.list_tensors() if t.name == name][0]
                self.assertEqual(info.keyed.keys, len(reference))
                asked = np.concatenate([np.array(list(reference), np.int64),
                                        np.array(doomed, np.int64)])
                got, found = _client.gather(None, keys=asked, params_name=name,
                                            return_found=True, min_sequence=sequence)
                self.assertEqual(found.tolist(),
                                 [int(k) in reference for k in asked.tolist()])
                # The expected rows, stored the same way: a by-index table of them.
                expected_rows = np.stack([reference.get(int(k), np.zeros(8, np.float32))
                                          for k in asked.tolist()])
                _client.put_tensor(f"{name}_ref", expected_rows, storage=storage,
                                   replace=True)
                want = _client.gather(None, np.arange(len(asked)),
                                      params_name=f"{name}_ref")
                self.assertEqual(got.tobytes(), want.tobytes(), f"{storage} step {step}")

    def test_keys_past_the_capacity_grow_the_table(self):
        # From 4 slots to 1500 keys by random upserts and deletes: the table doubles, or takes
        # what a message needs, and keeps its version; every key reads its row as stored.
        rng = np.random.default_rng(4242)
        for storage in ("as-is", "float16", "int8-rowwise"):
            name = f"grow_{storage}"
            keys = random_keys(rng, 3)
            rows = rng.standard_normal((3, 4)).astype(np.float32)
            put = _client.put_tensor(name, rows, keys=keys, capacity=4, storage=storage,
                                     missing="zero", replace=True)
            reference = {int(k): rows[i] for i, k in enumerate(keys)}
            capacity, growths = 4, 0
            while len(reference) < 1500:
                present = np.array(list(reference), np.int64)
                new = absent_keys(rng, present, int(rng.integers(1, 150)))
                old = rng.choice(present, size=min(len(present), int(rng.integers(0, 10))),
                                 replace=False)
                upsert = rng.permutation(np.concatenate([new, old]))
                doomed = [k for k in rng.choice(present, size=min(len(present), 8),
                                                replace=False).tolist()
                          if k not in set(old.tolist())][:int(rng.integers(0, 8))]
                # The deletes go first; then the new keys need free slots, or a growth.
                short = len(new) - (capacity - (len(reference) - len(doomed)))
                if short > 0:
                    capacity, growths = max(2 * capacity, capacity + short), growths + 1
                values = rng.standard_normal((len(upsert), 4)).astype(np.float32)
                sequence = _client.update_rows(name, keys=upsert, values=values,
                                               delete_keys=doomed)
                for k in doomed:
                    reference.pop(int(k))
                for k, v in zip(upsert.tolist(), values):
                    reference[int(k)] = v
                info = [t for t in _client.list_tensors() if t.name == name][0]
                self.assertEqual(info.keyed, KeyedInfo("zero", False, capacity, len(reference)))
                self.assertEqual(info.shape, (capacity, 4))
                self.assertEqual(info.version, put.version)
                self.assertEqual(info.sequence, sequence)
                asked = np.concatenate([np.array(list(reference), np.int64),
                                        absent_keys(rng, present, 5)])
                got, found = _client.gather(None, keys=asked, params_name=name,
                                            return_found=True, min_sequence=sequence)
                self.assertEqual(found.tolist(), [int(k) in reference for k in asked.tolist()])
                # The expected rows, stored the same way: a by-index table of them.
                expected = np.stack([reference.get(int(k), np.zeros(4, np.float32))
                                     for k in asked.tolist()])
                _client.put_tensor(f"{name}_ref", expected, storage=storage, replace=True)
                want = _client.gather(None, np.arange(len(asked)), params_name=f"{name}_ref")
                self.assertEqual(got.tobytes(), want.tobytes(), f"{storage}, {len(reference)}")
            self.assertGreaterEqual(growths, 5, storage)
            _client.delete_tensor(name)
            _client.delete_tensor(f"{name}_ref")

    def test_a_table_that_cannot_grow_within_the_budget_refuses_the_message_whole(self):
        # 1000 rows of 256 bytes (272512 bytes with the hidden rows and the key index) on a
        # server of 400000: growing by 10 slots needs 275232 more beside it.
        rng = np.random.default_rng(43)
        rows = rng.standard_normal((1000, 64)).astype(np.float32)
        keys = random_keys(rng, 1000)
        with ServerProcess("--cpu_threads=1", "--max_resident_bytes=400000") as server, \
                Client(server.target, timeout=60.0) as client:
            put = client.put_tensor("tight", rows, keys=keys)
            self.assertEqual(put.bytes, 272512)
            new = absent_keys(rng, keys, 10)
            upsert = np.concatenate([keys[:3], new])
            with self.assertRaises(TensorComputeError) as caught:
                client.update_rows("tight", keys=upsert,
                                   values=np.full((len(upsert), 64), 9, np.float32))
            self.assertEqual(caught.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(
                caught.exception.message,
                "table 'tight' is full: the message adds 10 keys and 0 slots of its capacity "
                "1000 are free, and growing it to 1010 slots needs 275232 bytes beside its "
                "272512 while it is copied, but 272512 of max_resident_bytes = 400000 are in "
                "use; delete a tensor or raise --max_resident_bytes")
            # Nothing changed: the capacity, the keys, the sequence, the rows overwritten.
            info = client.list_tensors()[0]
            self.assertEqual(info.keyed, KeyedInfo("error", False, 1000, 1000))
            self.assertEqual(info.sequence, put.sequence)
            np.testing.assert_array_equal(client.gather(None, keys=keys[:3], params_name="tight"),
                                          rows[:3])
            # Deleting makes room, in the same call (deletes go first).
            client.update_rows("tight", keys=new, values=np.full((10, 64), 5, np.float32),
                               delete_keys=keys[990:])
            got, found = client.gather(None, keys=np.concatenate([keys[990:], new]),
                                       params_name="tight", missing="zero", return_found=True)
            self.assertEqual(found.tolist(), [False] * 10 + [True] * 10)
            self.assertTrue((got[10:] == 5).all() and (got[:10] == 0).all())

    def test_errors(self):
        _client.put_tensor("upd_err", np.ones((2, 4), np.float32), keys=[1, 2], replace=True)
        _client.put_tensor("upd_plain", np.ones((2, 4), np.float32), replace=True)
        cases = [
            ("upd_err", dict(keys=[3, 3], values=np.ones((2, 4), np.float32)),
             "keys[1] = 3 repeats keys[0]; a message writes a key at most once"),
            ("upd_err", dict(keys=[3], values=np.ones((1, 2), np.float32)),
             "values: table 'upd_err' takes float32 [1,4] for these keys, got float32 [1,2]"),
            ("upd_plain", dict(keys=[3], values=np.ones((1, 4), np.float32)),
             "table 'upd_plain' has no keys; update it by indices"),
        ]
        for name, kwargs, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(TensorComputeError) as caught:
                    _client.update_rows(name, **kwargs)
                self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertEqual(caught.exception.message, message)
        with self.assertRaises(ValueError):
            _client.update_rows("upd_err", [0], np.ones((1, 4), np.float32), keys=[1])
        # The client sends deletes and writes apart, so it refuses a key in both itself (the
        # server's own message for one message holding both is tested in core).
        with self.assertRaisesRegex(ValueError, r"delete_keys\[0\] = 3 is also in keys\[0\]"):
            _client.update_rows("upd_err", keys=[3], values=np.ones((1, 4), np.float32),
                                delete_keys=[3])
        # A plan's words about indices speak of the keys that stand for them.
        with self.assertRaises(TensorComputeError) as caught:
            _client.embedding_bag(None, keys=[1, 2], offsets=[0, 5], params_name="upd_err")
        self.assertEqual(caught.exception.message,
                         "offsets[1] = 5 is past the end of keys (2 values)")

    def test_readers_never_see_a_torn_row_or_another_keys_row(self):
        # Rows of 2 KiB whose every element tags the key and the write; keys move between slots
        # all the time (deletes and adds over a small capacity).
        dim = 512
        candidates = np.arange(96, dtype=np.int64) * 7919 - 100

        def tag(key, write):
            return float((int(key) % 100003) * 64 + write % 64)

        initial = candidates[:48]
        rows = np.stack([np.full(dim, tag(k, 0), np.float32) for k in initial])
        _client.put_tensor("moving", rows, keys=initial, capacity=64, missing="zero",
                           replace=True)
        stop = threading.Event()
        failures = []
        reads = []

        def read(seed):
            rng = np.random.default_rng(seed)
            with Client(_server.target, timeout=60.0) as reader:
                while not stop.is_set():
                    asked = candidates[rng.integers(0, len(candidates), size=32)]
                    got, found = reader.gather(None, keys=asked, params_name="moving",
                                               return_found=True)
                    reads.append(len(asked))
                    for k, row, f in zip(asked.tolist(), got, found.tolist()):
                        if not (row == row[0]).all():
                            failures.append(f"key {k}: a torn row")
                        elif f and int(row[0]) // 64 != k % 100003:
                            failures.append(f"key {k}: the row of key part {int(row[0]) // 64}")
                        elif not f and row[0] != 0:
                            failures.append(f"key {k}: missing but not zeros")

        threads = [threading.Thread(target=read, args=(s,)) for s in (1, 2)]
        for t in threads:
            t.start()
        rng = np.random.default_rng(9)
        try:
            for write in range(1, 200):
                picked = rng.choice(candidates, size=12, replace=False)
                keys, doomed = picked[:6], picked[6:]
                values = np.stack([np.full(dim, tag(k, write), np.float32) for k in keys])
                # 96 keys over 64 slots: should more than 64 be held, the table grows.
                _client.update_rows("moving", keys=keys, values=values, delete_keys=doomed)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(failures[:5], [])
        self.assertGreater(len(reads), 10)  # the readers ran beside the updates


class KeyedBudgetTest(unittest.TestCase):
    """A lookup by keys holds a slot (8 bytes) a key, and a byte a key for the found mask, beside
    its keys: they count against --max_inflight_bytes before they are made."""

    def test_the_slots_of_the_keys_are_charged_to_the_budget(self):
        rng = np.random.default_rng(4243)
        rows = rng.standard_normal((10, 1)).astype(np.float32)
        keys = random_keys(rng, 10)
        budget = 1_650_000
        with ServerProcess("--cpu_threads=2", f"--max_inflight_bytes={budget}") as server:
            with Client(server.target, timeout=60.0) as client:
                client.put_tensor("small", rows, keys=keys)
                # 100,000 keys: 800 kB sent (1.6 MB while they are parsed) and then 400 kB
                # out fit the budget; with their 800 kB of slots and 100 kB of mask they do not.
                many = rng.choice(keys, 100_000)
                with self.assertRaises(TensorComputeError) as caught:
                    client.gather(None, keys=many, params_name="small", return_found=True)
                self.assertEqual(caught.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("(the slots of 100000 keys), more than the whole "
                              f"max_inflight_bytes budget of {budget}",
                              caught.exception.message)
                # A tenth of them is served, with its found mask (once the refused call has
                # let go of its bytes: until then the server answers UNAVAILABLE, "retry").
                few = many[:10_000]
                deadline = time.monotonic() + 30
                while True:
                    try:
                        out, found = client.gather(None, keys=few, params_name="small",
                                                   return_found=True)
                        break
                    except TensorComputeError as error:
                        if (error.code != grpc.StatusCode.UNAVAILABLE
                                or time.monotonic() > deadline):
                            raise
                        time.sleep(0.05)
                position = {int(k): i for i, k in enumerate(keys)}
                want = rows[[position[int(k)] for k in few]]
                np.testing.assert_array_equal(out, want)
                self.assertTrue(found.all())


class AioTest(unittest.TestCase):

    def test_the_asyncio_client_puts_and_looks_up_by_keys(self):
        rng = np.random.default_rng(4210)
        rows = rng.standard_normal((12, 5)).astype(np.float32)
        keys = random_keys(rng, 12)
        gone = absent_keys(rng, keys, 2)

        async def run():
            async with tensorcompute.aio.Client(_server.target, timeout=30) as client:
                info = await client.put_tensor("a", rows, keys=keys, missing="zero",
                                               chunk_bytes=50)
                self.assertEqual(info.keyed, KeyedInfo("zero", False, 12, 12))
                looked = np.array([[keys[3], gone[0]], [gone[1], keys[0]]])
                out, found = await client.gather(None, keys=looked, params_name="a",
                                                 return_found=True)
                want = np.zeros((2, 2, 5), np.float32)
                want[0, 0], want[1, 1] = rows[3], rows[0]
                np.testing.assert_array_equal(out, want)
                np.testing.assert_array_equal(found, [[True, False], [False, True]])
                out, found = await client.embedding_bag(None, keys=looked, params_name="a",
                                                        mode="mean", missing="skip",
                                                        return_found=True)
                np.testing.assert_array_equal(out, np.stack([rows[3], rows[0]]))
                out = await client.embedding_bag(None, keys=looked, params_name="a",
                                                 mode="mean")
                np.testing.assert_array_equal(out, np.stack([rows[3] / 2, rows[0] / 2]))
                with self.assertRaises(TensorComputeError) as caught:
                    await client.gather(None, keys=[gone[0]], params_name="a", missing="error")
                self.assertEqual(caught.exception.message,
                                 f"keys[0] = {gone[0]} is not a key of table 'a'")
                await client.delete_tensor("a")

        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
