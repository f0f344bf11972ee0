"""Tables on disk put by PutTensor with tier DISK (issue 43).

One server with --table_dir (a temporary directory) and a 4 MiB row cache takes the same random
table twice, in memory and on disk, in every storage kind (as-is, float16, int8-rowwise,
int8-rowwise-prequantized): random Gathers and EmbeddingBags answer byte for byte alike. The
table on disk is listed as such, holds its cache, not its rows, and leaves no named file in the
directory. Keyed tables on disk answer lookups by keys as in memory under every key policy,
take updates by keys and do not grow. The put's refusals: a string or sharded table, a GPU, an unknown tier, a tier
on a later message, a value its storage cannot hold (the same words as in memory), a server
without --table_dir (FAILED_PRECONDITION), one that cannot make files in it (start fails), and
files past --max_table_dir_bytes (RESOURCE_EXHAUSTED, room again once a table is deleted).
Row updates go through, and lookups beside them see each message whole. Uploading a table four times the cache grows the server's RSS by far
less than the table.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set.
"""

import json
import os
import subprocess
import tempfile
import threading
import unittest
import urllib.request

import grpc
import numpy as np

from prometheus_scrape import labels, scrape
from server_process import ServerProcess
from tensorcompute import Client, DiskInfo, TensorComputeError
from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc

MIB = 1 << 20
ROWS, DIM = 1 << 15, 64  # 8 MiB of float32
CACHE = 1 * MIB
SANITIZED = bool(os.environ.get("TC_SANITIZED"))
KINDS = ["as-is", "float16", "int8-rowwise", "int8-rowwise-prequantized"]


def prequantized(rng, rows, dim):
    table = np.empty((rows, dim + 8), dtype=np.uint8)
    table[:, :dim] = rng.integers(0, 256, (rows, dim), dtype=np.uint8)
    scale_bias = np.stack([rng.uniform(0.001, 0.1, rows), rng.uniform(-1, 1, rows)], axis=1)
    table[:, dim:] = scale_bias.astype(np.float32).view(np.uint8)
    return table


class DiskPutsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "tables")
        os.mkdir(cls.dir)
        cls.server = ServerProcess(f"--table_dir={cls.dir}", f"--table_cache_bytes={CACHE}",
                                   f"--max_table_dir_bytes={24 * MIB}")
        cls.server.__enter__()
        cls.client = Client(cls.server.target)
        rng = np.random.default_rng(4343)
        cls.table = rng.standard_normal((ROWS, DIM), dtype=np.float32)
        cls.quantized = prequantized(rng, ROWS, DIM)
        cls.infos = {}
        for kind in KINDS:
            array = cls.quantized if kind == "int8-rowwise-prequantized" else cls.table
            for tier in ["memory", "disk"]:
                cls.infos[kind, tier] = cls.client.put_tensor(f"{kind}-{tier}", array,
                                                              storage=kind, tier=tier)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def same(self, call, kind, **kwargs):
        """`call` on the table in memory and on disk gives the same bytes, or the same error."""
        try:
            want = call(None, params_name=f"{kind}-memory", **kwargs)
        except TensorComputeError as error:
            with self.assertRaises(TensorComputeError) as got:
                call(None, params_name=f"{kind}-disk", **kwargs)
            self.assertEqual((got.exception.code, str(got.exception.message)),
                             (error.code, str(error.message)))
            return
        got = call(None, params_name=f"{kind}-disk", **kwargs)
        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
        self.assertEqual(got.tobytes(), want.tobytes(), kind)

    def test_tables_on_disk_are_listed_with_their_file_and_cache(self):
        listed = {info.name: info for info in self.client.list_tensors()}
        for kind in KINDS:
            memory, disk = self.infos[kind, "memory"], self.infos[kind, "disk"]
            self.assertEqual(listed[f"{kind}-disk"].tier, "disk")
            self.assertEqual(listed[f"{kind}-memory"].tier, "memory")
            self.assertIsNone(memory.disk)
            self.assertEqual((disk.dtype, disk.shape, disk.storage),
                             (memory.dtype, memory.shape, memory.storage))
            self.assertIsInstance(disk.disk, DiskInfo)
            # The file holds the stored rows, what the table in memory holds.
            self.assertEqual(disk.disk.file_bytes, memory.bytes)
            self.assertEqual(disk.disk.file, os.path.join(self.dir, "(unnamed)"))
            self.assertLessEqual(disk.disk.cache_rows * (memory.bytes // ROWS), CACHE)
            self.assertLess(disk.bytes, 2 * CACHE)
        # The server's files are unnamed: nothing to clean up after it.
        self.assertEqual(os.listdir(self.dir), [])

    def test_random_gathers_answer_as_the_table_in_memory(self):
        rng = np.random.default_rng(1)
        for trial in range(24):
            shape = [(7,), (3, 5), (0,), (300,)][trial % 4]
            indices = rng.integers(-ROWS, ROWS, size=shape)
            if trial % 3 == 0 and indices.size:
                indices.flat[0] = indices.flat[-1]  # a repeat
            for kind in KINDS:
                self.same(self.client.gather, kind, indices=indices)
        self.same(self.client.gather, "as-is", indices=[ROWS])  # out of range: same words

    def test_random_bags_answer_as_the_table_in_memory(self):
        rng = np.random.default_rng(2)
        for trial in range(24):
            mode = ["sum", "mean", "max", "sqrtn"][trial % 4]
            n = int(rng.integers(0, 300))
            indices = rng.integers(0, ROWS, n)
            cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 20))))
            kwargs = dict(indices=indices, offsets=np.concatenate([[0], cuts]), mode=mode)
            if mode != "max" and trial % 3 == 0:
                kwargs["per_sample_weights"] = rng.standard_normal(n).astype(np.float32)
            for kind in KINDS:
                self.same(self.client.embedding_bag, kind, **kwargs)

    def test_updates_go_through(self):
        rows = np.array([5, ROWS - 1])
        values = np.full((2, DIM), 0.25, dtype=np.float32)
        for tier in ["memory", "disk"]:
            self.client.update_rows(f"float16-{tier}", rows, values)
        self.same(self.client.gather, "float16", indices=rows)
        got = self.client.gather(None, rows, params_name="float16-disk")
        self.assertTrue(np.all(got == 0.25))

    def test_concurrent_lookups_batched_together_each_get_their_rows(self):
        # Lookups that share a batch fetch their distinct rows together, a shared row read once:
        # each still gets exactly its own rows.
        errors = []

        def look(seed):
            rng = np.random.default_rng(seed)
            with Client(self.server.target) as client:
                for _ in range(15):
                    indices = rng.integers(0, 2048, int(rng.integers(1, 200)))
                    got = client.gather(None, indices, params_name="as-is-disk")
                    if got.tobytes() != self.table[indices].tobytes():
                        errors.append(seed)
                    bags = client.embedding_bag(None, indices, offsets=[0],
                                                params_name="as-is-disk", mode="max")
                    if bags.tobytes() != self.table[indices].max(axis=0,
                                                                 keepdims=True).tobytes():
                        errors.append(-seed)

        threads = [threading.Thread(target=look, args=(seed,)) for seed in range(1, 9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])

    def test_lookups_beside_updates_see_each_message_whole(self):
        # Every update message sets rows 0..63 to one value; a lookup of them, from the cache or
        # the file, sees one message's rows: never a torn row or a mix of two messages.
        self.client.put_tensor("torn", np.zeros((4096, DIM), np.float32), tier="disk")
        rows = np.arange(64)
        stop = threading.Event()
        seen, errors = set(), []

        def read():
            with Client(self.server.target) as reader:
                while not stop.is_set():
                    got = reader.gather(None, np.concatenate([rows, rows + 2048]),
                                        params_name="torn")
                    values = np.unique(got[:64])
                    if values.size != 1 or np.any(got[64:] != 0):
                        errors.append(values)
                    seen.add(float(values[0]))

        readers = [threading.Thread(target=read) for _ in range(2)]
        for thread in readers:
            thread.start()
        try:
            for k in range(1, 151):
                self.client.update_rows("torn", rows, np.full((64, DIM), k, np.float32))
        finally:
            stop.set()
            for thread in readers:
                thread.join()
            self.client.delete_tensor("torn")
        self.assertEqual(errors, [])
        self.assertGreater(len(seen), 2)

    def test_what_a_table_on_disk_cannot_be_is_refused(self):
        def refused(code, words, *args, **kwargs):
            with self.assertRaises(TensorComputeError) as error:
                self.client.put_tensor(*args, **kwargs)
            self.assertEqual(error.exception.code, code)
            self.assertIn(words, str(error.exception.message))

        invalid = grpc.StatusCode.INVALID_ARGUMENT
        refused(invalid, "tensor 's': a table on disk (tier DISK) is not DT_STRING", "s",
                np.array([b"a", b"b"], dtype=object), tier="disk")
        refused(invalid, "lives on the CPU, not on 'gpu'", "g", self.table[:8], device="gpu",
                tier="disk")
        refused(invalid, "is not sharded", "h", self.table[:8], shard=(0, 2, 16), tier="disk")
        # A value the storage cannot hold: the words of the table in memory.
        big = self.table[:16].copy()
        big[9, 3] = 1e6
        with self.assertRaises(TensorComputeError) as in_memory:
            self.client.put_tensor("f", big, storage="float16")
        refused(invalid, str(in_memory.exception.message), "f", big, storage="float16",
                tier="disk")
        bad = self.quantized[:16].copy()
        bad[11, DIM:DIM + 4] = np.frombuffer(np.float32(np.nan).tobytes(), dtype=np.uint8)
        with self.assertRaises(TensorComputeError) as in_memory:
            self.client.put_tensor("q", bad, storage="int8-rowwise-prequantized")
        self.assertIn("row 11 has scale nan", str(in_memory.exception.message))
        refused(invalid, str(in_memory.exception.message), "q", bad,
                storage="int8-rowwise-prequantized", tier="disk")
        with self.assertRaises(ValueError):
            self.client.put_tensor("t", self.table[:8], tier="tape")
        self.assertEqual({"f", "q", "s", "g", "h"} & {i.name for i in
                                                           self.client.list_tensors()}, set())

    def test_the_tier_is_checked_on_the_wire(self):
        with grpc.insecure_channel(self.server.target) as channel:
            stub = tensorcompute_pb2_grpc.TensorComputeStub(channel)
            first = pb.PutTensorRequest(name="w", dtype=pb.DT_FLOAT32, shape=[2, 2],
                                        tier=7, data=b"\0" * 16)
            with self.assertRaises(grpc.RpcError) as error:
                stub.PutTensor(iter([first]))
            self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("unknown tier 7; expected MEMORY (0) or DISK (1)",
                          error.exception.details())
            first = pb.PutTensorRequest(name="w", dtype=pb.DT_FLOAT32, shape=[2, 2],
                                        tier=pb.DISK, data=b"\0" * 8)
            later = pb.PutTensorRequest(offset=8, data=b"\0" * 8, tier=pb.DISK)
            with self.assertRaises(grpc.RpcError) as error:
                stub.PutTensor(iter([first, later]))
            self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("only the first PutTensor message may set", error.exception.details())

    def test_files_past_max_table_dir_bytes_are_refused_until_room_is_made(self):
        # 8 + 4 + 2.25 + 2.25 MiB of files are held, 24 MiB allowed: 8 MiB more do not fit.
        held = sum(self.infos[kind, "memory"].bytes for kind in KINDS)
        self.assertEqual(held, (8 + 4 + 2.25 + 2.25) * MIB)
        self.assertEqual(scrape(self.server.metrics_port)[
            ("tensorcompute_table_dir_bytes_held", labels())], held)
        extra = np.zeros((ROWS, DIM), dtype=np.float32)
        with self.assertRaises(TensorComputeError) as error:
            self.client.put_tensor("extra", extra, tier="disk")
        self.assertEqual(error.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("bytes on disk but", str(error.exception.message))
        self.assertIn("--max_table_dir_bytes", str(error.exception.message))
        self.client.put_tensor("spare", extra[: ROWS // 4], tier="disk")
        self.client.delete_tensor("spare")
        # Its file's share goes back once the file is closed: room for another.
        self.client.put_tensor("spare", extra[: ROWS // 4], tier="disk")
        self.client.delete_tensor("spare")


class KeyedDiskPutsTest(unittest.TestCase):
    """Keyed tables on disk: the key index in memory, the slots and the zero and default rows in
    the file. Every storage kind and key policy against the same keyed table in memory."""

    KEYED_ROWS, CAPACITY = 3000, 3100

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A cache of 64 KiB, a twelfth of the 0.8 MiB float32 table: lookups evict.
        cls.server = ServerProcess(f"--table_dir={cls.tmp.name}", "--table_cache_bytes=65536",
                                   "--http_listen=127.0.0.1:0")
        cls.server.__enter__()
        cls.client = Client(cls.server.target)
        rng = np.random.default_rng(4242)
        cls.keys = rng.choice(np.arange(-(1 << 40), 1 << 40, 1 << 20), cls.KEYED_ROWS,
                              replace=False).astype(np.int64)
        table = rng.standard_normal((cls.KEYED_ROWS, DIM), dtype=np.float32)
        quantized = prequantized(rng, cls.KEYED_ROWS, DIM)
        default = rng.standard_normal(DIM).astype(np.float32)
        q_default = prequantized(rng, 1, DIM)[0]
        for kind in KINDS:
            prequant = kind == "int8-rowwise-prequantized"
            for tier in ["memory", "disk"]:
                cls.client.put_tensor(f"{kind}-{tier}", quantized if prequant else table,
                                      storage=kind, tier=tier, keys=cls.keys, missing="zero",
                                      default_row=q_default if prequant else default,
                                      capacity=cls.CAPACITY)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    same = DiskPutsTest.same

    def random_keys(self, rng, n):
        """Keys of the table, and some it lacks."""
        keys = rng.choice(self.keys, n)
        absent = rng.random(n) < 0.1
        keys[absent] = rng.integers(1, 1 << 19, int(absent.sum())) * 2 + 1  # odd: never a key
        return keys

    def test_the_file_holds_the_slots_and_the_hidden_rows(self):
        for kind in KINDS:
            listed = {i.name: i for i in self.client.list_tensors()}
            memory, disk = listed[f"{kind}-memory"], listed[f"{kind}-disk"]
            self.assertEqual(disk.keyed, memory.keyed)
            self.assertEqual(disk.shape, memory.shape)
            row_bytes = disk.disk.file_bytes // (self.CAPACITY + 2)
            self.assertEqual(disk.disk.file_bytes, (self.CAPACITY + 2) * row_bytes)

    def test_lookups_by_keys_answer_as_the_table_in_memory_under_every_policy(self):
        rng = np.random.default_rng(7)
        for trial in range(16):
            keys = self.random_keys(rng, [1, 50, 400, 0][trial % 4])
            missing = [None, "zero", "default", "error"][trial % 4]
            for kind in KINDS:
                self.same(self.client.gather, kind, keys=keys, missing=missing)
                cuts = np.sort(rng.integers(0, keys.size + 1, 5))
                bags = dict(keys=keys, offsets=np.concatenate([[0], cuts]),
                            mode=["sum", "mean", "max", "sqrtn"][trial % 4],
                            missing=[None, "skip", "default", "zero"][trial % 4])
                self.same(self.client.embedding_bag, kind, **bags)
        # By indices too: the slots, the free ones reading zeros.
        indices = rng.integers(-self.CAPACITY, self.CAPACITY, 300)
        for kind in KINDS:
            self.same(self.client.gather, kind, indices=indices)
        self.same(self.client.gather, "as-is", indices=[self.CAPACITY])  # past the slots

    def test_kserve_over_http_looks_up_keys_as_the_table_in_memory(self):
        def infer(model, keys, op):
            shape = [len(keys)] if op == "gather" else [1, len(keys)]
            body = {"inputs": [{"name": "keys", "datatype": "INT64", "shape": shape,
                                "data": keys}],
                    "parameters": {"op": op, "missing": "default", "return_found": True}}
            request = urllib.request.Request(
                f"http://127.0.0.1:{self.server.http_port}/v2/models/{model}/infer",
                data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())["outputs"]

        keys = [int(k) for k in self.keys[[5, 70, 5, 2999]]] + [12345]  # the last one absent
        for op in ("gather", "embedding_bag"):
            for kind in KINDS:
                got = infer(f"{kind}-disk", keys, op)
                self.assertEqual(got, infer(f"{kind}-memory", keys, op), (op, kind))
                self.assertEqual(got[-1]["data"], [True] * 4 + [False])

    def test_updates_by_keys_go_through_and_a_full_table_on_disk_does_not_grow(self):
        new_keys = np.array([11, 13, 15], dtype=np.int64)
        values = np.full((3, DIM), 0.5, dtype=np.float32)
        for tier in ["memory", "disk"]:
            self.client.update_rows(f"float16-{tier}", keys=new_keys, values=values,
                                    delete_keys=self.keys[:2])
        probe = np.concatenate([new_keys, self.keys[:4]])
        self.same(self.client.gather, "float16", keys=probe)
        got = self.client.gather(None, keys=new_keys, params_name="float16-disk")
        self.assertTrue(np.all(got == 0.5))
        # 100 free slots, 3 taken, 2 freed: 99 more keys fit, 100 do not.
        more = np.arange(1001, 1201, 2, dtype=np.int64)
        with self.assertRaises(TensorComputeError) as error:
            self.client.update_rows("float16-disk", keys=more,
                                    values=np.zeros((100, DIM), np.float32))
        self.assertEqual(error.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("a table on disk does not grow", str(error.exception.message))
        self.client.update_rows("float16-disk", keys=more[:99],
                                values=np.ones((99, DIM), np.float32))
        got = self.client.gather(None, keys=more[:99], params_name="float16-disk")
        self.assertTrue(np.all(got == 1.0))


class DiskPutServerTest(unittest.TestCase):
    def test_a_server_without_table_dir_refuses_the_tier(self):
        with ServerProcess() as server, Client(server.target) as client:
            with self.assertRaises(TensorComputeError) as error:
                client.put_tensor("t", np.zeros((4, 4), np.float32), tier="disk")
            self.assertEqual(error.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("start it with --table_dir", str(error.exception.message))

    def test_a_table_dir_without_room_for_files_fails_the_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "missing")
            run = subprocess.run([os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                                  "--metrics_listen=127.0.0.1:0", f"--table_dir={missing}"],
                                 capture_output=True, text=True, timeout=60)
            self.assertNotEqual(run.returncode, 0)
            self.assertIn(f"--table_dir: table directory '{missing}'", run.stdout + run.stderr)

    def test_uploading_a_table_larger_than_its_cache_costs_the_cache(self):
        if SANITIZED:
            self.skipTest("sanitizers' shadow memory is not the server's")
        rows = 1 << 18  # 64 MiB of float32 rows of 256 B; a 4 MiB cache
        with tempfile.TemporaryDirectory() as tmp, \
                ServerProcess(f"--table_dir={tmp}", f"--table_cache_bytes={4 * MIB}",
                              "--cpu_threads=2") as server, Client(server.target) as client:
            client.list_tensors()
            before = server.status_kib("VmRSS")
            path = os.path.join(tmp, "source.npy")
            table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                              shape=(rows, DIM))
            for begin in range(0, rows, 1 << 15):
                table[begin:begin + (1 << 15)] = begin + np.arange(1 << 15)[:, None]
            table.flush()
            info = client.put_tensor("big", np.load(path, mmap_mode="r"), tier="disk")
            peak = server.status_kib("VmHWM")
            print(f"RSS {before // 1024} MiB before the upload of a {rows * DIM * 4 // MIB} MiB "
                  f"table on disk, peak {peak // 1024} MiB after", flush=True)
            self.assertEqual(info.disk.file_bytes, rows * DIM * 4)
            # The cache (4 MiB), the messages in flight and the writer's buffer; never the table.
            self.assertLess((peak - before) / 1024, 32)
            sample = np.array([0, 1, 77777, rows - 1])
            got = client.gather(None, sample, params_name="big")
            self.assertEqual(got.tobytes(), np.asarray(table[sample]).tobytes())

    def test_preloaded_kinds_the_server_converts_are_written_under_table_dir(self):
        rng = np.random.default_rng(44)
        table = rng.standard_normal((4096, 32)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "table.npy")
            np.save(path, table)
            tables = os.path.join(tmp, "tables")
            os.mkdir(tables)
            flags = (f"--preload=h={path}:float16:disk,q={path}:int8-rowwise:disk",
                     f"--table_cache_bytes={64 << 10}")
            with ServerProcess(f"--table_dir={tables}", *flags) as server, \
                    Client(server.target) as client:
                self.assertEqual(os.listdir(tables), [])
                for kind, name in [("float16", "h"), ("int8-rowwise", "q")]:
                    info = client.put_tensor(f"{name}-memory", table, storage=kind)
                    listed = {i.name: i for i in client.list_tensors()}[name]
                    self.assertEqual((listed.tier, listed.storage), ("disk", kind))
                    self.assertEqual(listed.disk.file_bytes, info.bytes)
                    indices = rng.integers(-4096, 4096, 500)
                    want = client.gather(None, indices, params_name=f"{name}-memory")
                    got = client.gather(None, indices, params_name=name)
                    self.assertEqual(got.tobytes(), want.tobytes(), kind)
            # Without a --table_dir there is nowhere to write the converted rows.
            run = subprocess.run([os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                                  "--metrics_listen=127.0.0.1:0", *flags],
                                 capture_output=True, text=True, timeout=60)
            self.assertNotEqual(run.returncode, 0)
            self.assertIn("float16 needs a converted copy, which the server writes under "
                          "--table_dir", run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
