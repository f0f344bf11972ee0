"""gRPC compression on the real tensorcompute-server: --grpc_compression=gzip|deflate compresses
the compute answers for clients that accept it (counted on the wire through a TCP forwarder),
the answers are the same bytes, the C++ CLI (Debian's gRPC 1.51, client-side health checking)
works against it, an answer uses only a compression its client accepts (a call made by hand,
naming what it accepts), compressed requests are accepted whatever the flag says, and a bad
value stops the server at start.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set, after
the Python client is installed into .venv.
"""

import os
import subprocess
import tempfile
import time
import unittest

import numpy as np

import tensorcompute
from counting_proxy import CountingProxy
from grpc_by_hand import GATHER, first_answer_bytes, gather_request
from server_process import ServerProcess

ROWS = 4096


class CompressionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="compression_test.")
        cls.zeros = os.path.join(cls.tmp.name, "zeros.npy")
        np.save(cls.zeros, np.zeros((ROWS, 64), np.float32))
        cls.noise = np.random.default_rng(1).standard_normal((ROWS, 64)).astype(np.float32)
        cls.noise_path = os.path.join(cls.tmp.name, "noise.npy")
        np.save(cls.noise_path, cls.noise)
        cls.indices = np.arange(ROWS, dtype=np.int64)[::-1].copy()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def received(self, flag, table, client_compression=None):
        """The answer and the bytes the client received for one gather of every row."""
        with ServerProcess(f"--grpc_compression={flag}",
                           f"--preload=zeros={self.zeros},noise={self.noise_path}") as server:
            with CountingProxy(server.target) as proxy:
                with tensorcompute.Client(proxy.target, compression=client_compression) as c:
                    for _ in range(100):  # until --preload is done
                        try:
                            out = c.gather(None, self.indices, params_name=table)
                            break
                        except tensorcompute.TensorComputeError:
                            time.sleep(0.1)
                    before = proxy.received
                    out = c.gather(None, self.indices, params_name=table)
                    return out, proxy.received - before

    def test_answers_are_compressed_for_clients_that_accept_it(self):
        answer_bytes = ROWS * 64 * 4
        plain, plain_bytes = self.received("none", "zeros")
        self.assertGreater(plain_bytes, answer_bytes)
        for flag in ("gzip", "deflate"):
            out, wire = self.received(flag, "zeros")
            np.testing.assert_array_equal(out, plain)
            self.assertLess(wire, answer_bytes // 20, flag)

    def test_incompressible_answers_stay_the_same_bytes(self):
        out, wire = self.received("gzip", "noise")
        np.testing.assert_array_equal(out, self.noise[self.indices])
        self.assertGreater(wire, ROWS * 64 * 4 * 0.85)

    def test_compressed_requests_are_accepted_without_the_flag(self):
        out, _ = self.received("none", "noise", client_compression="gzip")
        np.testing.assert_array_equal(out, self.noise[self.indices])

    def test_the_cpp_client_gets_compressed_answers_and_plain_health(self):
        # Debian's gRPC 1.51 C++ client crashed when its client-side health check received a
        # compressed message: the server compresses only the compute answers.
        cli = os.environ.get("TC_CLI_BINARY")
        if not cli:
            self.skipTest("TC_CLI_BINARY not set")
        indices = os.path.join(self.tmp.name, "indices.json")
        with open(indices, "w") as f:
            f.write('{"dtype": "int64", "values": %s}' % list(range(0, ROWS, 2)))
        with ServerProcess("--grpc_compression=gzip", f"--preload=zeros={self.zeros}") as server:
            for _ in range(100):
                listed = subprocess.run([cli, "list", "--target", server.target],
                                        capture_output=True, text=True, timeout=60)
                self.assertEqual(listed.returncode, 0, listed.stderr)
                if "zeros" in listed.stdout:
                    break
                time.sleep(0.1)
            with CountingProxy(server.target) as proxy:
                out = os.path.join(self.tmp.name, "out.npy")
                got = subprocess.run([cli, "gather", "--target", proxy.target, "--params-name",
                                      "zeros", "--indices", indices, "--out", out],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(got.returncode, 0, got.stderr)
                self.assertEqual(np.load(out).shape, (ROWS // 2, 64))
                self.assertFalse(np.load(out).any())
                self.assertLess(proxy.received, ROWS // 2 * 64 * 4 // 20)

    def test_answers_use_only_a_compression_the_client_accepts(self):
        """gRPC's compression spec: an answer never uses an algorithm the client left out of its
        grpc-accept-encoding (grpc-go without its gzip package sends none; grpc-java has no
        deflate). A hand-made call names what it accepts and reads the answer's first bytes: the
        message's compressed flag, then gzip's magic (1f 8b) or zlib's header (78 ..) for
        deflate."""
        # 16 KiB of zero params (under HTTP/2's initial 64 KiB window) and a 16 KiB answer.
        request = gather_request(16, 1024, 16, params=bytes(16 * 1024))
        every = "identity,deflate,gzip"  # what gRPC's C core sends
        cases = [  # flag, the client's grpc-accept-encoding (None: no header), what comes back
            ("gzip", every, "gzip"), ("deflate", every, "deflate"),
            ("gzip", "identity", "plain"), ("deflate", "identity", "plain"),
            ("gzip", None, "plain"), ("deflate", None, "plain"),
            ("gzip", "identity,deflate", "deflate"), ("deflate", "identity,gzip", "gzip"),
            ("none", every, "plain")]
        for flag in ("gzip", "deflate", "none"):
            with ServerProcess(f"--grpc_compression={flag}") as server:
                for case_flag, accepts, expected in cases:
                    if case_flag != flag:
                        continue
                    extra = [] if accepts is None else [("grpc-accept-encoding", accepts)]
                    head = first_answer_bytes(server.port, GATHER, request, extra)
                    self.assertIsNotNone(head, (flag, accepts))
                    got = ("plain" if head[0] == 0 else "gzip" if head[5:7] == b"\x1f\x8b"
                           else "deflate" if head[5] == 0x78 else head.hex())
                    self.assertEqual(got, expected, f"--grpc_compression={flag}, client "
                                     f"accepts {accepts}")

    def test_a_bad_value_stops_the_server_at_start(self):
        result = subprocess.run([os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                                 "--metrics_listen=", "--grpc_compression=brotli"],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("grpc_compression: compression 'brotli' is not one of none, gzip, deflate",
                      result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
