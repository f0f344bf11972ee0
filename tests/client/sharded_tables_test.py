"""Tables sharded by row ranges across servers (issue 25), end to end on 127.0.0.1.

Three shards of table T, shard 0 with a second replica, each server capped (--max_resident_bytes)
at 2/5 of T: T is 2.5 times what any one of them may hold. Each loads its rows with
`--preload T=PATH.npy --shard_index=I --shard_count=3` and routes the others to its
--shard_peers. Two compact tables (float16, int8 row-wise) are uploaded shard by shard with
put_tensor(shard=...). A fourth server, with a larger cap, holds every table whole: the
unsharded answer.

- Through each of the four replicas, 10,000 random index values of every kind (Gather of
  axis 0 with negative and scalar indices, GatherNd of depth 1 and 2, EmbeddingBag in every
  mode with offsets, weights and padding_idx, on every storage kind) answer byte for byte what
  the unsharded server answers.
- Bad indices get the unsharded error, word for word; another axis is INVALID_ARGUMENT.
- ListTensors shows each shard; the router's metrics count its sub-calls by shard.

Needs $TC_SERVER_BINARY and the `tensorcompute` package (ctest's python_client.install).
"""

import json
import os
import subprocess
import tempfile
import unittest
import urllib.request

import numpy as np

from tensorcompute import Client, Shard, TensorComputeError, shard_rows
from prometheus_scrape import labels, scrape
from replica_answers import ReplicaAnswers
from reserved_ports import ReservedPorts
from server_process import ServerProcess

ROWS, DIM = 40960, 40  # 6.25 MiB of float32
CAP = (5 << 20) // 2  # each server's --max_resident_bytes: T is 2.5x larger
SHARDS = 3
COMPACT_ROWS, COMPACT_DIM = 6000, 24
LOOKUPS = 10_000  # index values per kind, through each replica

_servers = {}  # name -> ServerProcess
_clients = {}  # name -> Client
_tables = {}  # name -> the float32 table (what lookups on it mean)
_tmp = None
REPLICAS = ("s0", "s0b", "s1", "s2")
_ports = {}  # replica name -> its port
_reservation = None  # those ports, held until the module ends


def setUpModule():
    global _tmp, _reservation
    _tmp = tempfile.TemporaryDirectory()
    rng = np.random.default_rng(25)
    table = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    path = os.path.join(_tmp.name, "t.npy")
    np.save(path, table)
    _tables["T"] = table
    ports = _ports
    _reservation = ReservedPorts(len(REPLICAS))
    ports.update(zip(REPLICAS, _reservation.numbers))
    peers = ",".join([f"ipv4:127.0.0.1:{ports['s0']}|127.0.0.1:{ports['s0b']}",
                      f"ipv4:127.0.0.1:{ports['s1']}", f"ipv4:127.0.0.1:{ports['s2']}"])
    for name, index in (("s0", 0), ("s0b", 0), ("s1", 1), ("s2", 2)):
        server = ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{ports[name]}",
                               f"--max_resident_bytes={CAP}", f"--preload=T={path}",
                               f"--shard_index={index}", f"--shard_count={SHARDS}",
                               f"--shard_peers={peers}", "--http_listen=127.0.0.1:0")
        _servers[name] = server.__enter__()
        _clients[name] = Client(server.target, timeout=60.0)
    whole = ServerProcess("--cpu_threads=1", f"--preload=T={path}", "--http_listen=127.0.0.1:0")
    _servers["whole"] = whole.__enter__()
    _clients["whole"] = Client(whole.target, timeout=60.0)
    # The compact tables, uploaded shard by shard (and whole to the reference).
    for name, storage in (("C16", "float16"), ("C8", "int8-rowwise")):
        values = rng.standard_normal((COMPACT_ROWS, COMPACT_DIM)).astype(np.float32)
        _clients["whole"].put_tensor(name, values, storage=storage)
        _tables[name] = _clients["whole"].gather(None, np.arange(COMPACT_ROWS), params_name=name)
        for server, index in (("s0", 0), ("s0b", 0), ("s1", 1), ("s2", 2)):
            begin, end = shard_rows(COMPACT_ROWS, SHARDS, index)
            _clients[server].put_tensor(name, values[begin:end], storage=storage,
                                        shard=(index, SHARDS, COMPACT_ROWS))


def tearDownModule():
    for client in _clients.values():
        client.close()
    for server in _servers.values():
        server.__exit__(None, None, None)
    if _reservation is not None:
        _reservation.close()
    if _tmp is not None:
        _tmp.cleanup()



