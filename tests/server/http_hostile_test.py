"""Hostile clients against the KServe v2 HTTP/REST listener (issue 22; docs/kserve.md, "Limits").

Each test starts the real tensorcompute-server with --http_listen and bearer tokens, attacks its
HTTP port with hand-made requests (a hostile client cannot be a stock client), and asserts:

  - what the attacker gets back (the status, and that it comes before the body when the
    headers alone settle it), and how many of its bytes the server took;
  - the server's peak RSS (VmHWM: each test has a server of its own) stays under its RSS before
    the attack plus what the attack may legitimately hold (stated per test, at most 2x
    --max_message_bytes per request) plus SLACK_MIB;
  - a well-behaved client (a small infer with the token, on connections of its own) is answered
    during the attack and after it.

The figures (peak RSS, bytes taken, answers) are printed for docs/reliability.md.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set.
"""

import gzip
import json
import os
import resource
import socket
import tempfile
import threading
import time
import unittest

from prometheus_scrape import labels, scrape
from server_process import ServerProcess

MIB = 1 << 20
TOKEN = "s3cret"
MAX_MESSAGE = 64 * MIB  # the server's default --max_message_bytes
SLACK_MIB = 96  # allocator and thread caches, connection buffers, the good client's calls
HEADER_TIMEOUT_S = 2          # --http_header_timeout_s
BODY_PROGRESS_TIMEOUT_S = 2   # --http_body_progress_timeout_s
BODY_TIMEOUT_S = 4            # --http_body_timeout_s
IDLE_CONNECTIONS = 5000
INFER = "/v2/models/gather/infer"
GOOD_BODY = json.dumps({"inputs": [
    {"name": "params", "shape": [4], "datatype": "FP32", "data": [0.5, 1.5, 2.5, 3.5]},
    {"name": "indices", "shape": [2], "datatype": "INT64", "data": [3, 1]}]}).encode()


def request_head(method, path, headers):
    lines = [f"{method} {path} HTTP/1.1", "Host: tc"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock, timeout=10):
    """One HTTP/1.1 response from `sock`: (status, headers dict (lower-case names), body), or
    None when the connection closes (or times out) before a status line."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (socket.timeout, ConnectionError):
        return None
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    try:
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    except (socket.timeout, ConnectionError):
        pass
    return status, headers, rest[:length]


def error_of(body):
    try:
        return json.loads(body).get("error", "")
    except ValueError:
        return body.decode("latin-1")


def closed_by_peer(sock, timeout):
    """True when the server closes `sock` within `timeout` seconds (whatever it sent first)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except ConnectionError:
        return True
    return False


class GoodClient:
    """Small infers with the token, each on a new connection, in a thread, until stopped;
    counts answers by status (None: no answer)."""

    def __init__(self, port):
        self.port = port
        self.statuses = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def call(self, auth=True):
        auth = [("Authorization", f"Bearer {TOKEN}")] if auth else []
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(request_head("POST", INFER, [
                *auth, ("Content-Type", "application/json"),
                ("Content-Length", len(GOOD_BODY))]) + GOOD_BODY)
            answer = read_response(sock)
        status = answer[0] if answer else None
        if status == 200 and json.loads(answer[2])["outputs"][0]["data"] != [3.5, 1.5]:
            status = "wrong answer"
        return status

    def _run(self):  # at least one call, however short the attack
        while True:
            status = self.call()
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if self._stop.wait(0.05):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


class HttpHostileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tokens = f"{cls.tmp.name}/tokens"
        with open(cls.tokens, "w") as f:
            f.write(TOKEN + "\n")
        # The idle-connection test holds 5,000 sockets (the server raises its own soft limit).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.server = ServerProcess(
            "--http_listen=127.0.0.1:0", f"--auth_token_file={self.tokens}",
            f"--http_header_timeout_s={HEADER_TIMEOUT_S}",
            f"--http_body_progress_timeout_s={BODY_PROGRESS_TIMEOUT_S}",
            f"--http_body_timeout_s={BODY_TIMEOUT_S}", *self.extra_flags())
        self.server.__enter__()
        self.port = self.server.http_port
        self.good = GoodClient(self.port)
        self.assertEqual(self.good.call(), 200)  # warm: the baseline holds the threads
        self.base_mib = self.server.status_kib("VmRSS") / 1024

    def tearDown(self):
        self.server.__exit__(None, None, None)

    def extra_flags(self):
        return []

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def check_after(self, what, held_mib, good=None):
        """The well-behaved client was answered during the attack (`good`, when it ran), is
        answered now, and the peak RSS stayed under base + held_mib + SLACK_MIB."""
        hwm_mib = self.server.status_kib("VmHWM") / 1024
        print(f"{what}: RSS before {self.base_mib:.0f} MiB, peak {hwm_mib:.0f} MiB (bound "
              f"{self.base_mib:.0f} + {held_mib:.0f} + {SLACK_MIB}); good client during: "
              f"{good and good.statuses}")
        if not os.environ.get("TC_SANITIZED"):  # ASan's quarantine is not the server's
            self.assertLessEqual(hwm_mib, self.base_mib + held_mib + SLACK_MIB, what)
        if good is not None:
            self.assertEqual(set(good.statuses), {200}, f"{what}: good client during the attack")
        self.assertEqual(self.good.call(), 200, f"{what}: good client after the attack")

    def stream_chunks(self, sock, total, chunk=MIB):
        """Sends chunked-body chunks of `chunk` bytes until `total` or the server stops taking
        them; returns the bytes sent."""
        piece = f"{chunk:x}\r\n".encode() + b"[" * chunk + b"\r\n"
        sent = 0
        try:
            while sent < total:
                sock.sendall(piece)
                sent += chunk
        except (ConnectionError, socket.timeout):
            pass
        return sent

    # ---- the body, before and after the token ----

    def test_chunked_gigabytes_without_a_token_get_401_before_the_body(self):
        with GoodClient(self.port) as good, self.connect() as sock:
            sock.sendall(request_head("POST", INFER, [("Transfer-Encoding", "chunked"),
                                                      ("Content-Type", "application/json")]))
            answer = read_response(sock, timeout=5)  # before one byte of body
            self.assertIsNotNone(answer, "no answer to the headers alone")
            self.assertEqual(answer[0], 401, answer)
            self.assertIn("Bearer", error_of(answer[2]))
            sent = self.stream_chunks(sock, 1200 * MIB)
            print(f"no token: 401 before the body; the server took {sent / MIB:.0f} MiB "
                  "of 1200 before closing")
            self.assertLess(sent, 64 * MIB)
        self.check_after("1.2 GB chunked, no token", 0, good)

    def test_a_proxy_that_writes_the_body_before_reading_still_gets_the_401(self):
        # As nginx does with proxy_request_buffering off: the body goes out before the answer
        # is read. The server answers 401 on the headers and must not reset the connection
        # while the proxy is still writing, or the proxy sees a reset and answers 502.
        with self.connect() as sock:
            body = 16 * MIB
            sock.sendall(request_head("POST", INFER, [("Content-Length", str(body)),
                                                      ("Content-Type", "application/json")]))
            sock.sendall(b"[" * body)
            answer = read_response(sock, timeout=10)
            self.assertIsNotNone(answer, "the connection was reset before the 401 was read")
            self.assertEqual(answer[0], 401, answer)
        self.assertEqual(self.good.call(), 200)

    def test_chunked_gigabytes_with_a_token_get_413_at_the_limit(self):
        with GoodClient(self.port) as good, self.connect() as sock:
            sock.sendall(request_head("POST", INFER, [
                ("Authorization", f"Bearer {TOKEN}"), ("Transfer-Encoding", "chunked"),
                ("Content-Type", "application/json")]))
            answers = []
            reader = threading.Thread(target=lambda: answers.append(read_response(sock, 60)))
            reader.start()
            sent = self.stream_chunks(sock, 1200 * MIB)
            reader.join()
            answer = answers[0]
            print(f"token: {answer and answer[0]} after {sent / MIB:.0f} MiB sent of 1200")
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 413, answer)
            self.assertIn("max_message_bytes", error_of(answer[2]))
            self.assertLess(sent, MAX_MESSAGE + 64 * MIB)
        self.check_after("1.2 GB chunked, with token", 2 * MAX_MESSAGE / MIB, good)

    def test_negative_chunk_size_is_400(self):
        with GoodClient(self.port) as good, self.connect() as sock:
            sock.sendall(request_head("POST", INFER, [
                ("Authorization", f"Bearer {TOKEN}"), ("Transfer-Encoding", "chunked")]) +
                b"-2\r\n[[\r\n0\r\n\r\n")
            answer = read_response(sock)
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 400, answer)
            print(f"chunk size -2: {answer[0]} {error_of(answer[2])!r}")
        self.check_after("chunk size -2", 0, good)

    # ---- the JSON decoder ----

    def brackets(self, n_requests):
        body = b"[" * (60 * MIB)
        results = []

        def one():
            with self.connect() as sock:
                sock.sendall(request_head("POST", INFER, [
                    ("Authorization", f"Bearer {TOKEN}"), ("Content-Type", "application/json"),
                    ("Content-Length", len(body))]))
                try:
                    sock.sendall(body)
                except ConnectionError:
                    pass
                results.append(read_response(sock, 120))

        with GoodClient(self.port) as good:
            threads = [threading.Thread(target=one) for _ in range(n_requests)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for answer in results:
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 400, answer[:2])
        print(f"60 MiB of '[' x{n_requests}: {[a[0] for a in results]} "
              f"{error_of(results[0][2])!r}")
        # Each body is held while it decodes, and the decode holds less than the body again.
        self.check_after(f"60 MiB of '[' x{n_requests}", n_requests * 2 * 60, good)

    def test_sixty_mib_of_open_brackets(self):
        self.brackets(1)

    def test_sixty_mib_of_open_brackets_eight_at_once(self):
        self.brackets(8)

    # ---- framing and headers ----

    def test_gzip_bomb_is_415_unread(self):
        # 10 MiB of gzip members, each 64 MiB of zeros: 10 GiB once expanded.
        member = gzip.compress(b"\0" * (64 * MIB), compresslevel=9)
        bomb = member * (10 * MIB // len(member) + 1)
        with GoodClient(self.port) as good, self.connect() as sock:
            sock.sendall(request_head("POST", INFER, [
                ("Authorization", f"Bearer {TOKEN}"), ("Content-Encoding", "gzip"),
                ("Content-Type", "application/json"), ("Content-Length", len(bomb))]))
            try:
                sock.sendall(bomb)
            except ConnectionError:
                pass
            answer = read_response(sock)
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 415, answer)
            print(f"gzip bomb: {answer[0]} {error_of(answer[2])!r}")
        # Refused from the header: the body is never read, let alone inflated.
        self.check_after(f"gzip bomb ({len(bomb) / MIB:.0f} MiB -> 10 GiB)", 0, good)

    def test_too_many_header_lines_is_431(self):
        with GoodClient(self.port) as good, self.connect() as sock:
            sock.sendall(request_head("GET", "/v2", [(f"X-Filler-{i}", "x") for i in range(200)]))
            answer = read_response(sock)
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 431, answer)
            print(f"200 header lines: {answer[0]} {error_of(answer[2])!r}")
        self.check_after("200 header lines", 0, good)

    def test_one_mebibyte_header_line_is_431(self):
        with GoodClient(self.port) as good, self.connect() as sock:
            try:
                sock.sendall(request_head("GET", "/v2", [("X-Filler", "x" * MIB)]))
            except ConnectionError:
                pass
            answer = read_response(sock)
            self.assertIsNotNone(answer)
            self.assertEqual(answer[0], 431, answer)
            print(f"one 1 MiB header line: {answer[0]} {error_of(answer[2])!r}")
        self.check_after("one 1 MiB header line", 0, good)

    def test_content_length_with_transfer_encoding_is_400(self):
        with GoodClient(self.port) as good:
            for framing in ([("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
                            [("Content-Length", "5"), ("Content-Length", "6")]):
                with self.connect() as sock:
                    sock.sendall(request_head("POST", INFER, [("Authorization", f"Bearer {TOKEN}"),
                                                              *framing]) + b"0\r\n\r\n")
                    answer = read_response(sock)
                    self.assertIsNotNone(answer, framing)
                    self.assertEqual(answer[0], 400, (framing, answer))
                    print(f"{framing}: {answer[0]} {error_of(answer[2])!r}")
                    self.assertTrue(closed_by_peer(sock, 5), framing)
        self.check_after("CL+TE, two CLs", 0, good)

    # ---- connections ----

    def test_slowloris_connections_are_closed(self):
        socks = [self.connect() for _ in range(64)]
        start = time.monotonic()
        with GoodClient(self.port) as good:
            head = request_head("POST", INFER, [("Authorization", f"Bearer {TOKEN}"),
                                                ("Content-Length", "100")])
            open_socks = list(socks)
            for i in range(len(head) + 100):  # a byte a second, header then body
                byte = (head + b" " * 100)[i:i + 1]
                still = []
                for s in open_socks:
                    try:
                        s.sendall(byte)
                        still.append(s)
                    except ConnectionError:
                        pass
                open_socks = still
                if not open_socks or time.monotonic() - start > 4 * HEADER_TIMEOUT_S + 5:
                    break
                time.sleep(1)
            closed = sum(closed_by_peer(s, 1) for s in open_socks) + len(socks) - len(open_socks)
        elapsed = time.monotonic() - start
        print(f"slowloris: {closed} of 64 closed within {elapsed:.1f} s")
        self.assertEqual(closed, 64)
        for s in socks:
            s.close()
        self.check_after("slowloris x64", 0, good)

    def test_five_thousand_idle_connections(self):
        # Beyond --http_max_connections (1024), each new connection closes the one idle longest
        # (docs/kserve.md): the good client, whose request follows its connect, is served.
        socks = []
        with GoodClient(self.port) as good:
            for _ in range(IDLE_CONNECTIONS):
                try:
                    socks.append(self.connect())
                except OSError as e:  # out of descriptors or ports here: not the server's doing
                    self.skipTest(f"cannot open {IDLE_CONNECTIONS} sockets: {e}")
            self.assertEqual(self.good.call(), 200,
                             f"good client beside {IDLE_CONNECTIONS} idle connections")
        samples = scrape(self.server.metrics_port)
        evicted = samples[("tensorcompute_http_idle_connections_closed_total", labels())]
        refused = samples[("tensorcompute_rejected_connections_total", labels())]
        open_now = sum(not closed_by_peer(s, 0.001) for s in socks[-1024:])
        print(f"{IDLE_CONNECTIONS} idle connections: {evicted:.0f} idle ones closed to make room, "
              f"{refused:.0f} refused; of the newest 1024, {open_now} still open")
        self.assertEqual(refused, 0)
        self.assertGreaterEqual(evicted, IDLE_CONNECTIONS - 1024)
        for s in socks:
            s.close()
        self.check_after(f"{IDLE_CONNECTIONS} idle connections", 0, good)

    def test_a_client_that_disconnects_cancels_its_queued_request(self):
        # Large gathers (32 MiB out) keep the executor busy, so that later requests queue; each
        # client hangs up as soon as its request is sent: the queued ones are cancelled (and
        # counted CANCELLED), not computed, and everything they held is given back.
        rows, width = 4096, 1024
        big = json.dumps({"inputs": [
            {"name": "params", "shape": [rows, width], "datatype": "UINT8",
             "parameters": {"binary_data_size": rows * width}},
            {"name": "indices", "shape": [8 * rows], "datatype": "INT64",
             "parameters": {"binary_data_size": 8 * 8 * rows}}],
            "parameters": {"binary_data_output": True}}).encode()
        indices = b"".join((i % rows).to_bytes(8, "little") for i in range(8 * rows))
        body = big + bytes(rows * width) + indices
        head = request_head("POST", INFER, [
            ("Authorization", f"Bearer {TOKEN}"), ("Content-Length", len(body)),
            ("Inference-Header-Content-Length", len(big))])
        with GoodClient(self.port) as good:
            for _ in range(40):
                with self.connect() as s:
                    s.sendall(head + body)  # and gone, before any answer
            deadline = time.monotonic() + 20
            while True:
                samples = scrape(self.server.metrics_port)
                held = samples.get(("tensorcompute_inflight_bytes", labels()), 0)
                inflight = samples.get(("tensorcompute_inflight_requests", labels()), 0)
                if (held == 0 and inflight == 0) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        answered = {code: samples.get(("tensorcompute_requests_total",
                                       labels(rpc="ModelInfer", code=code)), 0)
                    for code in ("OK", "CANCELLED", "UNAVAILABLE")}
        print(f"40 large infers, each client gone at once: {answered['CANCELLED']:.0f} "
              f"cancelled, {answered['OK'] - 1 - good.statuses.get(200, 0):.0f} computed, "
              f"{answered['UNAVAILABLE']:.0f} refused (budget); in-flight bytes after: {held:.0f}")
        self.assertGreater(answered["CANCELLED"], 0)
        self.assertEqual(held, 0)
        self.assertEqual(inflight, 0)
        # At most max_inflight_bytes (1 GiB) is held; far less in practice.
        self.check_after("disconnects", 1024, good)

class HttpOutOfDescriptorsTest(unittest.TestCase):
    """A server whose hard limit on open files is low (lowered before exec): its
    accept() fails with EMFILE once the attacker holds them all."""

    FILES = 128

    @unittest.skipIf(os.environ.get("TC_SANITIZED"),
                     "UBSan's vptr check probes memory through a pipe: out of descriptors, it "
                     "reports every virtual call as 'invalid vptr'")
    def test_out_of_descriptors_the_acceptor_neither_spins_nor_dies(self):
        with ServerProcess("--http_listen=127.0.0.1:0", open_files=self.FILES) as server:
            self.assertTrue(any(f"soft limit {self.FILES}" in line for line in server.output),
                            server.output)
            good = GoodClient(server.http_port)
            socks = [socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
                     for _ in range(3 * self.FILES)]  # idle, most of them in the backlog
            cpu_before = server.cpu_seconds()
            # Each accept that fails closes an idle connection to make room: the good
            # client's connection, behind the others in the backlog, is served.
            start = time.monotonic()
            self.assertEqual(good.call(auth=False), 200)
            waited = time.monotonic() - start
            time.sleep(1)
            cpu = server.cpu_seconds() - cpu_before
            samples = scrape(server.metrics_port)
            evicted = samples[("tensorcompute_http_idle_connections_closed_total", labels())]
            print(f"open files {self.FILES}, {len(socks)} idle connections: good client "
                  f"served after {waited:.1f} s; {evicted:.0f} idle ones closed; server CPU "
                  f"{cpu:.2f} s in {time.monotonic() - start:.1f} s")
            self.assertLess(cpu, 1.0, "the acceptor spins")
            for s in socks:
                s.close()
            time.sleep(0.5)
            self.assertEqual(good.call(auth=False), 200)


if __name__ == "__main__":
    unittest.main()
