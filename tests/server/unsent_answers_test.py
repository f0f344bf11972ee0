"""Answers a client never takes are given up within their send limit, and the client that asks
for them holds no more than its share of the budget meanwhile (docs/reliability.md, "Answers
never taken").

Against the real tensorcompute-server, with a 64 MiB resident table of 64 KiB rows (--preload),
a short send limit (--answer_send_timeout_s=1 --http_write_timeout_s=1
--answer_send_min_bytes_per_s=64 MiB/s: a 62.5 MiB answer gets about 2 s), a 4 GiB budget
and the default share (--max_inflight_share 0.25: 1 GiB, 16 of the attack's answers):

  - the attack: 24 Gather calls over 3 HTTP/2 connections from 127.0.0.2, each asking by name
    for 1,000 rows of the table (an 8 KB request, a 62.5 MiB answer), with the client's
    flow-control window set to 1 byte (SETTINGS_INITIAL_WINDOW_SIZE) and never raised, while
    its connections stay alive (it answers the server's pings). Every call must end within the
    limit plus the time to compute the answers, with the attacker's connections still open:
    given up (tensorcompute_answers_cancelled_unsent_total{front_end="native"}, the stream
    reset) or, past the attacker's share, refused UNAVAILABLE at once
    (tensorcompute_inflight_share_refusals_total), the two adding up to 24; the budget
    (tensorcompute_inflight_bytes) must fall back; one log line for 127.0.0.2. Beside it, a
    well-behaved client (the bundled load tester, closed loop, from 127.0.0.1, started first)
    gets at least MIN_OK_SHARE of its calls OK.
  - the same over 100 connections (one call each, 6.1 GiB of answers asked of the 4 GiB budget):
    without the share the attacker held the whole budget for seconds and the well-behaved client
    got 4.5% OK; now at least MIN_OK_SHARE, and the attacker never holds much more than its share.
  - the same with KServe's ModelInfer over gRPC (2 calls) and over HTTP (one infer whose
    binary answer is never read: the connection is closed).

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY and
TC_CLI_BINARY set; the figures are printed. `python3 unsent_answers_test.py --connections N`
prints the figures of the attack over N connections (one call each), as a measurement;
`--share F` runs the server with --max_inflight_share=F (1: no share).
"""

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from grpc_by_hand import GATHER, call_frames, call_headers, field, int_field, tensor
from h2_frames import ACK, DATA, GOAWAY, HEADERS, PING, PREFACE, RST_STREAM, SETTINGS, frame, \
    read_frames
from prometheus_scrape import labels, scrape
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")
DT_INT64 = 5  # tensorcompute.v1.DataType
SOURCE = "127.0.0.2"  # the attacker's address
ROWS, ROW_BYTES, ASKED = 1024, 65536, 1000  # a 64 MiB table; 62.5 MiB answers
ANSWER_BYTES = ASKED * ROW_BYTES
BASE_S, RATE = 1, 64 << 20  # the send limit's flags here
LIMIT_S = BASE_S + ANSWER_BYTES / RATE  # what one answer gets: 1.98 s
SLACK_S = 8  # computing 1.5 GB of answers on two shared cores, and the scrapes
MIN_OK_SHARE = 0.99
GOOD = ["--rows", "256", "--slice", "64", "--indices", "64"]  # 64 KiB params, 16 KiB out
INFER = "/inference.GRPCInferenceService/ModelInfer"
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
UNSENT = "tensorcompute_answers_cancelled_unsent_total"
SHARE_REFUSED = "tensorcompute_inflight_share_refusals_total"
SHARE_BYTES = (4 << 30) // 4  # the default --max_inflight_share of the 4 GiB budget


def write_table(path):
    """A uint8 [ROWS, ROW_BYTES] .npy (version 1.0, zeros: the content does not matter)."""
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({ROWS}, {ROW_BYTES}), }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.truncate(f.tell() + ROWS * ROW_BYTES)


def indices():
    return [(i * 7) % ROWS for i in range(ASKED)]


def gather_by_name():
    """A GatherRequest for ASKED rows of "table": int64 indices, 8 KB."""
    data = struct.pack(f"<{ASKED}q", *indices())
    return field(2, tensor(DT_INT64, [ASKED], data)) + field(5, b"table")


def model_infer():
    """A ModelInferRequest for the same rows: INT64 indices in raw_input_contents."""
    indices_input = field(1, b"indices") + field(2, b"INT64") + int_field(3, ASKED)
    return (field(1, b"table") + field(5, indices_input) +
            field(7, struct.pack(f"<{ASKED}q", *indices())))


