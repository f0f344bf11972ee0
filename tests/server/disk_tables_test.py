"""Tables on disk (issue 43): rows left in their .npy behind a small row cache.

One server holds the same 64 MiB table twice, in memory (--preload mem=PATH) and on disk
(--preload disk=PATH:disk) behind a 4 MiB cache (--table_cache_bytes), and an 8-bit row-wise
table prequantized in its file likewise. Random Gathers and EmbeddingBags (every mode, offsets,
weights, padding_idx, negative and repeated indices) answer byte for byte the same on both, bad
indices with the same errors, over the native gRPC API and KServe over HTTP; GatherNd and other
axes are refused with the rule's words; each
answer's trailing metadata says its cache hits and misses; a skewed trace hits the cache. A
second server, with the disk table only, reads every row and its peak RSS grows by far less
than the table. Row updates go through to the file (read back after a restart). A file
truncated under the server answers UNAVAILABLE naming the table, and the server goes on
serving.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set.
"""

import json
import os
import tempfile
import unittest
import urllib.request

import grpc
import numpy as np

from prometheus_scrape import labels, scrape
from server_process import ServerProcess
from tensorcompute import Client, TensorComputeError, _common
from tensorcompute.v1 import tensorcompute_pb2_grpc

MIB = 1 << 20
ROWS, DIM = 1 << 18, 64           # 64 MiB of float32, rows of 256 B
Q_ROWS, Q_DIM = 1 << 15, 56       # 8-bit row-wise: rows of 56 codes + scale and bias
CACHE = 4 * MIB
SANITIZED = bool(os.environ.get("TC_SANITIZED"))


def write_tables(tmp):
    rng = np.random.default_rng(43)
    path = os.path.join(tmp, "table.npy")
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ROWS, DIM))
    for begin in range(0, ROWS, 1 << 15):
        table[begin:begin + (1 << 15)] = rng.standard_normal((1 << 15, DIM), dtype=np.float32)
    table.flush()
    del table
    quantized = np.empty((Q_ROWS, Q_DIM + 8), dtype=np.uint8)
    quantized[:, :Q_DIM] = rng.integers(0, 256, (Q_ROWS, Q_DIM), dtype=np.uint8)
    scale_bias = np.stack([rng.uniform(0.001, 0.1, Q_ROWS), rng.uniform(-1, 1, Q_ROWS)], axis=1)
    quantized[:, Q_DIM:] = scale_bias.astype(np.float32).view(np.uint8)
    q_path = os.path.join(tmp, "quantized.npy")
    np.save(q_path, quantized)
    return path, q_path


class DiskTablesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path, cls.q_path = write_tables(cls.tmp.name)
        cls.server = ServerProcess(
            f"--preload=mem={cls.path},disk={cls.path}:disk,"
            f"qmem={cls.q_path}:int8-rowwise-prequantized,"
            f"qdisk={cls.q_path}:int8-rowwise-prequantized:disk",
            f"--table_cache_bytes={CACHE}", "--http_listen=127.0.0.1:0")
        cls.server.__enter__()
        cls.client = Client(cls.server.target)
        cls.channel = grpc.insecure_channel(cls.server.target)
        cls.stub = tensorcompute_pb2_grpc.TensorComputeStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.client.close()
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def same(self, call, memory, disk, **kwargs):
        """`call` on both tables gives the same bytes, or the same error."""
        try:
            want = call(None, params_name=memory, **kwargs)
        except TensorComputeError as error:
            with self.assertRaises(TensorComputeError) as got:
                call(None, params_name=disk, **kwargs)
            self.assertEqual(got.exception.code, error.code)
            self.assertEqual(str(got.exception.message), str(error.message))
            return None
        got = call(None, params_name=disk, **kwargs)
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.shape, want.shape)
        self.assertEqual(got.tobytes(), want.tobytes())
        return got

    def test_tables_on_disk_are_listed_with_their_whole_shape(self):
        infos = {info.name: info for info in self.client.list_tensors()}
        self.assertEqual(tuple(infos["disk"].shape), (ROWS, DIM))
        self.assertEqual(tuple(infos["qdisk"].shape), (Q_ROWS, Q_DIM))
        # What it holds in memory is its cache, not its rows.
        self.assertLess(infos["disk"].bytes, CACHE * 2)

    def test_random_gathers_answer_as_the_table_in_memory(self):
        rng = np.random.default_rng(1)
        for trial in range(40):
            shape = [(7,), (3, 5), (0,), (2, 0, 3), (200,)][trial % 5]
            indices = rng.integers(-ROWS, ROWS, size=shape)
            if trial % 3 == 0 and indices.size:
                indices.flat[0] = indices.flat[-1]  # a repeat
            dtype = np.int32 if trial % 2 else np.int64
            self.same(self.client.gather, "mem", "disk", indices=indices.astype(dtype))
            q = rng.integers(-Q_ROWS, Q_ROWS, size=shape).astype(dtype)
            self.same(self.client.gather, "qmem", "qdisk", indices=q)

    def test_random_bags_answer_as_the_table_in_memory(self):
        rng = np.random.default_rng(2)
        for trial in range(40):
            mode = ["sum", "mean", "max", "sqrtn"][trial % 4]
            n = int(rng.integers(0, 300))
            indices = rng.integers(0, ROWS, n)
            cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 20))))
            offsets = np.concatenate([[0], cuts]).astype(np.int64)
            kwargs = dict(indices=indices, offsets=offsets, mode=mode)
            if trial % 5 == 1 and n:
                kwargs["padding_idx"] = int(indices[0]) - ROWS  # negative, and used
            if mode != "max" and trial % 3 == 0:
                kwargs["per_sample_weights"] = rng.standard_normal(n).astype(np.float32)
            self.same(self.client.embedding_bag, "mem", "disk", **kwargs)
            q = dict(kwargs, indices=rng.integers(0, Q_ROWS, n))
            q.pop("padding_idx", None)
            self.same(self.client.embedding_bag, "qmem", "qdisk", **q)
        fixed = rng.integers(-ROWS, ROWS, (16, 8))
        self.same(self.client.embedding_bag, "mem", "disk", indices=fixed, mode="mean")

    def test_kserve_over_http_answers_as_the_table_in_memory(self):
        def infer(model, indices, op):
            # A Gather's rows; a pooled lookup's one fixed bag of them.
            shape = [len(indices)] if op == "gather" else [1, len(indices)]
            body = {"inputs": [{"name": "indices", "datatype": "INT64", "shape": shape,
                                "data": indices}],
                    "parameters": {"op": op}}
            request = urllib.request.Request(
                f"http://127.0.0.1:{self.server.http_port}/v2/models/{model}/infer",
                data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())["outputs"][0]["data"]

        indices = [5, ROWS - 1, -3, 5, 77777]
        for op in ("gather", "embedding_bag"):
            self.assertEqual(infer("disk", indices, op), infer("mem", indices, op), op)

    def test_bad_indices_give_the_same_errors(self):
        for indices in ([1, ROWS, 2], [-ROWS - 1], [[0, 1], [2, 1 << 40]]):
            got = self.same(self.client.gather, "mem", "disk", indices=np.array(indices))
            self.assertIsNone(got)
        self.assertIsNone(self.same(self.client.embedding_bag, "mem", "disk",
                                    indices=np.array([3, 4, ROWS + 9]),
                                    offsets=np.array([0, 2])))

    def test_what_a_table_on_disk_does_not_serve_is_refused_in_its_words(self):
        with self.assertRaises(TensorComputeError) as error:
            self.client.gather_nd(None, np.array([[1], [2]]), params_name="disk")
        self.assertEqual(error.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("tensor 'disk' is on disk: GatherNd is not served", error.exception.message)
        with self.assertRaises(TensorComputeError) as error:
            self.client.gather(None, np.array([1, 2]), axis=1, params_name="disk")
        self.assertIn("tensor 'disk' is on disk: Gather is served on axis 0",
                      error.exception.message)

    def test_answers_carry_their_cache_hits_and_misses(self):
        rows = np.arange(1000, 1100, dtype=np.int64)
        request = _common.gather_request(None, np.concatenate([rows, rows]), None, 0, "disk")
        first = self.stub.Gather.with_call(request)[1]
        trailers = dict(first.trailing_metadata())
        hits, misses = int(trailers["tc-disk-hits"]), int(trailers["tc-disk-misses"])
        self.assertEqual(hits + misses, 100)  # distinct rows, each counted once
        self.assertGreater(misses, 0)
        # Asked for again and again, they stay cached (admission counts them frequent).
        for _ in range(3):
            again = dict(self.stub.Gather.with_call(request)[1].trailing_metadata())
        self.assertEqual(int(again["tc-disk-hits"]) + int(again["tc-disk-misses"]), 100)
        self.assertGreaterEqual(int(again["tc-disk-hits"]), 90)
        # A table in memory says nothing of a disk.
        plain = _common.gather_request(None, rows, None, 0, "mem")
        self.assertNotIn("tc-disk-hits", dict(self.stub.Gather.with_call(plain)[1].trailing_metadata()))


    def test_metrics_count_each_tables_hits_misses_and_reads(self):
        before = scrape(self.server.metrics_port)
        table = labels(tensor="qdisk")
        rows = np.arange(500, 564, dtype=np.int64)
        for _ in range(4):
            self.client.gather(None, rows, params_name="qdisk")
        after = scrape(self.server.metrics_port)

        def grew(name):
            return after.get((name, table), 0) - before.get((name, table), 0)

        self.assertEqual(grew("tensorcompute_disk_cache_hits_total") +
                         grew("tensorcompute_disk_cache_misses_total"), 4 * 64)
        self.assertGreater(grew("tensorcompute_disk_cache_hits_total"), 0)
        misses = grew("tensorcompute_disk_cache_misses_total")
        self.assertEqual(grew("tensorcompute_disk_read_seconds_count"), misses)
        self.assertGreaterEqual(grew("tensorcompute_disk_read_bytes_total"), misses * 4096)
        self.assertGreater(after[("tensorcompute_disk_cached_rows", table)], 0)
        # The cache holds at most the table: 2 MiB of its rows, beside their bookkeeping.
        cache_rows = min(CACHE // (Q_DIM + 8) // 8 * 8, Q_ROWS)
        cache_bytes = after[("tensorcompute_disk_cache_bytes", table)]
        self.assertGreaterEqual(cache_bytes, cache_rows * (Q_DIM + 8))
        self.assertLessEqual(cache_bytes, cache_rows * (Q_DIM + 8 + 36))
        self.assertNotIn(("tensorcompute_disk_cache_hits_total", labels(tensor="mem")), after)


class DiskTableMemoryAndErrorsTest(unittest.TestCase):
    def test_reading_every_row_costs_the_cache_not_the_table(self):
        if SANITIZED:
            self.skipTest("sanitizers' shadow memory is not the server's")
        with tempfile.TemporaryDirectory() as tmp:
            path, _ = write_tables(tmp)
            with ServerProcess(f"--preload=disk={path}:disk", f"--table_cache_bytes={CACHE}",
                               "--cpu_threads=2") as server, Client(server.target) as client:
                client.gather(None, [0], params_name="disk")
                before = server.status_kib("VmRSS")
                step = 1 << 14
                mapped = np.load(path, mmap_mode="r")
                for begin in range(0, ROWS, step):
                    rows = np.arange(begin, begin + step)
                    got = client.gather(None, rows, params_name="disk")
                    if begin % (1 << 16) == 0:
                        self.assertEqual(got.tobytes(), np.asarray(mapped[rows]).tobytes())
                peak = server.status_kib("VmHWM")
                grown_mib = (peak - before) / 1024
                print(f"RSS {before // 1024} MiB before a scan of the {ROWS * DIM * 4 // MIB} MiB"
                      f" table, peak {peak // 1024} MiB after", flush=True)
                # The cache (4 MiB), a request's staged rows and answer (4 MiB each), the
                # allocator's slack; never the table (64 MiB).
                self.assertLess(grown_mib, 32)

    def test_updates_go_through_to_the_file_and_survive_a_restart(self):
        with tempfile.TemporaryDirectory() as tmp:
            path, _ = write_tables(tmp)
            rows = np.array([3, 70000, ROWS - 1])
            values = np.arange(3 * DIM, dtype=np.float32).reshape(3, DIM)
            flags = (f"--preload=disk={path}:disk", f"--table_cache_bytes={CACHE}")
            with ServerProcess(*flags) as server, Client(server.target) as client:
                before = client.gather(None, [2, 3, 4], params_name="disk")
                for _ in range(3):  # row 3 cached, the others not
                    client.gather(None, [3], params_name="disk")
                sequence = client.update_rows("disk", indices=rows, values=values)
                self.assertEqual(sequence, 1)
                got = client.gather(None, rows, params_name="disk", min_sequence=sequence)
                np.testing.assert_array_equal(got, values)
                near = client.gather(None, [2, 4], params_name="disk")
                np.testing.assert_array_equal(near, before[[0, 2]])  # the neighbours stay
            on_disk = np.load(path, mmap_mode="r")
            np.testing.assert_array_equal(on_disk[rows], values)
            with ServerProcess(*flags) as server, Client(server.target) as client:
                np.testing.assert_array_equal(client.gather(None, rows, params_name="disk"),
                                              values)

    def test_a_lookup_of_too_many_distinct_rows_is_refused_before_it_stages_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            path, _ = write_tables(tmp)
            with ServerProcess(f"--preload=disk={path}:disk", f"--table_cache_bytes={CACHE}",
                               f"--max_output_bytes={8 * MIB}") as server, \
                    Client(server.target) as client:
                # 40,000 distinct rows of 256 B: 10 MiB staged for a 256 B answer.
                many = np.random.default_rng(5).permutation(ROWS)[:40000]
                with self.assertRaises(TensorComputeError) as error:
                    client.embedding_bag(None, many, offsets=[0], params_name="disk")
                self.assertEqual(error.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("table 'disk' on disk: the lookup reads 40000 distinct rows, "
                              "10240000 bytes staged, over the limit of", error.exception.message)
                # As many indices over few rows stage few: served.
                few = np.resize(many[:100], 40000)
                got = client.embedding_bag(None, few, offsets=[0], params_name="disk")
                mapped = np.load(path, mmap_mode="r")
                want = np.asarray(mapped[many[:100]], dtype=np.float64).sum(axis=0) * 400
                np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-2)

    def test_a_file_truncated_under_the_server_is_unavailable_and_the_server_stays_up(self):
        with tempfile.TemporaryDirectory() as tmp:
            path, _ = write_tables(tmp)
            small = os.path.join(tmp, "small.npy")
            np.save(small, np.arange(12, dtype=np.float32).reshape(4, 3))
            with ServerProcess(f"--preload=disk={path}:disk,small={small}",
                               f"--table_cache_bytes={CACHE}") as server, \
                    Client(server.target) as client:
                client.gather(None, [5], params_name="disk")
                os.truncate(path, os.path.getsize(path) // 2)
                with self.assertRaises(TensorComputeError) as error:
                    client.gather(None, [ROWS - 1, 7], params_name="disk")
                self.assertEqual(error.exception.code, grpc.StatusCode.UNAVAILABLE)
                self.assertIn("table 'disk' on disk: table file", error.exception.message)
                self.assertIn("changed under the server", error.exception.message)
                np.testing.assert_array_equal(client.gather(None, [3, 0], params_name="small"),
                                              np.arange(12, dtype=np.float32).reshape(4, 3)[[3, 0]])


if __name__ == "__main__":
    unittest.main()
