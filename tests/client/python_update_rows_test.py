"""End-to-end tests of update_rows and min_sequence= in the Python clients (sync and asyncio),
against the real tensorcompute-server.

Needs $TC_SERVER_BINARY and the `tensorcompute` package installed in this Python (ctest's
python_client.install does it). Run by hand:

    .venv/bin/pip install --no-deps --no-build-isolation ./client/python
    cd tests/client && PYTHONPATH=../testing \\
        TC_SERVER_BINARY=../../build/server/tensorcompute-server \\
        ../../.venv/bin/python3 -m unittest -v python_update_rows_test

Each test puts its own table, updates rows and reads the whole table back by name: what it
reads must be the table with exactly the updated rows replaced (bit for bit for as-is and
prequantized tables; the compact_reference formulas for converted ones), and each message
must advance the table's sequence by one.
"""

import asyncio
import os
import tempfile
import unittest

import grpc
import numpy as np

import tensorcompute.aio
from tensorcompute import Client, TensorComputeError
from compact_reference import dequantize_rowwise8, quantize_rowwise8
from server_process import ServerProcess

_server = None
_client = None


def setUpModule():
    global _server, _client
    # The least message limit the server takes (128 KiB), which update_rows' default chunk
    # must then respect.
    _server = ServerProcess("--cpu_threads=2", "--max_message_bytes=131072")
    _server.__enter__()
    _client = Client(_server.target, timeout=30.0, max_message_bytes=131072)


def tearDownModule():
    if _client is not None:
        _client.close()
    if _server is not None:
        _server.__exit__(None, None, None)


def sequence_of(name):
    return {t.name: t.sequence for t in _client.list_tensors()}[name]


def whole(name, rows, **kwargs):
    return _client.gather(None, np.arange(rows), params_name=name, **kwargs)


class SyncTest(unittest.TestCase):

    def setUp(self):
        self.table = np.random.default_rng(1).standard_normal((400, 16)).astype(np.float32)
        _client.put_tensor("emb", self.table, replace=True, chunk_bytes=32768)

    def test_updated_rows_are_read_back_and_the_sequence_advances(self):
        before = sequence_of("emb")
        rows = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
        seq = _client.update_rows("emb", [5, -1, 0], rows)
        self.assertIsInstance(seq, int)
        self.assertEqual(seq, before + 1)
        self.assertEqual(sequence_of("emb"), seq)
        want = self.table.copy()
        want[[5, 399, 0]] = rows
        np.testing.assert_array_equal(whole("emb", 400, min_sequence=seq), want)

    def test_many_rows_stream_in_chunks_of_whole_rows(self):
        before = sequence_of("emb")
        ids = np.random.default_rng(3).permutation(400).astype(np.int32)
        rows = np.random.default_rng(4).standard_normal((400, 16)).astype(np.float32)
        # 4 KiB a message: 4096 // (64 + 4) = 60 rows, so 7 messages for 400 rows.
        seq = _client.update_rows("emb", ids, rows, chunk_bytes=4096)
        self.assertEqual(seq, before + 7)
        want = np.empty_like(rows)
        want[ids] = rows
        np.testing.assert_array_equal(whole("emb", 400), want)
        # The default chunk (1 MiB) is capped by the client's 128 KiB message limit: one
        # message of 400 rows of 68 bytes fits (27 KB), so the sequence moves by one.
        seq2 = _client.update_rows("emb", ids, rows * 2)
        self.assertEqual(seq2, seq + 1)
        np.testing.assert_array_equal(whole("emb", 400), want * 2)

    def test_min_sequence_on_every_lookup(self):
        seq = _client.update_rows("emb", np.array([1], dtype=np.int64),
                                  np.ones((1, 16), np.float32))
        np.testing.assert_array_equal(
            _client.gather(None, [1], params_name="emb", min_sequence=seq), np.ones((1, 16)))
        np.testing.assert_array_equal(
            _client.gather_nd(None, [[1, 3]], params_name="emb", min_sequence=seq), [1.0])
        np.testing.assert_array_equal(
            _client.embedding_bag(None, [[1, 1]], params_name="emb", min_sequence=seq),
            np.full((1, 16), 2.0, np.float32))
        calls = [
            lambda m: _client.gather(None, [1], params_name="emb", min_sequence=m),
            lambda m: _client.gather_nd(None, [[1, 3]], params_name="emb", min_sequence=m),
            lambda m: _client.embedding_bag(None, [[1]], params_name="emb", min_sequence=m),
        ]
        for call in calls:
            with self.assertRaises(TensorComputeError) as e:
                call(seq + 5)
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn(str(seq), e.exception.message)
            self.assertIn(str(seq + 5), e.exception.message)

    def test_bad_updates_change_nothing(self):
        before = sequence_of("emb")
        rows = np.zeros((2, 16), np.float32)
        bad = [
            ([1, 400], rows, grpc.StatusCode.INVALID_ARGUMENT, "400 is not in [-400, 400)"),
            ([1, 1], rows, grpc.StatusCode.INVALID_ARGUMENT, None),   # repeated in a message
            ([1, 2], rows.astype(np.float64), grpc.StatusCode.INVALID_ARGUMENT, None),
            ([1, 2], np.zeros((2, 15), np.float32), grpc.StatusCode.INVALID_ARGUMENT, None),
        ]
        for ids, values, code, words in bad:
            with self.subTest(ids=ids, dtype=values.dtype, shape=values.shape):
                with self.assertRaises(TensorComputeError) as e:
                    _client.update_rows("emb", ids, values)
                self.assertEqual(e.exception.code, code, e.exception.message)
                if words:
                    self.assertIn(words, e.exception.message)
        self.assertEqual(sequence_of("emb"), before)
        np.testing.assert_array_equal(whole("emb", 400), self.table)
        with self.assertRaises(TensorComputeError) as e:
            _client.update_rows("no_such_table", [0], np.zeros((1, 16), np.float32))
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_argument_errors_before_any_rpc(self):
        before = sequence_of("emb")
        for ids, values, error in (
                ([[1]], np.zeros((1, 16), np.float32), ValueError),      # rank 2
                (np.array([1.0]), np.zeros((1, 16), np.float32), ValueError),
                ([1, 2], np.zeros((3, 16), np.float32), ValueError),      # 3 rows for 2
                ([1], np.array(["a"]), TypeError)):
            with self.subTest(ids=ids, values=values.shape):
                with self.assertRaises(error):
                    _client.update_rows("emb", ids, values)
        with self.assertRaises(ValueError):
            _client.update_rows("emb", [1], np.zeros((1, 16), np.float32), chunk_bytes=0)
        self.assertEqual(sequence_of("emb"), before)


