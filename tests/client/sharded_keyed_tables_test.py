"""Keyed tables sharded by key (issue 42), end to end on 127.0.0.1.

Three shards of keyed table T, shard 0 with a second replica, each loaded with
`--preload T=rows.npy --preload_keys T=keys.npy --shard_index=I --shard_count=3`: every server
reads the whole files and keeps the keys k with key_shard(k, 3) == I. Table D (float16, with a
default row) and table U (room for new keys) are put shard by shard with put_tensor(keys=...,
shard=Shard(i, 3, n, by_key=True)). A fifth server holds every table whole (the unsharded
answer), a sixth holds shard 1 of T without --shard_peers.

- tensorcompute.key_shard is the C++ KeyShard (core/key_index.h's worked examples), and each
  shard holds exactly its keys.
- Through every replica, Gather and EmbeddingBag by random keys (INT64_MIN, INT64_MAX, 0, -1,
  negatives, missing ones, repeats) under every policy (ZERO, DEFAULT_ROW, SKIP, ERROR) with
  the found mask answer byte for byte what the unsharded server answers, and what a NumPy
  dictionary reference says; a missing key under ERROR gets the unsharded words, its position
  in the whole request.
- Lookups by indices are INVALID_ARGUMENT; a server without --shard_peers serves its own keys
  and refuses others (FAILED_PRECONDITION naming the shard); puts of keys of another shard are
  refused.
- UpdateRows by keys (upserts, new keys, deletes) through any replica reaches every replica of
  the owning shards: lookups through every replica match a dict reference and the unsharded
  server given the same updates, and every replica's sequence is the same.
- The CLI puts a keyed table by key (put --keys --shards 3 --targets ...).
- A shard down: lookups that need it are UNAVAILABLE naming the shard.

Needs $TC_SERVER_BINARY, $TC_CLI_BINARY and the `tensorcompute` package.
"""

import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

from tensorcompute import Client, Shard, TensorComputeError, key_shard
from replica_answers import ReplicaAnswers
from reserved_ports import ReservedPorts
from server_process import ServerProcess

INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
SHARDS = 3
ROWS, DIM = 3000, 12
REPLICAS = ("s0", "s0b", "s1", "s2")
SHARD_OF = {"s0": 0, "s0b": 0, "s1": 1, "s2": 2}
UPDATE_ROOM = 200  # free slots of each shard of U

_servers = {}
_clients = {}
_ports = {}
_tables = {}  # name -> (keys, rows [logical float32], default row or None)
_tmp = None
_reservation = None


def random_keys(rng, n):
    """n distinct int64 keys, the extreme and special ones among them."""
    special = np.array([INT64_MIN, INT64_MAX, 0, -1, 1, -2], np.int64)
    keys = np.unique(rng.integers(INT64_MIN, INT64_MAX, size=2 * n, dtype=np.int64,
                                  endpoint=True))
    keys = np.setdiff1d(keys, special)
    rng.shuffle(keys)
    return np.concatenate([special, keys[:n - len(special)]])


def shard_part(keys, rows, index):
    mine = key_shard(keys, SHARDS) == index
    return keys[mine], rows[mine]


