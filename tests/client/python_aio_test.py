"""End-to-end tests of the asyncio client (tensorcompute.aio) and of both clients' compression,
against the real tensorcompute-server.

Needs $TC_SERVER_BINARY and the `tensorcompute` package installed in this Python (ctest's
python_client.install does it). Run by hand:

    .venv/bin/pip install --no-deps --no-build-isolation ./client/python
    cd tests/client && PYTHONPATH=../testing \\
        TC_SERVER_BINARY=../../build/server/tensorcompute-server \\
        ../../.venv/bin/python3 -m unittest -v python_aio_test

Answers are checked against NumPy references (python_client_test's and embedding_bag_reference),
bit for bit; errors by their exact codes (and words, where the server's are fixed).
"""

import asyncio
import inspect
import os
import socket
import tempfile
import threading
import time
import unittest

import grpc
import ml_dtypes
import numpy as np

import tensorcompute
import tensorcompute.aio
from tensorcompute import TensorComputeError
from embedding_bag_reference import EB_FLOAT_DTYPES, EB_MODES, mismatch, random_bag_case, \
    ref_embedding_bag
from python_client_test import GATHER_CASES, GATHER_ND_CASES, NUMERIC_DTYPES, dead_target, \
    random_array, random_indices, ref_gather, ref_gather_nd
from counting_proxy import CountingProxy
from server_process import ServerProcess

_server = None


def setUpModule():
    global _server
    _server = ServerProcess("--cpu_threads=2")
    _server.__enter__()


def tearDownModule():
    if _server is not None:
        _server.__exit__(None, None, None)


class BlackHole:
    """127.0.0.1:<port> that accepts TCP connections (the kernel's backlog) and never answers:
    a call there waits until its deadline or its cancellation."""

    def __enter__(self):
        self._socket = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.target = f"127.0.0.1:{self._socket.getsockname()[1]}"
        return self

    def __exit__(self, *exc):
        self._socket.close()
        return False


class LoopTestCase(unittest.IsolatedAsyncioTestCase):
    """Each test runs in an event loop of its own (in asyncio's debug mode)."""

    async def asyncSetUp(self):
        # Debug mode reports every step over 0.1 s; converting a few hundred calls' arrays at
        # once takes longer than that, as the module docstring of tensorcompute.aio says.
        asyncio.get_running_loop().slow_callback_duration = 1.0