class CompactTablesTest(unittest.TestCase):

    def test_int8_rowwise_takes_float32_rows_and_quantizes_them(self):
        table = np.random.default_rng(5).standard_normal((50, 8)).astype(np.float32)
        _client.put_tensor("q8", table, replace=True, storage="int8-rowwise")
        rows = np.random.default_rng(6).standard_normal((2, 8)).astype(np.float32)
        _client.update_rows("q8", [3, 7], rows)
        want = table.copy()
        want[[3, 7]] = rows
        np.testing.assert_array_equal(whole("q8", 50), dequantize_rowwise8(quantize_rowwise8(want)))

    def test_prequantized_takes_its_stored_rows(self):
        fused = quantize_rowwise8(np.random.default_rng(7).standard_normal((50, 8)))
        _client.put_tensor("pq", fused, replace=True, storage="int8-rowwise-prequantized")
        rows = quantize_rowwise8(np.random.default_rng(8).standard_normal((2, 8)))
        _client.update_rows("pq", [0, 49], rows)
        want = fused.copy()
        want[[0, 49]] = rows
        np.testing.assert_array_equal(whole("pq", 50), dequantize_rowwise8(want))


class AdminTokenTest(unittest.TestCase):

    def test_update_rows_needs_the_admin_token(self):
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
                admin.put_tensor("t", np.zeros((4, 2), np.float32))
                with self.assertRaises(TensorComputeError) as e:
                    reader.update_rows("t", [1], np.ones((1, 2), np.float32))
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
                seq = admin.update_rows("t", [1], np.ones((1, 2), np.float32))
                self.assertEqual(reader.gather(None, [1], params_name="t",
                                               min_sequence=seq).tolist(), [[1.0, 1.0]])


class AioTest(unittest.TestCase):

    def test_update_rows_and_min_sequence(self):
        table = np.random.default_rng(9).standard_normal((100, 4)).astype(np.float32)
        rows = np.random.default_rng(10).standard_normal((100, 4)).astype(np.float32)

        async def main():
            async with tensorcompute.aio.Client(_server.target, timeout=30.0,
                                                max_message_bytes=131072) as client:
                await client.put_tensor("aio", table, replace=True)
                before = {t.name: t.sequence for t in await client.list_tensors()}["aio"]
                # 256 bytes a message: 256 // (16 + 8) = 10 rows, so 10 messages.
                seq = await client.update_rows("aio", np.arange(100), rows, chunk_bytes=256)
                got = await client.gather(None, np.arange(100), params_name="aio",
                                          min_sequence=seq)
                pooled = await client.embedding_bag(None, [[0, 1]], params_name="aio",
                                                    min_sequence=seq)
                element = await client.gather_nd(None, [[2, 3]], params_name="aio",
                                                 min_sequence=seq)
                with self.assertRaises(TensorComputeError) as e:
                    await client.gather(None, [0], params_name="aio", min_sequence=seq + 1)
                return before, seq, got, pooled, element, e.exception

        before, seq, got, pooled, element, error = asyncio.run(main())
        self.assertIsInstance(seq, int)
        self.assertEqual(seq, before + 10)
        np.testing.assert_array_equal(got, rows)
        np.testing.assert_array_equal(pooled, (rows[0] + rows[1])[None])
        np.testing.assert_array_equal(element, [rows[2, 3]])
        self.assertEqual(error.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(str(seq + 1), error.message)


if __name__ == "__main__":
    unittest.main()