def random_rows(rng, rows, shape, dtype):
    """Index values in [-rows, rows): negative ones count from the end."""
    return rng.integers(-rows, rows, size=shape).astype(dtype)


class ShardedTablesTest(ReplicaAnswers, unittest.TestCase):
    clients = _clients

    def test_shards_are_listed(self):
        for name, index in (("s0", 0), ("s0b", 0), ("s1", 1), ("s2", 2)):
            infos = {info.name: info for info in _clients[name].list_tensors()}
            self.assertEqual(infos["T"].shard, Shard(index, SHARDS, ROWS))
            self.assertEqual(infos["T"].shape, (ROWS, DIM))
            begin, end = shard_rows(ROWS, SHARDS, index)
            self.assertEqual(infos["T"].bytes, (end - begin) * DIM * 4)
            self.assertLess(infos["T"].bytes, CAP)
            self.assertEqual(infos["C8"].shard, Shard(index, SHARDS, COMPACT_ROWS))
        self.assertIsNone(_clients["whole"].list_tensors()[0].shard)

    def test_gather_matches_unsharded(self):
        rng = np.random.default_rng(1)
        for replica in REPLICAS:
            for name in ("T", "C16", "C8"):
                rows = _tables[name].shape[0]
                sent = 0
                while sent < LOOKUPS:
                    shape = [(), (int(rng.integers(0, 40)),),
                             (int(rng.integers(1, 9)), int(rng.integers(1, 60)))][rng.integers(3)]
                    indices = random_rows(rng, rows, shape, (np.int32, np.int64)[rng.integers(2)])
                    got, want = self.both(replica, "gather", None, indices, params_name=name)
                    self.same(got, want, f"{replica} {name} {indices.shape}")
                    sent += max(1, indices.size)

    def test_gather_nd_matches_unsharded(self):
        rng = np.random.default_rng(2)
        for replica in REPLICAS:
            for depth in (1, 2):
                sent = 0
                while sent < LOOKUPS:
                    n = int(rng.integers(0, 120))
                    indices = np.stack([random_rows(rng, ROWS, n, np.int64),
                                        random_rows(rng, DIM, n, np.int64)][:depth], axis=-1)
                    got, want = self.both(replica, "gather_nd", None, indices, params_name="T")
                    self.same(got, want, f"{replica} depth {depth}")
                    sent += max(1, n)

    def test_embedding_bag_matches_unsharded(self):
        rng = np.random.default_rng(3)
        for replica in REPLICAS:
            for name in ("T", "C16", "C8"):
                rows = _tables[name].shape[0]
                for mode in ("sum", "mean", "max", "sqrtn"):
                    sent = 0
                    while sent < LOOKUPS // 4:
                        bags = int(rng.integers(0, 40))
                        sizes = rng.integers(0, 12, size=bags)
                        # Repeated rows, so that fetching each once is exercised.
                        pool = random_rows(rng, rows, int(rng.integers(1, 50)), np.int64)
                        indices = pool[rng.integers(0, len(pool), int(sizes.sum()))]
                        indices = indices.astype((np.int32, np.int64)[rng.integers(2)])
                        ends = np.cumsum(np.concatenate([[0], sizes])).astype(np.int64)
                        kwargs = {"mode": mode, "include_last_offset": bool(rng.integers(2))}
                        kwargs["offsets"] = ends if kwargs["include_last_offset"] else ends[:-1]
                        if mode != "max" and rng.integers(2):
                            kwargs["per_sample_weights"] = rng.uniform(
                                0.5, 1.5, indices.shape).astype(np.float32)
                        if rng.random() < 0.4:
                            kwargs["padding_idx"] = int(pool[rng.integers(len(pool))])
                        got, want = self.both(replica, "embedding_bag", None, indices,
                                              params_name=name, **kwargs)
                        self.same(got, want, f"{replica} {name} {mode} {kwargs}")
                        sent += max(1, indices.size)
                # Fixed-size bags (rank-2 indices) too.
                indices = random_rows(rng, rows, (17, 5), np.int64)
                got, want = self.both(replica, "embedding_bag", None, indices,
                                      params_name=name, mode="mean")
                self.same(got, want, f"{replica} {name} fixed bags")

    def test_kserve_http_answers_as_the_unsharded_server(self):
        # What curl and tritonclient.http send: KServe v2 JSON, the table as a model.
        rng = np.random.default_rng(6)

        def infer(server, model, inputs, parameters):
            body = json.dumps({"inputs": inputs, "parameters": parameters}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{_servers[server].http_port}/v2/models/{model}/infer",
                data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())["outputs"]

        for replica in REPLICAS:
            for name in ("T", "C8"):
                rows = _tables[name].shape[0]
                ids = rng.integers(-rows, rows, size=37).tolist()
                cases = [
                    ([{"name": "indices", "shape": [37], "datatype": "INT64", "data": ids}], {}),
                    ([{"name": "indices", "shape": [37], "datatype": "INT64", "data": ids},
                      {"name": "offsets", "shape": [3], "datatype": "INT64",
                       "data": [0, 5, 20]}], {"op": "embedding_bag", "mode": "mean"}),
                ]
                if name == "T":
                    cases.append(([{"name": "indices", "shape": [37, 1], "datatype": "INT64",
                                    "data": ids}], {"op": "gather_nd"}))
                for inputs, parameters in cases:
                    got = infer(replica, name, inputs, parameters)
                    self.assertEqual(got, infer("whole", name, inputs, parameters),
                                     f"{replica} {name} {parameters}")
                got = np.array(infer(replica, name, cases[0][0], {})[0]["data"], np.float32)
                self.assertEqual(got.tobytes(), _tables[name][ids].tobytes())

    def test_bad_indices_get_the_unsharded_error(self):
        cases = [
            ("gather", (None, np.array([[1, 2], [ROWS, 0]])), {}),
            ("gather", (None, np.array([-ROWS - 1])), {}),
            ("gather_nd", (None, np.array([[5, 1], [ROWS - 1, DIM]])), {}),
            ("embedding_bag", (None, np.array([3, ROWS + 7, 1])),
             {"offsets": np.array([0, 1])}),
        ]
        for replica in REPLICAS:
            for method, args, kwargs in cases:
                got, want = self.both(replica, method, *args, params_name="T", **kwargs)
                self.assertIsInstance(want, tuple, method)
                self.assertEqual(got, want, f"{replica} {method}")

    def test_cli_puts_a_table_shard_by_shard(self):
        rng = np.random.default_rng(5)
        table = rng.standard_normal((1000, 6)).astype(np.float64)
        path = os.path.join(_tmp.name, "cli.npy")
        np.save(path, table)
        targets = ",".join([f"127.0.0.1:{_ports['s0']}|127.0.0.1:{_ports['s0b']}",
                            f"127.0.0.1:{_ports['s1']}", f"127.0.0.1:{_ports['s2']}"])
        proc = subprocess.run([os.environ["TC_CLI_BINARY"], "put", "CLI", "--input", path,
                               "--shards", "3", "--targets", targets],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(len(lines), 4, proc.stdout)  # shard 0 on two replicas
        self.assertIn("stored shard 2 of 3 (rows [668, 1000))", lines[3])
        self.assertIn("shard 2 of 3", lines[3])
        indices = rng.integers(-1000, 1000, size=(7, 9))
        for replica in REPLICAS:
            self.same(_clients[replica].gather(None, indices, params_name="CLI"),
                      table[indices], replica)
        proc = subprocess.run([os.environ["TC_CLI_BINARY"], "put", "X", "--input", path,
                               "--shards", "3", "--targets", targets.split(",")[0]],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--shards 3 needs --targets with 3", proc.stderr)

    def test_bad_shard_descriptions_are_refused_before_storing(self):
        rows = np.zeros((10, 4), np.float32)
        for shard, words in (((3, 3, 30), "shard index 3 is not in [0, 3)"),
                             ((0, 0, 30), "shard count 0 is not in [1, 4096]"),
                             ((0, 5000, 30), "shard count 5000"),
                             ((0, 3, -1), "is negative"),
                             ((1, 3, 40), "holds rows [14, 28), 14 rows, but 10 were given")):
            with self.assertRaises(TensorComputeError) as e:
                _clients["s1"].put_tensor("bad", rows, shard=shard)
            self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT", shard)
            self.assertIn(words, e.exception.message)
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].put_tensor("bad", np.array(["a", "b"], dtype=object), shard=(0, 1, 2))
        self.assertIn("DT_STRING tables are not sharded", e.exception.message)
        self.assertNotIn("bad", [info.name for info in _clients["s1"].list_tensors()])

    def test_other_axes_are_refused(self):
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].gather(None, np.array([0, 1]), axis=1, params_name="T")
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        self.assertIn("sharded by rows", e.exception.message)

    def test_metrics_count_sub_calls_by_shard(self):
        _clients["s1"].gather(None, np.array([0, ROWS // 2, ROWS - 1]), params_name="T")
        samples = scrape(_servers["s1"].metrics_port)
        for shard in ("0", "1", "2"):
            self.assertGreater(samples.get(("tensorcompute_shard_calls_total",
                                            labels(shard=shard, code="OK")), 0), 0, shard)


if __name__ == "__main__":
    unittest.main()
