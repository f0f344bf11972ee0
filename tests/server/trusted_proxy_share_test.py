"""The share of the budget behind a proxy (docs/reliability.md, "Answers never taken";
server/admission/client_identity.h): the X-Forwarded-For header names the client only when it
comes from a proxy the server trusts (--trusted_proxies).

Against the real tensorcompute-server set up as unsent_answers_test.py's (a 64 MiB resident
table of 64 KiB rows, a ~2 s send limit for 62.5 MiB answers, a 4 GiB budget, the default
share of a quarter), with --trusted_proxies=127.0.0.1:

  - two clients behind the proxy, both connecting from 127.0.0.1 as an edge's would: one
    (x-forwarded-for: 198.51.100.7) sends 100 never-read Gathers of 62.5 MiB answers over 100
    connections; the other (x-forwarded-for: 198.51.100.8, grpcio, 2 calls at a time of 256 KiB
    answers) gets at least 99% OK beside it, and the server's refusals name 198.51.100.7. Were
    the header not believed, both would be one client, 127.0.0.1, and the hog would hold the
    whole budget (unsent_answers_test's 100-connection attack without the share: 4.5% OK).
  - a client that is not a trusted proxy (127.0.0.2) names itself someone else on each of its
    100 connections (x-forwarded-for: 198.51.100.0 to .99) to look like 100 clients: the header
    is ignored, the share holds it as one client (refusals name 127.0.0.2, never a forwarded
    address; it holds no more than its share), and the load tester beside it gets 99% OK.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY and
TC_CLI_BINARY set; the figures are printed.
"""

import collections
import json
import os
import struct
import tempfile
import threading
import time
import unittest

import grpc

from grpc_by_hand import GATHER, field, tensor
from unsent_answers_test import CLI, DT_INT64, MIN_OK_SHARE, attack, start_server, write_table

HOG, GOOD = "198.51.100.7", "198.51.100.8"


def forwarded_client(forwarded):
    """A well-behaved client behind the proxy: grpcio from 127.0.0.1 with x-forwarded-for:
    `forwarded`, 2 calls at a time of 4 rows (256 KiB answers), for `seconds`."""

    def run(port, seconds):
        request = (field(2, tensor(DT_INT64, [4], struct.pack("<4q", 1, 2, 3, 4))) +
                   field(5, b"table"))
        codes, latencies, lock = collections.Counter(), [], threading.Lock()
        end = time.monotonic() + seconds
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            gather = channel.unary_unary(GATHER)  # bytes in, bytes out

            def loop():
                while time.monotonic() < end:
                    start = time.monotonic()
                    try:
                        gather(request, metadata=[("x-forwarded-for", forwarded)], timeout=10)
                        code = "OK"
                    except grpc.RpcError as e:
                        code = e.code().name
                    with lock:
                        codes[code] += 1
                        latencies.append(time.monotonic() - start)

            threads = [threading.Thread(target=loop) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        latencies.sort()

        def us(q):
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e6

        return {"sent": sum(codes.values()), "by_code": dict(codes), "latency_us_p50": us(0.5),
                "latency_us_p99": us(0.99), "latency_us_max": latencies[-1] * 1e6}

    return run


class TrustedProxyShareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not CLI or not os.path.exists(CLI):
            raise unittest.SkipTest(f"TC_CLI_BINARY not set or missing: {CLI!r}")
        cls.dir = tempfile.TemporaryDirectory()
        cls.table = os.path.join(cls.dir.name, "table.npy")
        write_table(cls.table)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def check(self, figures, server, named, not_named):
        print(json.dumps(figures, indent=2), flush=True)
        self.assertIsNotNone(figures["all_ended_after_s"], figures["attacker_saw"])
        self.assertEqual(figures["attacker_saw"]["either"], figures["calls"])
        self.assertGreater(figures["refused_by_share"], 0)
        self.assertLess(figures["inflight_bytes_peak"], (1 << 30) + (512 << 20),
                        "the hog held no more than one client's share")
        refusals = [line for line in server.output if "(--max_inflight_share)" in line]
        self.assertTrue(any(f"this client ({named}) holds" in line for line in refusals),
                        refusals[:3])
        self.assertFalse(any(f"this client ({not_named}" in line for line in refusals),
                         refusals[:3])
        beside = figures["beside"]
        self.assertGreaterEqual(beside["by_code"].get("OK", 0), MIN_OK_SHARE * beside["sent"],
                                beside)

    def test_a_trusted_proxys_header_separates_its_clients(self):
        with start_server(self.table, "--trusted_proxies=127.0.0.1") as server:
            figures = attack(server, connections=100, calls_per_connection=1, good_alone_s=0,
                             good=forwarded_client(GOOD), source="127.0.0.1",
                             extra_headers=lambda c: [("x-forwarded-for", HOG)])
            self.check(figures, server, named=HOG, not_named=GOOD)

    def test_the_header_of_a_peer_not_trusted_is_ignored(self):
        with start_server(self.table, "--trusted_proxies=127.0.0.1") as server:
            figures = attack(server, connections=100, calls_per_connection=1, good_alone_s=0,
                             extra_headers=lambda c: [("x-forwarded-for", f"198.51.100.{c}")])
            self.check(figures, server, named="127.0.0.2", not_named="198.51.100.")


if __name__ == "__main__":
    unittest.main()
