"""Live tables (issue 41): UpdateRows through the real server, on the CPU pool.

  - torn-row detector: tables whose every row holds one value repeated (its version); a
    writer flips versions with UpdateRows, a group of rows per message, while readers gather
    and pool continuously on other connections. Rows are 8 KiB, wide enough that lookups
    without their lease (the server's batcher given its executor bare) were caught here in
    every run. Every gathered row must be uniform, every
    group's rows at one version (a message is seen whole), and every pooled bag the sum of
    whole rows of one version each. On an AS_IS table and on FLOAT16 and INT8_ROWWISE tables
    (a uniform row quantizes exactly: scale 0, bias its value).
  - validation: every error with its words; a bad message changes nothing, and the messages
    before it in the stream stay applied.
  - read-your-writes: the sequence UpdateRows answers, min_sequence, the trailing metadata
    tc-table-sequence, ListTensors' sequence, and the table's metrics.

Run by ctest from tests/client (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set and
the Python client installed (fixture tc_python_client).
"""

import threading
import time
import unittest

import grpc
import numpy as np

from tensorcompute import Client
from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc as pb_grpc
from tensorcompute._common import to_tensor
from prometheus_scrape import labels, scrape
from server_process import ServerProcess

ROWS, DIM, GROUPS = 64, 2048, 8
SECONDS = 3.0


def update_messages(name, messages):
    """UpdateRowsRequests of (indices, values) pairs, the first naming the table."""
    for i, (indices, values) in enumerate(messages):
        yield pb.UpdateRowsRequest(name=name if i == 0 else "",
                                   indices=to_tensor(np.asarray(indices, np.int64), "indices"),
                                   values=to_tensor(values, "values"))


def value_of(version):
    """What a version writes: a whole number that float16 holds exactly."""
    return version % 1000 + 1


def group_rows(group):
    return list(range(group, ROWS, GROUPS))


class LiveTablesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu_threads=2")
        cls.server.__enter__()
        cls.client = Client(cls.server.target, timeout=30.0)
        cls.channel = grpc.insecure_channel(cls.server.target)
        cls.stub = pb_grpc.TensorComputeStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.client.close()
        cls.server.__exit__(None, None, None)

    def sequence_of(self, name):
        tensors = self.stub.ListTensors(pb.ListTensorsRequest(), timeout=10).tensors
        return [t for t in tensors if t.name == name][0].sequence

    def update(self, name, messages, stub=None):
        return (stub or self.stub).UpdateRows(update_messages(name, messages), timeout=30)

    def put_uniform(self, name, storage="as-is"):
        self.client.put_tensor(name, np.zeros((ROWS, DIM), np.float32), replace=True,
                               storage=storage)

    def check_torn_rows(self, name):
        stop = threading.Event()
        failures, counts = [], {"gathers": 0, "bags": 0}

        def gather_reader():
            client = Client(self.server.target, timeout=30.0)
            while not stop.is_set():
                out = client.gather(None, np.arange(ROWS), params_name=name)
                for r in range(ROWS):
                    if not np.all(out[r] == out[r, 0]):
                        failures.append(f"torn row {r}: {out[r]}")
                for g in range(GROUPS):
                    versions = {float(out[r, 0]) for r in group_rows(g)}
                    if len(versions) != 1:
                        failures.append(f"group {g} split across versions {versions}")
                counts["gathers"] += 1
            client.close()

        def bag_reader():
            client = Client(self.server.target, timeout=30.0)
            # One bag per group (its rows share a version), and one bag of a row from each.
            indices = [r for g in range(GROUPS) for r in group_rows(g)] + list(range(GROUPS))
            offsets = [g * (ROWS // GROUPS) for g in range(GROUPS)] + [ROWS]
            while not stop.is_set():
                out = client.embedding_bag(None, np.asarray(indices), np.asarray(offsets),
                                           mode="sum", params_name=name)
                for b in range(GROUPS + 1):
                    if not np.all(out[b] == out[b, 0]):
                        failures.append(f"bag {b} is not a sum of whole rows: {out[b]}")
                for g in range(GROUPS):
                    version = out[g, 0] / (ROWS // GROUPS)
                    if version != int(version):
                        failures.append(f"bag {g} mixes versions: {out[g, 0]}")
                counts["bags"] += 1
            client.close()

        readers = [threading.Thread(target=gather_reader), threading.Thread(target=bag_reader)]
        for t in readers:
            t.start()
        writes, version = 0, 0
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            # One stream of 8 messages, each flipping one group to a new version.
            messages = []
            for _ in range(GROUPS):
                version += 1
                g = version % GROUPS
                rows = group_rows(g)
                messages.append((rows, np.full((len(rows), DIM), value_of(version), np.float32)))
            response = self.update(name, messages)
            self.assertEqual(response.messages, GROUPS)
            self.assertEqual(response.rows, ROWS)
            writes += GROUPS
        stop.set()
        for t in readers:
            t.join()
        print(f"{name}: {counts['gathers']} gathers and {counts['bags']} pooled lookups beside "
              f"{writes} update messages")
        self.assertEqual(failures[:5], [])
        self.assertGreater(counts["gathers"], 10)
        self.assertGreater(counts["bags"], 10)
        # The last version of every group is what a lookup now reads.
        out = self.client.gather(None, np.arange(ROWS), params_name=name)
        for g in range(GROUPS):
            last = max(v for v in range(version - GROUPS + 1, version + 1) if v % GROUPS == g)
            np.testing.assert_array_equal(out[group_rows(g)], value_of(last))

    def test_torn_rows_as_is(self):
        self.put_uniform("live_f32")
        self.check_torn_rows("live_f32")

    def test_torn_rows_float16(self):
        self.put_uniform("live_f16", storage="float16")
        self.check_torn_rows("live_f16")

    def test_torn_rows_int8_rowwise(self):
        self.put_uniform("live_i8", storage="int8-rowwise")
        self.check_torn_rows("live_i8")

    def assert_refused(self, code, words, name, messages):
        with self.assertRaises(grpc.RpcError) as caught:
            self.update(name, messages)
        self.assertEqual(caught.exception.code(), code, caught.exception.details())
        self.assertIn(words, caught.exception.details())

    def test_bad_messages_change_nothing(self):
        self.client.put_tensor("checked", np.zeros((8, 4), np.float32), replace=True)
        sequence = self.sequence_of("checked")
        one = np.ones((1, 4), np.float32)
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        cases = [
            ("indices[1] = 8 is not in [-8, 8)", [([0, 8], np.ones((2, 4), np.float32))]),
            ("indices[2] = -5 names row 3 again (indices[0])",
             [([3, 5, -5], np.ones((3, 4), np.float32))]),
            ("values: table 'checked' takes float32 [1,4] for these indices, got float64 [1,4]",
             [([0], np.ones((1, 4), np.float64))]),
            ("takes float32 [2,4] for these indices, got float32 [1,4]", [([0, 1], one)]),
        ]
        for words, messages in cases:
            with self.subTest(words=words):
                self.assert_refused(invalid, words, "checked", messages)
        # A bad second message: the first stays applied, the second changes nothing.
        self.assert_refused(invalid, "indices[0] = 99 is not in [-8, 8)", "checked",
                            [([2], one * 5), ([99], one * 6)])
        out = self.client.gather(None, np.arange(8), params_name="checked")
        expected = np.zeros((8, 4), np.float32)
        expected[2] = 5
        np.testing.assert_array_equal(out, expected)
        self.assertEqual(self.sequence_of("checked"), sequence + 1)
        self.assert_refused(grpc.StatusCode.NOT_FOUND, "no tensor named 'absent'", "absent",
                            [([0], one)])
        self.assert_refused(invalid, "the first UpdateRows message names the table", "",
                            [([0], one)])
        self.client.put_tensor("words", np.array([b"a", b"b"]), replace=True)
        self.assert_refused(invalid, "holds strings; UpdateRows does not change string tables",
                            "words", [([0], np.zeros((1,), np.float32))])

    def test_read_your_writes(self):
        self.client.put_tensor("ryw", np.zeros((16, 4), np.float32), replace=True)
        response = self.update("ryw", [([7], np.full((1, 4), 3, np.float32))])
        self.assertEqual((response.rows, response.messages), (1, 1))
        sequence = response.sequence
        self.assertEqual(self.sequence_of("ryw"), sequence)
        # On another connection, with min_sequence: the new row, and the sequence it was read at.
        other = grpc.insecure_channel(self.server.target)
        stub = pb_grpc.TensorComputeStub(other)
        request = pb.GatherRequest(params_name="ryw", min_sequence=sequence,
                                   indices=to_tensor(np.asarray([7]), "indices"))
        response, call = stub.Gather.with_call(request, timeout=10)
        got = np.frombuffer(response.output.data, np.float32)
        np.testing.assert_array_equal(got, [3, 3, 3, 3])
        trailers = dict(call.trailing_metadata())
        self.assertEqual(trailers["tc-table-sequence"], str(sequence))
        request.min_sequence = sequence + 1
        with self.assertRaises(grpc.RpcError) as caught:
            stub.Gather(request, timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(f"table 'ryw' is at sequence {sequence} on this server; the request needs "
                      f"min_sequence {sequence + 1}", caught.exception.details())
        other.close()
        # A replace continues the sequence; the stream that began before it is refused.
        def replaced_midway():
            yield from update_messages("ryw", [([1], np.ones((1, 4), np.float32))])
            self.client.put_tensor("ryw", np.zeros((16, 4), np.float32), replace=True)
            yield pb.UpdateRowsRequest(indices=to_tensor(np.asarray([2]), "indices"),
                                       values=to_tensor(np.ones((1, 4), np.float32), "values"))
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.UpdateRows(replaced_midway(), timeout=30)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("tensor 'ryw' was replaced while rows were being updated",
                      caught.exception.details())
        self.assertEqual(self.sequence_of("ryw"), sequence + 2)  # an update, then the replacement
        # Metrics: rows and messages applied, the sequence, the time to visibility.
        samples = scrape(self.server.metrics_port)
        ryw = labels(tensor="ryw")
        self.assertGreaterEqual(samples[("tensorcompute_table_updated_rows_total", ryw)], 2)
        self.assertGreaterEqual(samples[("tensorcompute_table_update_messages_total", ryw)], 2)
        self.assertEqual(samples[("tensorcompute_table_sequence", ryw)], sequence + 2)
        self.assertGreaterEqual(
            samples[("tensorcompute_table_update_visible_seconds_count", ryw)], 2)


if __name__ == "__main__":
    unittest.main()