class StalledReader:
    """HTTP/2 connections from SOURCE that announce a 1-byte stream window, send their calls,
    and then read only to stay alive: PINGs are answered, DATA is dropped, no WINDOW_UPDATE is
    ever sent. Counts the streams the server reset or ended, and whether a connection closed."""

    def __init__(self, port, connections, calls_per_connection, path, message, source=SOURCE,
                 extra_headers=lambda connection: ()):
        self.port, self.path, self.message = port, path, message
        self.source, self.extra_headers = source, extra_headers
        self.connections, self.calls = connections, calls_per_connection
        self.sockets, self.threads = [], []
        self.lock = threading.Lock()
        self.reset, self.ended, self.closed, self.goaway = set(), set(), 0, 0
        self.stop = threading.Event()

    def start(self):
        settings = frame(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, 1))
        for c in range(self.connections):
            headers = call_headers(self.port, self.path, self.extra_headers(c))
            s = socket.create_connection(("127.0.0.1", self.port),
                                         source_address=(self.source, 0))
            s.sendall(PREFACE + settings)
            s.sendall(b"".join(call_frames(1 + 2 * i, headers, self.message)
                               for i in range(self.calls)))
            self.sockets.append(s)
            t = threading.Thread(target=self.serve, args=(c, s), daemon=True)
            t.start()
            self.threads.append(t)

    def serve(self, c, s):
        buffer = b""
        s.settimeout(0.2)
        while not self.stop.is_set():
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                with self.lock:
                    self.closed += 1
                return
            frames, buffer = read_frames(buffer + chunk)
            for kind, flags, stream, payload in frames:
                if kind == SETTINGS and not flags & ACK:
                    s.sendall(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    s.sendall(frame(PING, ACK, 0, payload))
                elif kind == RST_STREAM:
                    with self.lock:
                        self.reset.add((c, stream))
                elif kind in (HEADERS, DATA) and flags & 0x1:  # END_STREAM: trailers came
                    with self.lock:
                        self.ended.add((c, stream))
                elif kind == GOAWAY:
                    with self.lock:
                        self.goaway += 1

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in self.sockets:
            s.close()


def unsent(port, front_end):
    return scrape(port).get((UNSENT, labels(front_end=front_end)), 0)


def inflight_bytes(port):
    return scrape(port).get(("tensorcompute_inflight_bytes", labels()), 0)


def share_refused(port):
    return scrape(port).get((SHARE_REFUSED, labels()), 0)


def wait_for(condition, timeout, step=0.05):
    """Polls until `condition()` is true; returns the seconds it took, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if condition():
            return time.monotonic() - start
        time.sleep(step)
    return None


def good_client(port, seconds):
    run = subprocess.run(
        [CLI, "load", "--target", f"127.0.0.1:{port}", "--warmup", "0", "--json", "-", *GOOD,
         "--concurrency", "2", "--duration", str(seconds), "--timeout", "10"],
        capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def start_server(table, *flags):
    """The server of these tests: the send limit above, a 4 GiB budget, the default share."""
    return ServerProcess(
        f"--preload=table={table}", f"--answer_send_timeout_s={BASE_S}",
        f"--answer_send_min_bytes_per_s={RATE}", "--max_inflight_bytes=4294967296",
        "--http_listen=127.0.0.1:0", f"--http_write_timeout_s={BASE_S}", *flags)


def attack(server, connections, calls_per_connection, good_alone_s=3, good=None,
           source=SOURCE, extra_headers=lambda connection: ()):
    """The attack beside the good client (`good(port, seconds)`, the load tester by default),
    which starts first; returns the figures."""
    port, metrics = server.port, server.metrics_port
    good = good or good_client
    calls = connections * calls_per_connection
    alone = good(port, good_alone_s) if good_alone_s else None
    attacker = StalledReader(port, connections, calls_per_connection, GATHER, gather_by_name(),
                             source, extra_headers)
    beside = {}
    good_thread = threading.Thread(target=lambda: beside.update(good(port, 6)))
    try:
        good_thread.start()
        time.sleep(0.5)  # the well-behaved client is there first, as a server's clients are
        attacker.start()
        sent = time.monotonic()
        peak = [0]

        def all_ended():  # given up, or refused when the budget had no room for them
            peak[0] = max(peak[0], inflight_bytes(metrics))
            with attacker.lock:
                return len(attacker.reset | attacker.ended) >= calls

        took = wait_for(all_ended, timeout=60)
        freed_s = None if took is None else time.monotonic() - sent
        # OnDone counts it
        wait_for(lambda: unsent(metrics, "native") + share_refused(metrics) >= calls, timeout=2)
        good_thread.join()
        # The good client has gone: what is left in the budget is the attacker's.
        left = inflight_bytes(metrics)
        with attacker.lock:
            seen = {"reset": len(attacker.reset), "trailers": len(attacker.ended),
                    "either": len(attacker.reset | attacker.ended),
                    "closed": attacker.closed, "goaway": attacker.goaway}
    finally:
        attacker.close()
    logged = [line for line in server.output if f"was not taken by {source}" in line]
    return {
        "calls": calls, "connections": connections, "answer_mib": ANSWER_BYTES / 2**20,
        "limit_s": round(LIMIT_S, 2), "all_ended_after_s": freed_s,
        "given_up": unsent(metrics, "native"), "refused_by_share": share_refused(metrics),
        "inflight_bytes_peak": peak[0],
        "inflight_bytes_after": left, "attacker_saw": seen, "log_lines": len(logged),
        "alone": alone and {"sent": alone["sent"], "by_code": alone["by_code"],
                            "p99_ms": alone["latency_us_p99"] / 1000},
        "beside": {"sent": beside.get("sent"), "by_code": beside.get("by_code"),
                   "p50_ms": beside.get("latency_us_p50", 0) / 1000,
                   "p99_ms": beside.get("latency_us_p99", 0) / 1000,
                   "max_ms": beside.get("latency_us_max", 0) / 1000},
    }


class UnsentAnswersTest(unittest.TestCase):
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

    def check_attack(self, figures):
        """What both attacks must show: every call ended in time, given up or refused by the
        share; the answers held were the share's worth, no more; the budget freed; the
        connections open; one log line; the well-behaved client served."""
        print(json.dumps(figures, indent=2), flush=True)
        calls = figures["calls"]
        self.assertIsNotNone(figures["all_ended_after_s"],
                             f"{figures['attacker_saw']} of {calls} calls ended in 60 s")
        self.assertLessEqual(figures["all_ended_after_s"], LIMIT_S + SLACK_S)
        self.assertEqual(figures["given_up"] + figures["refused_by_share"], calls)
        self.assertGreater(figures["inflight_bytes_peak"], 10 * ANSWER_BYTES,
                           "the answers were held until their limit")
        # The share, and room for calls being read (receive credits of 128 MiB, not in the
        # share: a scrape may catch a few); without the share the attack takes the 4 GiB.
        self.assertLess(figures["inflight_bytes_peak"], SHARE_BYTES + (512 << 20),
                        "the attacker held no more than its share")
        self.assertLess(figures["inflight_bytes_after"], 16 << 20, "the budget is freed")
        seen = figures["attacker_saw"]
        self.assertEqual(seen["closed"], 0, "the attacker's connections stayed open")
        self.assertEqual(seen["either"], calls, "every stream was ended")
        self.assertEqual(figures["log_lines"], 1, "one log line for the peer")
        beside = figures["beside"]
        ok = beside["by_code"].get("OK", 0)
        self.assertGreaterEqual(ok, MIN_OK_SHARE * beside["sent"], beside)

    def test_never_read_gather_answers_are_given_up_within_their_limit(self):
        with start_server(self.table) as server:
            self.check_attack(attack(server, connections=3, calls_per_connection=8))

    def test_over_100_connections_the_attacker_holds_only_its_share(self):
        with start_server(self.table) as server:
            figures = attack(server, connections=100, calls_per_connection=1, good_alone_s=0)
        self.check_attack(figures)
        self.assertGreater(figures["refused_by_share"], 0)

    def test_never_read_kserve_answers_are_given_up(self):
        with start_server(self.table) as server:
            metrics = server.metrics_port
            attacker = StalledReader(server.port, 1, 2, INFER, model_infer())
            try:
                attacker.start()
                took = wait_for(lambda: unsent(metrics, "kserve_grpc") >= 2, timeout=30)
                self.assertIsNotNone(took, "both ModelInfer answers given up")
                self.assertLessEqual(took, LIMIT_S + SLACK_S)
                self.assertIsNotNone(wait_for(lambda: inflight_bytes(metrics) < 1 << 20, 5))
                self.assertEqual(attacker.closed, 0)
            finally:
                attacker.close()

            # HTTP: a binary answer of 62.5 MiB to a client that never reads its socket.
            body = json.dumps({
                "inputs": [{"name": "indices", "datatype": "INT64", "shape": [ASKED],
                            "data": indices()}],
                "parameters": {"binary_data_output": True}}).encode()
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind((SOURCE, 0))
            s.connect(("127.0.0.1", server.http_port))
            try:
                s.sendall(b"POST /v2/models/table/infer HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\n" +
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                took = wait_for(lambda: unsent(metrics, "kserve_http") >= 1, timeout=30)
                self.assertIsNotNone(took, "the HTTP answer given up")
                self.assertLessEqual(took, LIMIT_S + SLACK_S)
                self.assertIsNotNone(wait_for(lambda: inflight_bytes(metrics) < 1 << 20, 5))
            finally:
                s.close()
            print(json.dumps({"kserve_grpc": unsent(metrics, "kserve_grpc"),
                              "kserve_http": unsent(metrics, "kserve_http")}), flush=True)
            # One line for 127.0.0.2 across the front ends.
            self.assertEqual(
                sum("was not taken by 127.0.0.2" in line for line in server.output), 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=0,
                        help="measure the attack over this many connections, one call each")
    parser.add_argument("--share", type=float, default=None,
                        help="the server's --max_inflight_share (default: the server's)")
    args, rest = parser.parse_known_args()
    if not args.connections:
        unittest.main(argv=[sys.argv[0], *rest])
        return
    flags = [] if args.share is None else [f"--max_inflight_share={args.share}"]
    with tempfile.TemporaryDirectory() as d:
        table = os.path.join(d, "table.npy")
        write_table(table)
        with start_server(table, *flags) as server:
            print(json.dumps(attack(server, args.connections, 1), indent=2), flush=True)


if __name__ == "__main__":
    main()