def setUpModule():
    global _tmp, _reservation
    _tmp = tempfile.TemporaryDirectory()
    rng = np.random.default_rng(42)
    keys = random_keys(rng, ROWS)
    rows = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    rows_path, keys_path = os.path.join(_tmp.name, "t.npy"), os.path.join(_tmp.name, "k.npy")
    np.save(rows_path, rows)
    np.save(keys_path, keys)
    _tables["T"] = (keys, rows, None)
    _reservation = ReservedPorts(len(REPLICAS))
    _ports.update(zip(REPLICAS, _reservation.numbers))
    p = _ports
    peers = ",".join([f"ipv4:127.0.0.1:{p['s0']}|127.0.0.1:{p['s0b']}",
                      f"ipv4:127.0.0.1:{p['s1']}", f"ipv4:127.0.0.1:{p['s2']}"])
    preload = [f"--preload=T={rows_path}", f"--preload_keys=T={keys_path}"]
    for name in REPLICAS:
        server = ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{p[name]}", *preload,
                               f"--shard_index={SHARD_OF[name]}", f"--shard_count={SHARDS}",
                               f"--shard_peers={peers}")
        _servers[name] = server.__enter__()
        _clients[name] = Client(server.target, timeout=60.0)
    for name, flags in (("whole", []), ("lone", ["--shard_index=1", f"--shard_count={SHARDS}"])):
        server = ServerProcess("--cpu_threads=1", *preload, *flags)
        _servers[name] = server.__enter__()
        _clients[name] = Client(server.target, timeout=60.0)
    # D: float16 storage, a default row, missing="default". U: room for new keys.
    d_keys = random_keys(rng, 900)
    d_rows = rng.standard_normal((900, DIM)).astype(np.float32)
    default_row = rng.standard_normal(DIM).astype(np.float32)
    u_keys = random_keys(rng, 500)
    u_rows = rng.standard_normal((500, DIM)).astype(np.float32)
    _clients["whole"].put_tensor("D", d_rows, keys=d_keys, storage="float16", missing="default",
                                 default_row=default_row)
    _clients["whole"].put_tensor("U", u_rows, keys=u_keys, capacity=500 + SHARDS * UPDATE_ROOM)
    for name in REPLICAS:
        index = SHARD_OF[name]
        k, r = shard_part(d_keys, d_rows, index)
        _clients[name].put_tensor("D", r, keys=k, storage="float16", missing="default",
                                  default_row=default_row,
                                  shard=Shard(index, SHARDS, len(d_keys), by_key=True))
        k, r = shard_part(u_keys, u_rows, index)
        _clients[name].put_tensor("U", r, keys=k, capacity=len(k) + UPDATE_ROOM,
                                  shard=Shard(index, SHARDS, len(u_keys), by_key=True))
    # What float16 storage makes of D's rows (its lookups return those).
    _tables["D"] = (d_keys, d_rows.astype(np.float16).astype(np.float32),
                    default_row.astype(np.float16).astype(np.float32))
    _tables["U"] = (u_keys, u_rows, None)


def tearDownModule():
    for client in _clients.values():
        client.close()
    for server in _servers.values():
        server.__exit__(None, None, None)
    if _reservation is not None:
        _reservation.close()
    if _tmp is not None:
        _tmp.cleanup()


def lookup_keys(rng, keys, shape, missing_share=0.2):
    """Keys of `shape`: the table's (repeats likely) and, at `missing_share`, absent ones."""
    n = int(np.prod(shape))
    present = keys[rng.integers(0, len(keys), n)]
    absent = rng.integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64)
    absent = np.where(np.isin(absent, keys), present, absent)
    return np.where(rng.random(n) < missing_share, absent, present).astype(np.int64).reshape(shape)


def reference_rows(table, keys, policy):
    """Each key's row under `policy` ("zero" or "default"), and the found mask."""
    table_keys, rows, default_row = _tables[table]
    where = {int(k): i for i, k in enumerate(table_keys)}
    flat = keys.reshape(-1)
    found = np.array([int(k) in where for k in flat], bool)
    filler = default_row if policy == "default" else np.zeros(DIM, np.float32)
    out = np.stack([rows[where[int(k)]] if int(k) in where else filler for k in flat]) \
        if len(flat) else np.zeros((0, DIM), np.float32)
    return out.reshape(keys.shape + (DIM,)), found.reshape(keys.shape)


def reference_bags(table, keys, offsets, mode, policy):
    """EmbeddingBag by keys in float64: `policy` "zero", "default" or "skip"."""
    rows, found = reference_rows(table, keys, "default" if policy == "default" else "zero")
    ends = list(offsets[1:]) + [len(keys)]
    out = np.zeros((len(offsets), DIM))
    for b, (begin, end) in enumerate(zip(offsets, ends)):
        use = [i for i in range(begin, end) if policy != "skip" or found[i]]
        if not use:
            continue
        bag = rows[use].astype(np.float64)
        out[b] = {"sum": bag.sum(0), "mean": bag.mean(0), "max": bag.max(0),
                  "sqrtn": bag.sum(0) / np.sqrt(len(use))}[mode]
    return out, found