class AioTestCase(LoopTestCase):
    """With self.client, an aio.Client on _server made in the test's loop."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.client = tensorcompute.aio.Client(_server.target, timeout=30.0)

    async def asyncTearDown(self):
        await self.client.close()

    async def assertRpcError(self, code, contains, awaitable):
        with self.assertRaises(TensorComputeError) as raised:
            await awaitable
        e = raised.exception
        self.assertEqual(e.code, code, str(e))
        self.assertIn(contains, e.message)
        self.assertEqual(str(e), f"{code.name}: {e.message}")
        return e

    def assertBitsEqual(self, out, ref):
        self.assertIsInstance(out, np.ndarray)
        self.assertEqual(out.dtype, ref.dtype)
        self.assertEqual(out.shape, ref.shape)
        self.assertTrue(out.flags.writeable)
        if ref.dtype == object:
            self.assertEqual(out.tolist(), ref.tolist())
        else:
            self.assertEqual(out.tobytes(), ref.tobytes())


class InterfaceTest(unittest.TestCase):
    """aio.Client is tensorcompute.Client with coroutines: same methods, arguments, defaults
    and docstrings."""

    def test_same_methods_signatures_and_docstrings(self):
        sync, aio = tensorcompute.Client, tensorcompute.aio.Client
        public = [name for name in dir(sync) if not name.startswith("_")]
        self.assertEqual(sorted(public), ["close", "delete_tensor", "embedding_bag", "gather",
                                          "gather_nd", "health", "list_tensors", "put_tensor",
                                          "update_rows"])
        for name in public:
            with self.subTest(method=name):
                self.assertTrue(inspect.iscoroutinefunction(getattr(aio, name)))
                self.assertEqual(inspect.signature(getattr(aio, name)),
                                 inspect.signature(getattr(sync, name)))
                self.assertTrue(getattr(aio, name).__doc__)
                self.assertEqual(getattr(aio, name).__doc__, getattr(sync, name).__doc__)
        self.assertEqual(inspect.signature(aio.__init__), inspect.signature(sync.__init__))
        self.assertIn("compression", inspect.signature(sync.__init__).parameters)
        self.assertIn("compression", sync.__init__.__doc__)
        self.assertIs(tensorcompute.aio.Client, aio)  # reachable after `import tensorcompute`

    def test_compression_argument(self):
        for client_class in (tensorcompute.Client, tensorcompute.aio.Client):
            for bad in ("zstd", "", 1, "gzip2"):
                with self.subTest(client=client_class.__module__, compression=bad):
                    with self.assertRaisesRegex(ValueError, "compression must be"):
                        client_class(dead_target(), compression=bad)


class MethodTest(AioTestCase):
    async def test_gather_and_gather_nd_every_dtype_at_once(self):
        # Every dtype and case of the sync client's test, all awaited together.
        rng = np.random.default_rng(4321)
        calls, refs = [], []
        for dtype in NUMERIC_DTYPES:
            for case, (pshape, ishape, axis, batch_dims) in enumerate(GATHER_CASES):
                params = random_array(rng, dtype, pshape)
                b = batch_dims + (len(ishape) if ishape else 0) if batch_dims < 0 else batch_dims
                a = b if axis is None else axis % len(pshape)
                index_dtype = (np.int32, np.int64)[case % 2]
                indices = (index_dtype(rng.integers(-pshape[a], pshape[a])) if ishape is None
                           else random_indices(rng, pshape[a], ishape, index_dtype))
                calls.append(self.client.gather(params, indices, axis=axis,
                                                batch_dims=batch_dims))
                refs.append(ref_gather(params, indices, axis, batch_dims))
            for case, (pshape, ishape, b) in enumerate(GATHER_ND_CASES):
                params = random_array(rng, dtype, pshape)
                index_dtype = (np.int64, np.int32)[case % 2]
                indices = np.stack([random_indices(rng, pshape[b + k], ishape[:-1], index_dtype)
                                    for k in range(ishape[-1])], axis=-1)
                calls.append(self.client.gather_nd(params, indices, batch_dims=b))
                refs.append(ref_gather_nd(params, indices, b))
        outs = await asyncio.gather(*calls)
        self.assertEqual(len(outs), len(NUMERIC_DTYPES) * (len(GATHER_CASES) +
                                                           len(GATHER_ND_CASES)))
        for i, (out, ref) in enumerate(zip(outs, refs)):
            with self.subTest(call=i):
                self.assertBitsEqual(out, ref)

    async def test_strings_and_python_lists(self):
        params = np.array(["alpha", "", "d\u00e9j\u00e0 vu", "\U0001F600"])
        out = await self.client.gather(params, [3, 1, -4])
        self.assertEqual(out.dtype, object)
        self.assertEqual(out.tolist(), ["\U0001F600".encode(), b"", b"alpha"])
        out = await self.client.gather_nd(np.array([[b"a", b"\xff\x00"]], dtype=object), [0, 1])
        self.assertEqual((out.shape, out.item()), ((), b"\xff\x00"))
        out = await self.client.gather([[1, 2], [3, 4], [5, 6]], [-1, 0])
        self.assertEqual(out.dtype, np.int64)
        np.testing.assert_array_equal(out, [[5, 6], [1, 2]])
        self.assertEqual((await self.client.gather([1, 2, 3], [])).shape, (0,))

    async def test_large_messages_both_ways(self):
        params = np.arange(2 << 20, dtype=np.float32).reshape(-1, 1024)  # 8 MiB
        out = await self.client.gather(params, np.arange(params.shape[0] - 1, -1, -1))
        np.testing.assert_array_equal(out, params[::-1])

    async def test_embedding_bag_random_calls_match_the_numpy_loop(self):
        rng = np.random.default_rng(2525)
        cases = []
        for dtype in EB_FLOAT_DTYPES:
            for mode in EB_MODES:
                for weighted in ((False,) if mode == "max" else (False, True)):
                    for fixed_bags in (False, True):
                        cases.append(random_bag_case(rng, dtype, mode, weighted, fixed_bags))
        outs = await asyncio.gather(*(self.client.embedding_bag(params, indices, **kwargs)
                                      for params, indices, kwargs in cases))
        for (params, indices, kwargs), out in zip(cases, outs):
            with self.subTest(dtype=params.dtype.name, **{k: str(v) for k, v in kwargs.items()}):
                self.assertTrue(out.flags.writeable)
                problem = mismatch(out, *ref_embedding_bag(params, indices, **kwargs))
                if problem:
                    self.fail(problem)

    async def test_embedding_bag_by_hand(self):
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        np.testing.assert_array_equal(
            await self.client.embedding_bag(params, [0, 2, 3], offsets=[0, 2]),
            [[6, 8, 10], [9, 10, 11]])
        np.testing.assert_array_equal(
            await self.client.embedding_bag(params, [[0, 2], [3, 3]], mode="MAX"),
            [[6, 7, 8], [9, 10, 11]])
        np.testing.assert_array_equal(
            await self.client.embedding_bag(params, [0, 2, 3], [0, 2, 3],
                                            per_sample_weights=[2, 1, .5],
                                            include_last_offset=True),
            [[6, 9, 12], [4.5, 5, 5.5]])
        np.testing.assert_array_equal(
            await self.client.embedding_bag(params, [[0, 2], [3, -2]], mode="mean",
                                            padding_idx=-2),
            [[0, 1, 2], [9, 10, 11]])

    async def test_health(self):
        self.assertEqual(await self.client.health(), "SERVING")
        await self.assertRpcError(grpc.StatusCode.NOT_FOUND, "",
                                  self.client.health("no.such.Service"))

    async def test_context_manager_and_repr(self):
        async with tensorcompute.aio.Client(_server.target, compression="gzip") as client:
            self.assertEqual(await client.health(), "SERVING")
            self.assertEqual(repr(client),
                             f"tensorcompute.aio.Client(target={_server.target!r}, "
                             "timeout=30.0, retries=0, compression='gzip')")
        with self.assertRaisesRegex(ValueError, "closed"):
            await client.gather([1], [0])


class ErrorTest(AioTestCase):
    async def test_server_errors_with_their_codes_and_words(self):
        e = await self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "",
                                      self.client.gather([1, 2, 3], [[0, 1], [7, 2]]))
        self.assertEqual(str(e), "INVALID_ARGUMENT: indices[1,0] = 7 is not in [-3, 3)")
        await self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                                  "indices[1,1] = 3 is not in [-3, 3)",
                                  self.client.gather_nd(np.zeros((2, 3)), [[0, 0], [1, 3]]))
        await self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "axis = 2 is not in [-2, 2)",
                                  self.client.gather(np.zeros((2, 3)), [0], axis=2))
        await self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "int32 or int64",
                                  self.client.gather([1, 2, 3], [0.0, 1.0]))
        await self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                                  "offsets[2] = 1 is less than offsets[1] = 2",
                                  self.client.embedding_bag(np.zeros((4, 2), np.float32),
                                                            [0, 1, 2], offsets=[0, 2, 1]))
        await self.assertRpcError(grpc.StatusCode.NOT_FOUND, "no_such_table",
                                  self.client.gather(None, [0], params_name="no_such_table"))

    async def test_message_limits(self):
        async with tensorcompute.aio.Client(_server.target, timeout=10,
                                            max_message_bytes=1024) as client:
            await self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                      client.gather(np.zeros(1000, np.float32), [0]))
            await self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                      client.gather(np.zeros((2, 16)), np.zeros(8, np.int32)))

    async def test_argument_errors_before_any_rpc(self):
        async with tensorcompute.aio.Client(dead_target(), timeout=5) as client:
            with self.assertRaisesRegex(TypeError, r"^params: unsupported dtype"):
                await client.gather(np.array(["2020-01-01"], dtype="datetime64[D]"), [0])
            with self.assertRaisesRegex(TypeError, r"^params: unsupported dtype"):
                await client.gather(np.zeros(2, dtype=ml_dtypes.float8_e4m3fn), [0])
            with self.assertRaises(ValueError):
                await client.gather([1, 2], [0], params_name="x")
            with self.assertRaises(ValueError):
                await client.gather_nd(None, [[0]])
            with self.assertRaisesRegex(ValueError, "mode must be one of"):
                await client.embedding_bag(np.zeros((2, 2), np.float32), [[0]], mode="median")
            with self.assertRaises(TypeError):
                await client.embedding_bag(np.zeros((2, 2), np.float32), [[0]],
                                           padding_idx=1.5)
            with self.assertRaisesRegex(ValueError, "storage must be one of"):
                await client.put_tensor("t", [1.0], storage="int4")
            with self.assertRaisesRegex(ValueError, "chunk_bytes must be > 0"):
                await client.put_tensor("t", [1.0], chunk_bytes=0)
        with self.assertRaisesRegex(ValueError, "retries must be >= 0"):
            tensorcompute.aio.Client(_server.target, retries=-1)

    async def test_unreachable_server_is_unavailable(self):
        async with tensorcompute.aio.Client(dead_target(), timeout=5) as client:
            started = time.monotonic()
            await self.assertRpcError(grpc.StatusCode.UNAVAILABLE, "", client.gather([1], [0]))
            self.assertLess(time.monotonic() - started, 4)

    async def test_tokens(self):
        with tempfile.TemporaryDirectory() as tmp:
            reader_file, admin_file = os.path.join(tmp, "reader"), os.path.join(tmp, "admin")
            for path, token in ((reader_file, "reader"), (admin_file, "admin")):
                with open(path, "w") as f:
                    f.write(token + "\n")
            server = await asyncio.to_thread(
                ServerProcess("--cpu_threads=1", f"--auth_token_file={reader_file}",
                              f"--admin_token_file={admin_file}").__enter__)
            try:
                async with tensorcompute.aio.Client(server.target, timeout=10) as anonymous, \
                        tensorcompute.aio.Client(server.target, timeout=10,
                                                 auth_token="reader") as reader, \
                        tensorcompute.aio.Client(server.target, timeout=10, auth_token="reader",
                                                 admin_token="admin") as admin:
                    await self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, "",
                                              anonymous.gather([1, 2], [1]))
                    np.testing.assert_array_equal(await reader.gather([1, 2], [1]), [2])
                    await self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, "",
                                              reader.put_tensor("t", [1, 2]))
                    await admin.put_tensor("t", [1, 2])
                    self.assertEqual([t.name for t in await reader.list_tensors()], ["t"])
                    await self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, "",
                                              reader.delete_tensor("t"))
                    self.assertEqual((await admin.delete_tensor("t")).name, "t")
            finally:
                server.__exit__(None, None, None)


class ResidentTensorTest(AioTestCase):
    """put_tensor / list_tensors / delete_tensor / params_name on two servers of their own with
    a 1 MiB message limit, so that an upload must be chunked to pass."""

    @classmethod
    def setUpClass(cls):
        cls.a = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576")
        cls.a.__enter__()
        cls.b = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576")
        cls.b.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.a.__exit__(None, None, None)
        cls.b.__exit__(None, None, None)

    async def asyncSetUp(self):
        await LoopTestCase.asyncSetUp(self)
        self.client = tensorcompute.aio.Client(self.a.target, timeout=60.0)
        self.both = tensorcompute.aio.Client(f"ipv4:{self.a.target},{self.b.target}",
                                             timeout=60.0)

    async def asyncTearDown(self):
        for server in (self.a, self.b):
            with tensorcompute.Client(server.target) as c:
                for t in c.list_tensors():
                    c.delete_tensor(t.name)
        await self.client.close()
        await self.both.close()

    async def test_put_list_lookups_by_name_delete(self):
        rng = np.random.default_rng(31)
        table = rng.standard_normal((40, 5)).astype(np.float32)
        info = await self.client.put_tensor("emb", table)
        self.assertIsInstance(info, tensorcompute.TensorInfo)
        self.assertEqual((info.name, info.dtype, info.shape, info.bytes, info.device,
                          info.version, info.storage, info.shard),
                         ("emb", "float32", (40, 5), 800, "cpu", 1, "as-is", None))
        self.assertLess(abs(info.created.timestamp() - time.time()), 60)
        self.assertEqual(await self.client.list_tensors(), [info])
        indices = np.array([[39, 0], [-1, 4]])
        self.assertBitsEqual(await self.client.gather(None, indices, params_name="emb"),
                             np.take(table, indices, axis=0))
        self.assertBitsEqual(await self.client.gather_nd(None, indices, params_name="emb"),
                             ref_gather_nd(table, indices))
        _, bags, kwargs = random_bag_case(rng, np.float32, "mean", True, False, table=table)
        self.assertBitsEqual(
            await self.client.embedding_bag(None, bags, params_name="emb", **kwargs),
            await self.client.embedding_bag(table, bags, **kwargs))
        self.assertEqual(await self.client.delete_tensor("emb"), info)
        self.assertEqual(await self.client.list_tensors(), [])
        await self.assertRpcError(grpc.StatusCode.NOT_FOUND, "emb",
                                  self.client.gather(None, [0], params_name="emb"))
        await self.assertRpcError(grpc.StatusCode.NOT_FOUND, "emb",
                                  self.client.delete_tensor("emb"))

    async def test_uploads_in_chunks_under_the_message_limit(self):
        rng = np.random.default_rng(32)
        big = rng.standard_normal((1024, 384))  # 3 MiB of float64, 3x the server's limit
        info = await self.client.put_tensor("big", big, chunk_bytes=100_000)
        self.assertEqual((info.shape, info.bytes), ((1024, 384), big.nbytes))
        ids = rng.integers(-1024, 1024, size=50)
        self.assertBitsEqual(await self.client.gather(None, ids, params_name="big"),
                             np.take(big, ids, axis=0))
        words = np.array([b"", "\u00e9t\u00e9".encode(), b"x" * 5000, b"\x00\xff"] * 50,
                         dtype=object).reshape(100, 2)
        await self.client.put_tensor("words", words, chunk_bytes=1000)
        self.assertBitsEqual(await self.client.gather(None, [99, 0, 1], params_name="words"),
                             words[[99, 0, 1]])
        # 1 MiB chunks plus their framing pass the server's 1 MiB limit: the server refuses
        # RESOURCE_EXHAUSTED and stores nothing. grpc.aio may instead report INTERNAL ("Internal
        # error from Core") when the refusal ends the stream while it is still writing the next
        # chunk (seen on a fresh Debian 12 machine); the server's answer is the same.
        with self.assertRaises(TensorComputeError) as raised:
            await self.client.put_tensor("too_big_chunks", big)
        self.assertIn(raised.exception.code,
                      (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL),
                      str(raised.exception))
        self.assertEqual(sorted(t.name for t in await self.client.list_tensors()),
                         ["big", "words"])

    async def test_already_exists_replace_and_storage(self):
        await self.client.put_tensor("t", np.arange(3, dtype=np.int32))
        await self.assertRpcError(grpc.StatusCode.ALREADY_EXISTS, "'t' exists",
                                  self.client.put_tensor("t", np.arange(4, dtype=np.int32)))
        info = await self.client.put_tensor("t", np.array([7, 8], np.int64), replace=True)
        self.assertEqual((info.version, info.dtype, info.shape), (2, "int64", (2,)))
        table = np.array([[1.0, 2.5], [1 / 3, -4.0]], np.float32)
        info = await self.client.put_tensor("half", table, storage="float16")
        self.assertEqual((info.storage, info.dtype, info.bytes), ("float16", "float32", 8))
        self.assertBitsEqual(await self.client.gather(None, [1, 0], params_name="half"),
                             table[[1, 0]].astype(np.float16).astype(np.float32))

    async def test_all_targets(self):
        table = np.arange(8, dtype=np.int64).reshape(4, 2)
        await self.both.put_tensor("shared", table, all_targets=True)
        for server in (self.a, self.b):
            async with tensorcompute.aio.Client(server.target) as c:
                self.assertEqual([t.name for t in await c.list_tensors()], ["shared"])
        async with tensorcompute.aio.Client(self.a.target) as c:
            await c.delete_tensor("shared")
        e = await self.assertRpcError(grpc.StatusCode.ALREADY_EXISTS, "",
                                      self.both.put_tensor("shared", table, all_targets=True))
        self.assertIn(f"put shared: failed on 1 of 2 targets: ipv4:{self.b.target}: "
                      "ALREADY_EXISTS", e.message)
        self.assertIn(f"succeeded on: ipv4:{self.a.target}", e.message)
        await self.both.delete_tensor("shared", all_targets=True)
        for server in (self.a, self.b):
            async with tensorcompute.aio.Client(server.target) as c:
                self.assertEqual(await c.list_tensors(), [])


class ConcurrencyTest(AioTestCase):
    async def test_many_calls_at_once_each_get_their_own_answer(self):
        rng = np.random.default_rng(77)
        calls, refs = [], []
        for i in range(300):
            params = rng.standard_normal((int(rng.integers(1, 50)), 8)).astype(np.float32)
            rows = params.shape[0]
            kind = i % 3
            if kind == 0:
                indices = random_indices(rng, rows, (int(rng.integers(0, 20)),), np.int64)
                calls.append(self.client.gather(params, indices))
                refs.append(np.take(params, indices, axis=0))
            elif kind == 1:
                indices = random_indices(rng, rows, (int(rng.integers(0, 20)), 1), np.int32)
                calls.append(self.client.gather_nd(params, indices))
                refs.append(ref_gather_nd(params, indices))
            else:
                indices = random_indices(rng, rows, (int(rng.integers(0, 6)), 3), np.int64)
                calls.append(self.client.embedding_bag(params, indices, mode="max"))
                refs.append(ref_embedding_bag(params, indices, mode="max")[0])
        outs = await asyncio.gather(*calls)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            with self.subTest(call=i):
                self.assertBitsEqual(out, ref)

    async def test_calls_wait_side_by_side(self):
        # 40 calls that each wait out a 1 s deadline end together after about 1 s, not 40 s:
        # they are in flight at once, and none holds the event loop.
        with BlackHole() as hole:
            async with tensorcompute.aio.Client(hole.target, timeout=1.0) as client:
                started = time.monotonic()
                results = await asyncio.gather(*(client.gather([1], [0]) for _ in range(40)),
                                               return_exceptions=True)
                elapsed = time.monotonic() - started
        self.assertEqual({type(r) for r in results}, {TensorComputeError})
        self.assertEqual({r.code for r in results}, {grpc.StatusCode.DEADLINE_EXCEEDED})
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 5)


class DeadlineAndCancelTest(AioTestCase):
    async def test_deadline_exceeded(self):
        with BlackHole() as hole:
            async with tensorcompute.aio.Client(hole.target, timeout=0.5) as client:
                started = time.monotonic()
                await self.assertRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "",
                                          client.gather([1], [0]))
                self.assertLess(time.monotonic() - started, 3)
            async with tensorcompute.aio.Client(hole.target, timeout=60) as client:
                started = time.monotonic()  # the call's timeout overrides the client's
                await self.assertRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "",
                                          client.health(timeout=0.5))
                self.assertLess(time.monotonic() - started, 3)

    async def test_cancelling_a_waiting_call(self):
        with BlackHole() as hole:
            async with tensorcompute.aio.Client(hole.target, timeout=60) as client:
                started = time.monotonic()
                with self.assertRaises(asyncio.TimeoutError):
                    await asyncio.wait_for(client.gather([1], [0]), 0.3)
                task = asyncio.ensure_future(client.embedding_bag([[1.0]], [[0]]))
                await asyncio.sleep(0.2)
                self.assertFalse(task.done())
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertLess(time.monotonic() - started, 3)

    async def test_cancelling_during_a_retry_backoff(self):
        # A refused connection, retried 100 times within 60 s: the task is cancelled while it
        # sleeps between attempts, at once, and the loop kept running meanwhile.
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        async with tensorcompute.aio.Client(dead_target(), timeout=60, retries=100) as client:
            task = asyncio.ensure_future(client.gather([1], [0]))
            await asyncio.sleep(0.6)
            self.assertFalse(task.done())
            started = time.monotonic()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertLess(time.monotonic() - started, 0.5)
        ticker.cancel()
        self.assertGreater(ticks, 20)

    async def test_cancelled_calls_leave_the_others_and_the_client_working(self):
        rng = np.random.default_rng(5)
        params = rng.standard_normal((2000, 256)).astype(np.float32)  # 2 MiB
        ids = [rng.integers(0, 2000, size=500) for _ in range(30)]
        tasks = [asyncio.ensure_future(self.client.gather(params, i)) for i in ids]
        await asyncio.sleep(0)
        for task in tasks[::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for n, (result, i) in enumerate(zip(results, ids)):
            if n % 2 == 0:
                self.assertIsInstance(result, asyncio.CancelledError)
            else:
                self.assertBitsEqual(result, params[i])
        self.assertBitsEqual(await self.client.gather(params, ids[0]), params[ids[0]])
        self.assertEqual(await self.client.health(), "SERVING")


class RetryTest(AioTestCase):
    async def test_retries_back_off_then_give_up(self):
        async with tensorcompute.aio.Client(dead_target(), timeout=10, retries=3) as client:
            started = time.monotonic()
            await self.assertRpcError(grpc.StatusCode.UNAVAILABLE, "", client.gather([1], [0]))
            elapsed = time.monotonic() - started
        # three sleeps of at least 0.05 + 0.1 + 0.2 s, at most 0.1 + 0.2 + 0.4 s plus the calls
        self.assertGreaterEqual(elapsed, 0.35)
        self.assertLess(elapsed, 3)

    async def test_retries_stay_within_the_timeout(self):
        async with tensorcompute.aio.Client(dead_target(), timeout=1.0, retries=100) as client:
            started = time.monotonic()
            with self.assertRaises(TensorComputeError) as raised:
                await client.gather([1], [0])
            elapsed = time.monotonic() - started
        self.assertIn(raised.exception.code,
                      (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))
        # the first three sleeps (0.05-0.1, 0.1-0.2, 0.2-0.4 s) always fit in the second;
        # the fourth (0.4-0.8 s) is skipped when it would pass the deadline, so the call may
        # give up after 0.35 s of sleeps, and never runs much past its timeout
        self.assertGreaterEqual(elapsed, 0.35)
        self.assertLess(elapsed, 2.0)

    async def test_retries_reach_a_server_that_starts_late(self):
        target = dead_target()
        port = target.rsplit(":", 1)[1]
        async with tensorcompute.aio.Client(target, timeout=20, retries=20) as client:
            task = asyncio.ensure_future(client.gather([1, 2, 3], [2]))
            await asyncio.sleep(0.5)  # the first attempts are refused
            self.assertFalse(task.done())
            server = await asyncio.to_thread(
                ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{port}").__enter__)
            try:
                np.testing.assert_array_equal(await asyncio.wait_for(task, 20), [3])
            finally:
                server.__exit__(None, None, None)


class CompressionTest(LoopTestCase):
    """compression= on both clients: the same answers, and fewer bytes on the wire."""

    async def test_same_answers_compressed(self):
        rng = np.random.default_rng(9)
        table = rng.standard_normal((300, 16))
        words = np.array([bytes(rng.integers(0, 256, size=n, dtype=np.uint8))
                          for n in rng.integers(0, 40, size=90)], dtype=object).reshape(30, 3)
        ids = rng.integers(-300, 300, size=(20, 4))
        nd_ids = np.stack([rng.integers(-300, 300, size=7), rng.integers(-16, 16, size=7)], -1)
        bags, kwargs = rng.integers(0, 300, size=12), {"offsets": [0, 5, 5], "mode": "sqrtn"}
        want = (np.take(table, ids, axis=0), ref_gather_nd(table, nd_ids),
                np.take(words, [29, 0, -1], axis=0))
        want_bags = (await self.answers(None, table, words, ids, nd_ids, bags, kwargs))[3]
        for compression in ("gzip", "deflate", grpc.Compression.Gzip, "none"):
            with self.subTest(compression=str(compression)):
                got = await self.answers(compression, table, words, ids, nd_ids, bags, kwargs)
                for out, ref in zip(got, want + (want_bags, want_bags)):
                    self.assertEqual((out.dtype, out.shape), (ref.dtype, ref.shape))
                    if ref.dtype == object:
                        self.assertEqual(out.tolist(), ref.tolist())
                    else:
                        self.assertEqual(out.tobytes(), ref.tobytes())

    async def answers(self, compression, table, words, ids, nd_ids, bags, kwargs):
        """The same calls through an aio and a sync client with `compression`."""
        name = f"table_{compression}".replace(".", "_")
        async with tensorcompute.aio.Client(_server.target, compression=compression) as aio:
            with tensorcompute.Client(_server.target, compression=compression) as sync:
                await aio.put_tensor(name, table, chunk_bytes=4096, replace=True)
                try:
                    return (await aio.gather(table, ids),
                            sync.gather_nd(table, nd_ids),
                            await aio.gather(words, [29, 0, -1]),
                            await aio.embedding_bag(table, bags, **kwargs),
                            sync.embedding_bag(None, bags, params_name=name, **kwargs))
                finally:
                    sync.delete_tensor(name)

    async def test_what_is_sent_is_compressed(self):
        zeros = np.zeros((1024, 1024), np.float32)  # 4 MiB that gzip makes a few KiB
        with CountingProxy(_server.target) as proxy:
            sent = {}
            for compression in (None, "gzip", "deflate"):
                with tensorcompute.Client(proxy.target, compression=compression) as sync:
                    before = proxy.sent
                    np.testing.assert_array_equal(sync.gather(zeros, [3]), zeros[[3]])
                    sent["sync", compression] = proxy.sent - before
                async with tensorcompute.aio.Client(proxy.target,
                                                    compression=compression) as aio:
                    before = proxy.sent
                    np.testing.assert_array_equal(await aio.gather(zeros, [3]), zeros[[3]])
                    sent["aio", compression] = proxy.sent - before
        for (kind, compression), count in sent.items():
            with self.subTest(client=kind, compression=compression, sent=count):
                if compression is None:
                    self.assertGreater(count, zeros.nbytes)
                else:
                    self.assertLess(count, 256 << 10)


if __name__ == "__main__":
    unittest.main()
