"""The gRPC listener out of file descriptors (server/grpc_acceptor.h; docs/reliability.md,
"Hostile gRPC connections").

gRPC 1.51's own listener closes for good the first time accept() fails with EMFILE: a client
that opened as many connections as the server had descriptors took the port down until a
restart (found in CI, behind the edge: a rapid-reset flood made nginx open a thousand upstream
connections to a server limited to 1,024 descriptors, and a Gather minutes later hung). The
server now accepts itself. Against the real binary under `ulimit -n 128`, with
--descriptor_reserve=32 and --handshake_timeout_s=2, an attacker opens 384 idle TCP connections
to the gRPC port (most of them beyond what the server can hold); asserted:

  - the server closes the ones it has no room for at once (counted in
    tensorcompute_grpc_refused_connections_total) and does not spin (CPU);
  - its metrics endpoint still answers (the reserve is left for the rest of the server);
  - the idle connections it did take are closed by the handshake timeout, and a good client is
    then served while the attacker still holds its sockets;
  - after the attacker has gone, a good client is served (the listener lives).

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set.
"""

import os
import socket
import time
import unittest

import grpc

from grpc_by_hand import GATHER, gather_request
from prometheus_scrape import labels, scrape
from server_process import ServerProcess

FILES = 128
RESERVE = 32
HANDSHAKE_TIMEOUT_S = 2
ATTACKERS = 3 * FILES
REFUSED = "tensorcompute_grpc_refused_connections_total"


def good_call(port, timeout):
    """A small Gather on a channel of its own: True if answered OK within `timeout`."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(GATHER)(gather_request(4, 8, 2), timeout=timeout,
                                        wait_for_ready=True)
            return True
        except grpc.RpcError:
            return False


class GrpcDescriptorsTest(unittest.TestCase):

    @unittest.skipIf(os.environ.get("TC_SANITIZED"),
                     "UBSan's vptr check probes memory through a pipe: out of descriptors, it "
                     "reports every virtual call as 'invalid vptr'")
    def test_out_of_descriptors_the_grpc_listener_sheds_and_lives(self):
        with ServerProcess(f"--descriptor_reserve={RESERVE}",
                           f"--handshake_timeout_s={HANDSHAKE_TIMEOUT_S}",
                           open_files=FILES) as server:
            self.assertTrue(any(f"soft limit {FILES}" in line for line in server.output),
                            server.output)
            self.assertTrue(good_call(server.port, timeout=10))
            cpu_before = server.cpu_seconds()
            start = time.monotonic()
            attackers = []
            for _ in range(ATTACKERS):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", server.port))
                attackers.append(s)
            time.sleep(1)
            refused = scrape(server.metrics_port)[(REFUSED, labels())]
            self.assertGreater(refused, 0)
            # The attacker still holds every socket; the server's are closed by the
            # handshake timeout, and a good client gets in.
            served = good_call(server.port, timeout=HANDSHAKE_TIMEOUT_S + 8)
            waited = time.monotonic() - start
            cpu = server.cpu_seconds() - cpu_before
            print(f"open files {FILES}, reserve {RESERVE}: {ATTACKERS} idle connections; "
                  f"{refused:.0f} closed at once; good client served {served} after "
                  f"{waited:.1f} s; server CPU {cpu:.2f} s")
            self.assertTrue(served)
            self.assertLess(cpu, 1.5, "the acceptor spins")
            for s in attackers:
                s.close()
            self.assertTrue(good_call(server.port, timeout=10))
            self.assertIn((REFUSED, labels()), scrape(server.metrics_port))


if __name__ == "__main__":
    unittest.main()