class ShardedKeyedTablesTest(ReplicaAnswers, unittest.TestCase):
    clients = _clients

    def test_key_shard_is_the_published_hash(self):
        # core/key_index.h's worked examples (KeyShardHash(1) % 8, and so on).
        self.assertEqual(int(key_shard(1, 8)), 5)
        self.assertEqual(int(key_shard(-1, 10)), 7)
        self.assertEqual(int(key_shard(123456789, 10)), 4)
        self.assertTrue(np.all(key_shard(np.zeros(5, np.int64), 7) == 0))
        self.assertEqual(key_shard(np.zeros((2, 3), np.int64), 4).shape, (2, 3))
        # Each shard holds exactly the keys key_shard gives it: every one of them is found
        # there (asked with the hop mark would bypass routing; a lone server does the same).
        keys, _, _ = _tables["T"]
        for name in REPLICAS:
            info = {i.name: i for i in _clients[name].list_tensors()}["T"]
            index = SHARD_OF[name]
            self.assertEqual(info.shard, Shard(index, SHARDS, ROWS, True))
            self.assertEqual(info.keyed.keys, int(np.sum(key_shard(keys, SHARDS) == index)))
        mine = keys[key_shard(keys, SHARDS) == 1]
        _, found = _clients["lone"].gather(None, keys=mine, params_name="T", missing="zero",
                                           return_found=True)
        self.assertTrue(found.all())

    def test_gather_matches_unsharded_and_reference(self):
        rng = np.random.default_rng(1)
        for replica in REPLICAS:
            for table, policy in (("T", "zero"), ("D", "default"), ("D", "zero"), ("U", "zero")):
                for shape in [(), (0,), (1,), (int(rng.integers(1, 300)),),
                              (int(rng.integers(1, 9)), int(rng.integers(1, 40)))]:
                    keys = lookup_keys(rng, _tables[table][0], shape)
                    got, want = self.both(replica, "gather", None, keys=keys, params_name=table,
                                          missing=policy, return_found=True)
                    what = f"{replica} {table} {policy} {shape}"
                    self.same(got[0], want[0], what)
                    self.same(got[1], want[1], what)
                    rows, found = reference_rows(table, keys, policy)
                    self.same(got[0], rows, what)
                    self.same(got[1], found, what)
                # The table's policy (D's is DEFAULT_ROW), and ERROR with every key present.
                keys = lookup_keys(rng, _tables[table][0], (50,), missing_share=0)
                for missing in (None, "error"):
                    got, want = self.both(replica, "gather", None, keys=keys, params_name=table,
                                          missing=missing)
                    self.same(got, want, f"{replica} {table} {missing}")

    def test_missing_key_gets_the_unsharded_error(self):
        rng = np.random.default_rng(2)
        keys, _, _ = _tables["T"]
        for replica in REPLICAS:
            for shape in [(40,), (6, 7)]:
                request = lookup_keys(rng, keys, shape, missing_share=0)
                absent = 90210
                while absent in set(keys.tolist()):
                    absent += 1
                position = tuple(int(rng.integers(0, d)) for d in shape)
                request[position] = absent
                got, want = self.both(replica, "gather", None, keys=request, params_name="T")
                self.assertIsInstance(want, tuple)
                self.assertEqual(got, want, replica)
                where = ",".join(str(p) for p in position)
                self.assertEqual(got[1], f"keys[{where}] = {absent} is not a key of table 'T'")
                offsets = np.arange(0, request.size, 5)
                got, want = self.both(replica, "embedding_bag", None, keys=request.reshape(-1),
                                      offsets=offsets, params_name="T", missing="error")
                self.assertEqual(got, want, replica)

    def test_embedding_bag_matches_unsharded_and_reference(self):
        rng = np.random.default_rng(3)
        for replica in REPLICAS:
            for table, policies in (("T", ("zero", "skip")), ("D", ("default", "skip", "zero"))):
                for mode in ("sum", "mean", "max", "sqrtn"):
                    for policy in policies:
                        bags = int(rng.integers(0, 30))
                        sizes = rng.integers(0, 10, size=bags)
                        pool = lookup_keys(rng, _tables[table][0], (int(rng.integers(1, 40)),),
                                           missing_share=0.3)
                        keys = pool[rng.integers(0, len(pool), int(sizes.sum()))]
                        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) \
                            if bags else np.zeros(0, np.int64)
                        kwargs = {"mode": mode, "offsets": offsets, "params_name": table,
                                  "missing": policy, "return_found": True}
                        what = f"{replica} {table} {mode} {policy} {bags} bags"
                        got, want = self.both(replica, "embedding_bag", None, keys=keys, **kwargs)
                        self.same(got[0], want[0], what)
                        self.same(got[1], want[1], what)
                        ref, found = reference_bags(table, keys, offsets, mode, policy)
                        self.same(got[1], found, what)
                        np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-5,
                                                   err_msg=what)
                        if mode != "max":  # weighted, byte for byte with the unsharded server
                            weights = rng.uniform(0.5, 1.5, keys.shape).astype(np.float32)
                            got, want = self.both(replica, "embedding_bag", None, keys=keys,
                                                  per_sample_weights=weights, **kwargs)
                            self.same(got[0], want[0], what + " weighted")
                # Fixed-size bags (rank-2 keys).
                keys = lookup_keys(rng, _tables[table][0], (17, 4))
                got, want = self.both(replica, "embedding_bag", None, keys=keys, mode="mean",
                                      params_name=table, missing="skip")
                self.same(got, want, f"{replica} {table} fixed bags")

    def test_lookups_by_indices_are_refused(self):
        for replica in ("s1", "lone"):
            for method, args in (("gather", ([0, 1],)), ("gather_nd", ([[0], [1]],)),
                                 ("embedding_bag", ([[0, 1]],))):
                with self.assertRaises(TensorComputeError) as e:
                    getattr(_clients[replica], method)(None, *args, params_name="T")
                self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT", method)
                self.assertIn("tensor 'T' is sharded by key (3 shards): look it up by keys",
                              e.exception.message)

    def test_a_server_without_peers_serves_its_own_keys_only(self):
        keys, rows, _ = _tables["T"]
        shards = key_shard(keys, SHARDS)
        mine = keys[shards == 1][:20]
        self.same(_clients["lone"].gather(None, keys=mine, params_name="T"),
                  reference_rows("T", mine, "zero")[0], "own keys")
        other = keys[shards == 2][0]
        request = np.concatenate([mine[:3], [other]])
        with self.assertRaises(TensorComputeError) as e:
            _clients["lone"].gather(None, keys=request, params_name="T")
        self.assertEqual(e.exception.code.name, "FAILED_PRECONDITION")
        self.assertEqual(e.exception.message,
                         f"tensor 'T' here is shard 1 of 3 (sharded by key); keys[3] = {other} "
                         "is shard 2's, and this server has no --shard_peers to route it to")

    def test_puts_of_other_shards_keys_are_refused(self):
        keys = np.array([5, 6, 7, 8, 9, 10], np.int64)
        shards = key_shard(keys, SHARDS)
        rows = np.zeros((len(keys), DIM), np.float32)
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].put_tensor("bad", rows, keys=keys, shard=Shard(0, SHARDS, 0, True))
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        first = int(np.argmax(shards != 0))
        self.assertIn(f"tensor 'bad': keys[{first}] = {keys[first]} belongs to shard "
                      f"{shards[first]} of 3, not 0", e.exception.message)
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].put_tensor("bad", rows, shard=Shard(0, SHARDS, 0, True))
        self.assertIn("a table sharded by key (shard.by_key) is a keyed table",
                      e.exception.message)
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].put_tensor("bad", rows, keys=keys, shard=(0, 2, 12))
        self.assertIn("keyed tables are sharded by key", e.exception.message)
        self.assertNotIn("bad", [info.name for info in _clients["s1"].list_tensors()])

    def test_updates_through_any_replica_reach_every_shard(self):
        rng = np.random.default_rng(4)
        keys, rows, _ = _tables["U"]
        reference = {int(k): r for k, r in zip(keys, rows)}
        start = {name: self.sequence(name, "U") for name in REPLICAS + ("whole",)}
        senders = ["s1", "s0b", "s2", "s0"]
        for step, sender in enumerate(senders):
            present = np.array(sorted(reference), np.int64)
            chosen = rng.choice(present, size=30, replace=False)
            overwrite, delete = chosen[:20], chosen[20:]
            new = rng.integers(INT64_MIN, INT64_MAX, size=25, dtype=np.int64)
            new = new[~np.isin(new, present)]
            write = np.concatenate([overwrite, new])
            values = rng.standard_normal((len(write), DIM)).astype(np.float32)
            for client in (_clients[sender], _clients["whole"]):
                client.update_rows("U", keys=write, values=values, delete_keys=delete)
            for k, v in zip(write, values):
                reference[int(k)] = v
            for k in delete:
                del reference[int(k)]
            # A message of deletes only, whose keys one shard alone owns.
            lone = np.array([k for k in reference if key_shard(k, SHARDS) == step % SHARDS][:3])
            for client in (_clients[sender], _clients["whole"]):
                client.update_rows("U", delete_keys=lone)
            for k in lone:
                del reference[int(k)]
        # Every replica got every message: the sequences moved as the unsharded table's.
        moved = {name: self.sequence(name, "U") - start[name] for name in start}
        self.assertEqual(set(moved.values()), {moved["whole"]}, moved)
        self.assertGreaterEqual(moved["whole"], 2 * len(senders))
        ask = np.concatenate([np.array(list(reference), np.int64),
                              rng.integers(INT64_MIN, INT64_MAX, size=50, dtype=np.int64),
                              keys[:40]])
        for replica in REPLICAS:
            got, want = self.both(replica, "gather", None, keys=ask, params_name="U",
                                  missing="zero", return_found=True)
            self.same(got[0], want[0], replica)
            self.same(got[1], want[1], replica)
            expected = np.stack([reference.get(int(k), np.zeros(DIM, np.float32)) for k in ask])
            self.same(got[0], expected, replica)
            self.same(got[1], np.array([int(k) in reference for k in ask]), replica)
        held = sum({i.name: i for i in _clients[n].list_tensors()}["U"].keyed.keys
                   for n in ("s0", "s1", "s2"))
        self.assertEqual(held, len(reference))

    def test_keys_past_a_shards_capacity_grow_that_shard(self):
        # Each shard put full (capacity: its keys); 300 keys added through one replica grow
        # every shard on every replica alike, and lookups through any replica read them all.
        rng = np.random.default_rng(11)
        keys = random_keys(rng, 90)
        rows = rng.standard_normal((90, DIM)).astype(np.float32)
        capacity = {}
        for name in REPLICAS:
            index = SHARD_OF[name]
            k, r = shard_part(keys, rows, index)
            capacity[index] = len(k)
            _clients[name].put_tensor("G", r, keys=k, missing="zero", replace=True,
                                      shard=Shard(index, SHARDS, len(keys), by_key=True))
        reference = {int(k): r for k, r in zip(keys, rows)}
        new = rng.integers(INT64_MIN, INT64_MAX, size=300, dtype=np.int64)
        new = np.unique(new[~np.isin(new, keys)])
        values = rng.standard_normal((len(new), DIM)).astype(np.float32)
        _clients["s1"].update_rows("G", keys=new, values=values)
        for k, v in zip(new.tolist(), values):
            reference[int(k)] = v
        infos = {n: {i.name: i for i in _clients[n].list_tensors()}["G"] for n in REPLICAS}
        for name, info in infos.items():
            index = SHARD_OF[name]
            owned = sum(1 for k in reference if key_shard(k, SHARDS) == index)
            self.assertEqual(info.keyed.keys, owned, name)
            added = owned - capacity[index]
            self.assertEqual(info.keyed.capacity,
                             max(2 * capacity[index], capacity[index] + added), name)
        self.assertEqual(infos["s0"].keyed, infos["s0b"].keyed)
        ask = np.concatenate([np.array(list(reference), np.int64), keys[:10] + 1])
        expected = np.stack([reference.get(int(k), np.zeros(DIM, np.float32)) for k in ask])
        for replica in REPLICAS:
            got = _clients[replica].gather(None, keys=ask, params_name="G", missing="zero")
            self.same(got, expected, replica)

    def test_updates_by_indices_are_refused(self):
        with self.assertRaises(TensorComputeError) as e:
            _clients["s2"].update_rows("U", indices=[0], values=np.zeros((1, DIM), np.float32))
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        self.assertIn("table 'U' is sharded by key (3 shards): update it by keys",
                      e.exception.message)

    def test_cli_puts_a_keyed_table_by_key(self):
        rng = np.random.default_rng(5)
        keys = random_keys(rng, 400)
        rows = rng.standard_normal((400, 5)).astype(np.float32)
        rows_path = os.path.join(_tmp.name, "cli.npy")
        keys_path = os.path.join(_tmp.name, "cli_keys.npy")
        np.save(rows_path, rows)
        np.save(keys_path, keys)
        targets = ",".join([f"127.0.0.1:{_ports['s0']}|127.0.0.1:{_ports['s0b']}",
                            f"127.0.0.1:{_ports['s1']}", f"127.0.0.1:{_ports['s2']}"])
        proc = subprocess.run([os.environ["TC_CLI_BINARY"], "put", "CLIK", "--input", rows_path,
                               "--keys", keys_path, "--capacity", "300", "--shards", "3",
                               "--targets", targets],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(len(lines), 4, proc.stdout)  # shard 0 on two replicas
        count = int(np.sum(key_shard(keys, SHARDS) == 2))
        self.assertIn(f"stored shard 2 of 3 by key ({count} of 400 keys)", lines[3])
        for name in REPLICAS:
            info = {i.name: i for i in _clients[name].list_tensors()}["CLIK"]
            self.assertEqual(info.keyed.capacity, 300)
            self.assertEqual(info.shard, Shard(SHARD_OF[name], SHARDS, 400, True))
        # list says which shard, and that it is by key, in both forms.
        listed = subprocess.run([os.environ["TC_CLI_BINARY"], "list", "--json", "--target",
                                 f"127.0.0.1:{_ports['s2']}"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        shard = {t["name"]: t for t in json.loads(listed.stdout)}["CLIK"]["shard"]
        self.assertEqual(shard, {"index": 2, "count": 3, "total_rows": 400, "by_key": True})
        listed = subprocess.run([os.environ["TC_CLI_BINARY"], "list", "--target",
                                 f"127.0.0.1:{_ports['s2']}"],
                                capture_output=True, text=True, timeout=60)
        lines = [line.split() for line in listed.stdout.splitlines()]
        column = lines[0].index("SHARD")
        self.assertEqual({line[0]: line[column] for line in lines[1:]}["CLIK"], "2/3:key")
        ask = keys[rng.integers(0, 400, (9, 7))]
        where = {int(k): i for i, k in enumerate(keys)}
        expected = rows[[[where[int(k)] for k in row] for row in ask]]
        for replica in REPLICAS:
            self.same(_clients[replica].gather(None, keys=ask, params_name="CLIK"), expected,
                      replica)

    def test_zz_a_shard_down_is_unavailable(self):
        # Last (by name): s2 does not come back.
        keys, _, _ = _tables["T"]
        ask = keys[key_shard(keys, SHARDS) == 2][:5]
        _servers["s2"].__exit__(None, None, None)
        del _servers["s2"]
        _clients.pop("s2").close()
        with self.assertRaises(TensorComputeError) as e:
            _clients["s1"].gather(None, keys=ask, params_name="T")
        self.assertEqual(e.exception.code.name, "UNAVAILABLE")
        self.assertIn(f"shard 2 of 3 of table 'T' (ipv4:127.0.0.1:{_ports['s2']})",
                      e.exception.message)
        # Keys of the live shards are still served.
        live = keys[key_shard(keys, SHARDS) != 2][:20]
        self.same(_clients["s0"].gather(None, keys=live, params_name="T"),
                  reference_rows("T", live, "zero")[0], "live shards")

    def sequence(self, name, table):
        return {i.name: i for i in _clients[name].list_tensors()}[table].sequence


if __name__ == "__main__":
    unittest.main()
