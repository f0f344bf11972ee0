"""UpdateRows on a sharded table (issue 41), on 127.0.0.1.

Two shards of T, each with two replicas (s0a, s0b; s1a, s1b), every server with --shard_peers
listing both replicas of each shard (its own included). An update sent to any replica reaches
every replica of the shard owning each row, each replica once per message:

1. Messages sent to s1b (rows of both shards, a message with rows of shard 0 only, a negative
   index): every replica of each shard serves the new rows (asked with a sub-call's hop mark, so
   that each answers from its own rows), the four sequences are equal and the answer's, and a
   lookup routed through another server reads the whole updated table.
2. A message bad for the whole table (an index past the last row) is INVALID_ARGUMENT, and no
   replica's sequence moves.
3. s1b is killed (SIGKILL) while an update stream through s0a is open: the call fails
   UNAVAILABLE naming shard 1 and that replica. s1b started again (from --preload) and the
   updates sent again: it serves the new rows.
4. min_sequence through a router: a shard behind it answers FAILED_PRECONDITION naming it.

Needs $TC_SERVER_BINARY and the `tensorcompute` package.
"""

import os
import signal
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

from reserved_ports import ReservedPorts
from server_process import ServerProcess
from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc as pb_grpc

ROWS, DIM, SHARDS = 1000, 8, 2  # shard 0: rows [0, 500), shard 1: [500, 1000)
HOP = (("tc-shard-hop", "1"),)
SHARD_OF = {"s0a": 0, "s0b": 0, "s1a": 1, "s1b": 1}


def tensor(array):
    array = np.ascontiguousarray(array)
    dtype = {np.dtype(np.int64): pb.DT_INT64, np.dtype(np.float32): pb.DT_FLOAT32}[array.dtype]
    return pb.Tensor(dtype=dtype, shape=array.shape, data=array.tobytes())


def message(indices, values, name="T"):
    return pb.UpdateRowsRequest(name=name, indices=tensor(np.asarray(indices, np.int64)),
                                values=tensor(np.asarray(values, np.float32)))


def rows_of(seed, n):
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


# Absolute values: applying them again leaves what applying them once does.
UPDATES = [
    ([3, 640, 499, 500], rows_of(1, 4)),  # both shards
    ([10, 11], rows_of(2, 2)),            # shard 0 only: shard 1's replicas get an empty message
    ([-1, 700], rows_of(3, 2)),           # -1: the whole table's last row, 999
]


class ShardedUpdatesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.table = np.random.default_rng(7).standard_normal((ROWS, DIM)).astype(np.float32)
        cls.path = os.path.join(cls.tmp.name, "t.npy")
        np.save(cls.path, cls.table)
        cls.reservation = ReservedPorts(len(SHARD_OF))  # held until the class ends: restarts too
        cls.ports = dict(zip(SHARD_OF, cls.reservation.numbers))
        p = cls.ports
        cls.peers = ",".join(f"ipv4:127.0.0.1:{p[f's{i}a']}|127.0.0.1:{p[f's{i}b']}"
                             for i in range(SHARDS))
        cls.servers, cls.channels = {}, {}
        for name in SHARD_OF:
            cls.start(name)
        cls.expected = cls.table.copy()
        for indices, values in UPDATES:
            cls.expected[indices] = values

    @classmethod
    def start(cls, name):
        if name in cls.servers:  # a restart: the old process is gone, its pipe closed here
            cls.servers[name].__exit__(None, None, None)
            cls.channels.pop(name).close()
        server = ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{cls.ports[name]}",
                               f"--preload=T={cls.path}", f"--shard_index={SHARD_OF[name]}",
                               f"--shard_count={SHARDS}", f"--shard_peers={cls.peers}")
        cls.servers[name] = server.__enter__()
        cls.channels[name] = grpc.insecure_channel(server.target)

    @classmethod
    def tearDownClass(cls):
        for channel in cls.channels.values():
            channel.close()
        for server in cls.servers.values():
            server.__exit__(None, None, None)
        cls.reservation.close()
        cls.tmp.cleanup()

    def stub(self, name):
        return pb_grpc.TensorComputeStub(self.channels[name])

    def update(self, name, messages, timeout=20):
        return self.stub(name).UpdateRows(iter(messages), timeout=timeout)

    def sequence(self, name):
        tensors = self.stub(name).ListTensors(pb.ListTensorsRequest(), timeout=10).tensors
        return next(t.sequence for t in tensors if t.name == "T")

    def sequences(self):
        return {name: self.sequence(name) for name in SHARD_OF}

    def gather(self, name, rows, hop=False, min_sequence=0):
        request = pb.GatherRequest(params_name="T", indices=tensor(np.asarray(rows, np.int64)),
                                   min_sequence=min_sequence)
        answer = self.stub(name).Gather(request, timeout=10, metadata=HOP if hop else None)
        return np.frombuffer(answer.output.data, np.float32).reshape(len(rows), DIM)

    def own_rows(self, name):
        first = SHARD_OF[name] * (ROWS // SHARDS)
        return np.arange(first, first + ROWS // SHARDS)

    def assert_serves_updates(self, name):
        rows = self.own_rows(name)
        np.testing.assert_array_equal(self.gather(name, rows, hop=True), self.expected[rows],
                                      err_msg=f"{name}'s own rows")

    def test_1_an_update_through_one_replica_reaches_every_replica_of_each_shard(self):
        before = self.sequences()
        self.assertEqual(len(set(before.values())), 1, before)
        answer = self.update("s1b", [message(i, v) for i, v in UPDATES])
        self.assertEqual((answer.messages, answer.rows), (3, 8))
        after = self.sequences()
        print(f"\nsequences before {before}, after {after}, answered {answer.sequence}")
        # Every replica advanced by one per message, even with no rows of its shard in one.
        self.assertEqual(after, {name: before["s0a"] + 3 for name in SHARD_OF})
        self.assertEqual(answer.sequence, after["s1b"])
        for name in SHARD_OF:
            self.assert_serves_updates(name)
        # Routed through a server of the other shard: the whole updated table.
        np.testing.assert_array_equal(self.gather("s0b", np.arange(ROWS)), self.expected)

    def test_2_a_message_bad_for_the_whole_table_goes_nowhere(self):
        before = self.sequences()
        with self.assertRaises(grpc.RpcError) as caught:
            self.update("s0a", [message([5, 600], rows_of(4, 2)), message([1000], rows_of(5, 1))])
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("indices[0] = 1000 is not in [-1000, 1000)", caught.exception.details())
        # The first message was applied everywhere, the second nowhere.
        self.assertEqual(self.sequences(), {name: before[name] + 1 for name in SHARD_OF})
        self.expected[[5, 600]] = rows_of(4, 2)
        for name in SHARD_OF:
            self.assert_serves_updates(name)

    def test_3_a_replica_killed_mid_update_is_named_and_a_resend_reaches_it_once_back(self):
        proceed = threading.Event()
        first = self.sequence("s1b")

        def stream():
            yield message([6, 601], rows_of(6, 2))
            proceed.wait(timeout=20)
            for i in range(5):  # a write to the dead replica fails
                yield message([7, 602 + i], rows_of(7 + i, 2))
                time.sleep(0.05)

        call = self.stub("s0a").UpdateRows.future(stream(), timeout=30)
        deadline = time.monotonic() + 10
        while self.sequence("s1b") == first and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.sequence("s1b"), first + 1)  # the stream is open, one applied
        process = self.servers["s1b"]._process
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        proceed.set()
        with self.assertRaises(grpc.RpcError) as caught:
            call.result(timeout=30)
        error = caught.exception
        print(f"\nreplica killed mid-update: {error.code().name}: {error.details()}")
        self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())
        self.assertIn(f"shard 1 of 2 of table 'T', replica ipv4:127.0.0.1:{self.ports['s1b']}",
                      error.details())
        self.assertIn("safe to send again", error.details())

        # Back from --preload (the original rows): the updates sent again reach it.
        self.start("s1b")
        resend = UPDATES + [([5, 600], rows_of(4, 2)), ([6, 601], rows_of(6, 2))] + [
            ([7, 602 + i], rows_of(7 + i, 2)) for i in range(5)]
        for indices, values in resend:
            self.expected[indices] = values
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = self.update("s0a", [message(i, v) for i, v in resend])
                break
            except grpc.RpcError as e:  # s1b's channel reconnects within about a second
                if time.monotonic() > deadline:
                    raise
                print(f"resend before s1b was reachable: {e.code().name}")
                time.sleep(0.2)
        self.assertEqual(answer.messages, len(resend))
        for name in SHARD_OF:
            self.assert_serves_updates(name)
        np.testing.assert_array_equal(self.gather("s1b", np.arange(ROWS)), self.expected)

    def test_4_min_sequence_is_checked_by_each_shard_of_a_routed_lookup(self):
        # s0a alone moves ahead of shard 1's replicas (a message marked as a sub-call is applied
        # there only).
        behind = min(self.sequences().values())
        while self.sequence("s0a") <= max(self.sequence("s1a"), self.sequence("s1b")):
            self.stub("s0a").UpdateRows(iter([message([8], rows_of(20, 1))]), timeout=10,
                                        metadata=HOP)
        self.expected[8] = rows_of(20, 1)[0]
        ahead = self.sequence("s0a")
        # Rows of shard 1, whose replicas are behind `ahead`: refused by the shard, named.
        rows = [8, 700, 999]
        with self.assertRaises(grpc.RpcError) as caught:
            self.gather("s0a", rows, min_sequence=ahead)
        error = caught.exception
        self.assertEqual(error.code(), grpc.StatusCode.FAILED_PRECONDITION, error.details())
        self.assertIn("shard 1 of 2 of table 'T'", error.details())
        self.assertIn(f"the request needs min_sequence {ahead}", error.details())
        # What every shard has reached passes.
        np.testing.assert_array_equal(self.gather("s0a", rows, min_sequence=behind),
                                      self.expected[rows])
        np.testing.assert_array_equal(self.gather("s0a", [8, 9], min_sequence=ahead),
                                      self.expected[[8, 9]])


if __name__ == "__main__":
    unittest.main()
