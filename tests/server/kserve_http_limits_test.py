"""The limits of the KServe v2 HTTP/REST front end (server/kserve/http_session.h), against the
real binary over raw sockets: what a hostile or broken client gets back, and that the server
answers before it spends memory (401 before the body is sent, 413 while a chunked body is still
coming), the timeouts, the connection limit, pipelining, TLS, and a client that goes away while
its request waits in the queue.

Standard library only (and tests/testing).
"""

import json
import os
import socket
import ssl
import sys
import tempfile
import threading
import time
import unittest

from prometheus_scrape import labels, scrape
from server_process import ServerProcess
from test_certs import make_certs

INFER = "/v2/models/gather/infer"
SMALL_INFER = json.dumps({"inputs": [
    {"name": "params", "datatype": "INT32", "shape": [3], "data": [10, 20, 30]},
    {"name": "indices", "datatype": "INT64", "shape": [2], "data": [2, 0]},
]}).encode()


def connect(port, timeout=10):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Reader:
    """Reads HTTP/1.1 responses (Content-Length framed) off a socket, one after the other."""

    def __init__(self, sock):
        self.sock = sock
        self.data = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.data += chunk

    def response(self):
        """(status, {lower-case name: value}, body)."""
        while b"\r\n\r\n" not in self.data:
            self._fill()
        head, self.data = self.data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.data) < length:
            self._fill()
        body, self.data = self.data[:length], self.data[length:]
        return status, headers, body

    def closed(self, within=5.0):
        """True if the server closes the connection (EOF or reset) within `within` seconds."""
        self.sock.settimeout(within)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def request(method, path, body=b"", headers=None):
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    headers = dict(headers or {})
    if body and "Transfer-Encoding" not in headers:
        headers.setdefault("Content-Length", str(len(body)))
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def send_quietly(sock, data):
    """Sends what the server still takes; a server that closed early is not an error here."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


class KserveHttpLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tokens = os.path.join(cls.tmp.name, "tokens")
        with open(cls.tokens, "w") as f:
            f.write("s3cret\n")
        cls.server = ServerProcess("--http_listen=127.0.0.1:0", "--max_message_bytes=200000",
                                   f"--auth_token_file={cls.tokens}")
        cls.server.__enter__()
        cls.port = cls.server.http_port
        cls.auth = {"Authorization": "Bearer s3cret"}

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    def exchange(self, data, port=None):
        with connect(port or self.port) as sock:
            send_quietly(sock, data)
            return Reader(sock).response()

    def assert_well_behaved_client_served(self):
        status, _, body = self.exchange(request("POST", INFER, SMALL_INFER, self.auth))
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["outputs"][0]["data"], [30, 10])

    def test_401_before_the_body_of_a_chunked_request(self):
        with connect(self.port) as sock:
            sock.sendall(request("POST", INFER, headers={"Transfer-Encoding": "chunked"}))
            # Not one byte of body sent: the answer comes anyway, and the connection closes.
            reader = Reader(sock)
            status, headers, body = reader.response()
            self.assertEqual(status, 401)
            self.assertIn("Bearer", json.loads(body)["error"])
            self.assertEqual(headers.get("connection"), "close")
            self.assertTrue(reader.closed())
        self.assert_well_behaved_client_served()

    def test_413_while_an_oversize_chunked_body_is_coming(self):
        with connect(self.port) as sock:
            sock.sendall(request("POST", INFER, headers={**self.auth,
                                                         "Transfer-Encoding": "chunked"}))
            chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
            sent = 0
            for _ in range(64):  # 4 MiB offered; the limit is 200,000 bytes
                if not send_quietly(sock, chunk):
                    break
                sent += 65536
            status, _, body = Reader(sock).response()
            self.assertEqual(status, 413)
            self.assertIn("max_message_bytes (200000 bytes)", json.loads(body)["error"])
        self.assert_well_behaved_client_served()

    def test_413_on_content_length_before_the_body(self):
        with connect(self.port) as sock:
            sock.sendall(request("POST", INFER, headers={**self.auth,
                                                         "Content-Length": str(1 << 40)}))
            status, _, body = Reader(sock).response()
            self.assertEqual(status, 413)
            self.assertIn("max_message_bytes", json.loads(body)["error"])

    def test_negative_chunk_size_is_400(self):
        status, _, body = self.exchange(
            request("POST", INFER, headers={**self.auth, "Transfer-Encoding": "chunked"}) +
            b"-2\r\nxx\r\n0\r\n\r\n")
        self.assertEqual(status, 400)
        self.assertIn("malformed", json.loads(body)["error"])

    def test_endless_chunk_size_line_is_400(self):
        with connect(self.port) as sock:
            sender = threading.Thread(target=send_quietly, args=(
                sock, request("POST", INFER, headers={**self.auth,
                                                      "Transfer-Encoding": "chunked"}) +
                b"1" + b";x" * (1 << 19)))
            sender.start()
            status, _, body = Reader(sock).response()
            sender.join()
        self.assertEqual(status, 400)
        self.assertIn("malformed", json.loads(body)["error"])

    def test_chunked_body_within_the_limit_is_served(self):
        chunks = b"".join(b"%x\r\n" % len(part) + part + b"\r\n"
                          for part in (SMALL_INFER[:10], SMALL_INFER[10:])) + b"0\r\n\r\n"
        status, _, body = self.exchange(
            request("POST", INFER, headers={**self.auth, "Transfer-Encoding": "chunked"}) + chunks)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["outputs"][0]["data"], [30, 10])

    def test_431_on_200_header_lines(self):
        headers = {f"X-Field-{i}": "v" for i in range(200)}
        status, _, body = self.exchange(request("GET", "/v2/health/live", headers=headers))
        self.assertEqual(status, 431)
        self.assertIn("header fields", json.loads(body)["error"])

    def test_431_on_one_1_mib_header_line(self):
        with connect(self.port) as sock:
            sender = threading.Thread(target=send_quietly, args=(
                sock, request("GET", "/v2/health/live", headers={"X-Big": "a" * (1 << 20)})))
            sender.start()
            status, _, body = Reader(sock).response()
            sender.join()
        self.assertEqual(status, 431)
        self.assertIn("16384 bytes", json.loads(body)["error"])
        self.assert_well_behaved_client_served()

    def test_content_length_with_transfer_encoding_is_400(self):
        status, _, _ = self.exchange(
            request("POST", INFER, b"0\r\n\r\n",
                    {**self.auth, "Content-Length": "5", "Transfer-Encoding": "chunked"}))
        self.assertEqual(status, 400)
        status, _, _ = self.exchange(
            b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
            b"Content-Length: 2\r\n\r\n{}")
        self.assertEqual(status, 400)

    def test_gzip_is_415(self):
        status, _, body = self.exchange(
            request("POST", INFER, b"\x1f\x8b" + b"\0" * 30,
                    {**self.auth, "Content-Encoding": "gzip"}))
        self.assertEqual(status, 415)
        self.assertIn("gzip", json.loads(body)["error"])

    def test_head_is_the_get_without_its_body(self):
        with connect(self.port) as sock:
            sock.sendall(request("HEAD", "/v2/health/live") + request("GET", "/v2/health/live"))
            reader = Reader(sock)
            while reader.data.count(b"\r\n\r\n") < 2 or not reader.data.endswith(b"}"):
                reader._fill()
            head, rest = reader.data.split(b"\r\n\r\n", 1)
            self.assertTrue(head.startswith(b"HTTP/1.1 200"))
            self.assertIn(b"Content-Length: 13", head)
            self.assertTrue(rest.startswith(b"HTTP/1.1 200"))
            self.assertTrue(rest.endswith(b'{"live":true}'))

    def test_range_is_ignored(self):
        status, _, body = self.exchange(request("GET", "/v2/health/live",
                                                headers={"Range": "bytes=0-1,0-1,0-1"}))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), {"live": True})

    def test_pipelined_requests_are_answered_in_order(self):
        with connect(self.port) as sock:
            sock.sendall(request("GET", "/v2/health/live") +
                         request("POST", INFER, SMALL_INFER, self.auth) +
                         request("GET", "/v2/models/nope", headers=self.auth) +
                         request("POST", INFER, b'{"inputs": [', self.auth) +
                         request("GET", "/v2", headers=self.auth))
            reader = Reader(sock)
            answers = [reader.response() for _ in range(5)]
        self.assertEqual([a[0] for a in answers], [200, 200, 404, 400, 200])
        self.assertEqual(json.loads(answers[0][2]), {"live": True})
        self.assertEqual(json.loads(answers[1][2])["outputs"][0]["data"], [30, 10])
        self.assertIn("nope", json.loads(answers[2][2])["error"])
        self.assertEqual(json.loads(answers[4][2])["name"], "tensorcompute")

    def test_expect_100_continue(self):
        with connect(self.port) as sock:
            sock.sendall(request("POST", INFER, headers={
                **self.auth, "Content-Length": str(len(SMALL_INFER)), "Expect": "100-continue"}))
            reader = Reader(sock)
            while b"\r\n\r\n" not in reader.data:
                reader._fill()
            self.assertTrue(reader.data.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"))
            reader.data = reader.data[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
            sock.sendall(SMALL_INFER)
            status, _, _ = reader.response()
            self.assertEqual(status, 200)


class KserveHttpConnectionsTest(unittest.TestCase):
    """Each test with a server of its own, with short timeouts or a small connection limit."""

    def test_connection_limit_closes_the_longest_idle_connection_for_a_new_one(self):
        with ServerProcess("--http_listen=127.0.0.1:0", "--http_max_connections=16") as server:
            # 16 idle: 8 kept alive after a request, then 8 that never sent a byte.
            held = []
            for _ in range(8):  # one after the other: idle in this order
                sock = connect(server.http_port)
                sock.sendall(request("GET", "/v2/health/live"))
                self.assertEqual(Reader(sock).response()[0], 200)
                held.append(sock)
                time.sleep(0.05)
            held += [connect(server.http_port) for _ in range(8)]
            time.sleep(0.3)
            with connect(server.http_port) as good:  # admitted: the oldest idle one makes room
                good.sendall(request("POST", INFER, SMALL_INFER))
                status, _, body = Reader(good).response()
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body)["outputs"][0]["data"], [30, 10])
            self.assertTrue(Reader(held[0]).closed(within=5), "the longest idle was closed")
            for sock in held[1:8]:  # the other kept-alive ones are still served
                sock.sendall(request("GET", "/v2/health/live"))
                self.assertEqual(Reader(sock).response()[0], 200)
            samples = scrape(server.metrics_port)
            self.assertEqual(
                samples[("tensorcompute_http_idle_connections_closed_total", labels())], 1)
            self.assertEqual(samples[("tensorcompute_rejected_connections_total", labels())], 0)
            for sock in held:
                sock.close()

    def test_connection_limit_closes_a_new_connection_when_none_is_idle(self):
        with ServerProcess("--http_listen=127.0.0.1:0", "--http_max_connections=16") as server:
            head = request("GET", "/v2/health/live")
            held = [connect(server.http_port) for _ in range(16)]
            for sock in held:  # each mid-request: half its header sent
                sock.sendall(head[:len(head) // 2])
            time.sleep(0.3)
            extra = connect(server.http_port)
            self.assertTrue(Reader(extra).closed(within=5))
            extra.close()
            samples = scrape(server.metrics_port)
            self.assertEqual(samples[("tensorcompute_rejected_connections_total", labels())], 1)
            self.assertEqual(
                samples[("tensorcompute_http_idle_connections_closed_total", labels())], 0)
            for sock in held:  # none was closed for it: each finishes its request
                sock.sendall(head[len(head) // 2:])
                self.assertEqual(Reader(sock).response()[0], 200)
            for sock in held:
                sock.close()

    def test_timeouts_close_slow_and_idle_clients(self):
        with ServerProcess("--http_listen=127.0.0.1:0", "--http_header_timeout_s=1",
                           "--http_body_timeout_s=2", "--http_idle_timeout_s=1") as server:
            port = server.http_port
            # A header dribbled a byte at a time: closed once the header timeout passes.
            with connect(port) as sock:
                start = time.monotonic()
                closed = False
                for byte in request("GET", "/v2/health/live")[:-2]:
                    if not send_quietly(sock, bytes([byte])):
                        closed = True
                        break
                    time.sleep(0.1)
                    if time.monotonic() - start > 4:
                        break
                self.assertTrue(closed or Reader(sock).closed(within=1))
                self.assertLess(time.monotonic() - start, 4)
            # A body dribbled a byte every 0.3 s (the progress timeout never passes): closed
            # once the whole-body timeout does.
            with connect(port) as sock:
                sock.sendall(request("POST", INFER, headers={"Content-Length": "1000"}))
                start = time.monotonic()
                while send_quietly(sock, b" ") and time.monotonic() - start < 6:
                    time.sleep(0.3)
                    sock.settimeout(0.01)
                    try:
                        if sock.recv(1) == b"":
                            break
                    except socket.timeout:
                        pass
                    except ConnectionResetError:
                        break
                self.assertLess(time.monotonic() - start, 4)
            # A keep-alive connection with no next request: closed after the idle timeout.
            with connect(port) as sock:
                sock.sendall(request("GET", "/v2/health/live"))
                reader = Reader(sock)
                self.assertEqual(reader.response()[0], 200)
                start = time.monotonic()
                self.assertTrue(reader.closed(within=5))
                self.assertGreater(time.monotonic() - start, 0.5)

    def test_tls(self):
        with tempfile.TemporaryDirectory() as tmp:
            certs = make_certs(tmp)
            with ServerProcess("--http_listen=127.0.0.1:0", f"--tls_cert={certs.server_cert}",
                               f"--tls_key={certs.server_key}") as server:
                context = ssl.create_default_context(cafile=certs.ca)
                with connect(server.http_port) as raw:
                    with context.wrap_socket(raw, server_hostname="localhost") as sock:
                        sock.sendall(request("GET", "/v2/health/live") +
                                     request("POST", INFER, SMALL_INFER))
                        reader = Reader(sock)
                        self.assertEqual(reader.response()[0], 200)
                        status, _, body = reader.response()
                        self.assertEqual(status, 200, body)
                        self.assertEqual(json.loads(body)["outputs"][0]["data"], [30, 10])
                with connect(server.http_port) as sock:  # plaintext on a TLS port: closed
                    send_quietly(sock, request("GET", "/v2/health/live"))
                    self.assertTrue(Reader(sock).closed(within=5))

    def test_mtls_requires_a_client_certificate(self):
        with tempfile.TemporaryDirectory() as tmp:
            certs = make_certs(tmp)
            with ServerProcess("--http_listen=127.0.0.1:0", f"--tls_cert={certs.server_cert}",
                               f"--tls_key={certs.server_key}",
                               f"--tls_client_ca={certs.ca}") as server:
                context = ssl.create_default_context(cafile=certs.ca)
                context.load_cert_chain(certs.client_cert, certs.client_key)
                with connect(server.http_port) as raw:
                    with context.wrap_socket(raw, server_hostname="localhost") as sock:
                        sock.sendall(request("GET", "/v2/health/live"))
                        self.assertEqual(Reader(sock).response()[0], 200)
                anonymous = ssl.create_default_context(cafile=certs.ca)
                with self.assertRaises((ssl.SSLError, ConnectionError, EOFError)):
                    with connect(server.http_port) as raw:
                        with anonymous.wrap_socket(raw, server_hostname="localhost") as sock:
                            sock.sendall(request("GET", "/v2/health/live"))
                            Reader(sock).response()

    def test_huge_chunked_bodies_cost_at_most_the_body_limit(self):
        # 256 MiB of chunks, without a token (401 before the body) and with one (413 once
        # max_message_bytes, 64 MiB, has arrived): the server's peak RSS stays under its base
        # plus twice the limit and a margin, and a well-behaved client is served after.
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens")
            with open(tokens, "w") as f:
                f.write("s3cret\n")
            with ServerProcess("--http_listen=127.0.0.1:0",
                               f"--auth_token_file={tokens}") as server:
                base_kib = server.status_kib("VmRSS")
                chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
                for headers, expected in (({}, 401), ({"Authorization": "Bearer s3cret"}, 413)):
                    with connect(server.http_port, timeout=30) as sock:
                        sock.sendall(request("POST", INFER, headers={
                            **headers, "Transfer-Encoding": "chunked"}))
                        for _ in range(256):
                            if not send_quietly(sock, chunk):
                                break
                        status, _, _ = Reader(sock).response()
                        self.assertEqual(status, expected)
                peak_mib = (server.status_kib("VmHWM") - base_kib) / 1024
                print(f"peak RSS over base: {peak_mib:.0f} MiB", file=sys.stderr)
                if not os.environ.get("TC_SANITIZED"):  # ASan's quarantine is not the server's
                    self.assertLess(peak_mib, 2 * 64 + 64, f"peak RSS grew by {peak_mib:.0f} MiB")
                with connect(server.http_port) as sock:
                    sock.sendall(request("POST", INFER, SMALL_INFER,
                                         {"Authorization": "Bearer s3cret"}))
                    self.assertEqual(Reader(sock).response()[0], 200)

    def test_a_client_that_leaves_cancels_its_queued_request(self):
        # The request waits in the queue for its batch to fill (max_queue_delay 2 s) when its
        # client disconnects: answered CANCELLED (counted) at once, never computed or written.
        with ServerProcess("--http_listen=127.0.0.1:0", "--max_batch_size=64",
                           "--max_queue_delay_us=2000000", "--inline_compute_bytes=0") as server:
            leaver = connect(server.http_port)
            leaver.sendall(request("POST", INFER, SMALL_INFER))
            deadline = time.monotonic() + 5
            while scrape(server.metrics_port)[("tensorcompute_queue_depth", labels())] != 1:
                self.assertLess(time.monotonic(), deadline, "the request never queued")
                time.sleep(0.02)
            left = time.monotonic()
            leaver.close()
            cancelled = ("tensorcompute_requests_total", labels(rpc="ModelInfer",
                                                                code="CANCELLED"))
            while scrape(server.metrics_port).get(cancelled, 0) != 1:
                self.assertLess(time.monotonic() - left, 1.5, "not cancelled before its batch")
                time.sleep(0.02)
            samples = scrape(server.metrics_port)
            self.assertEqual(samples[("tensorcompute_inflight_requests", labels())], 0)
            self.assertEqual(samples[("tensorcompute_queue_depth", labels())], 0)
            self.assertEqual(samples.get(("tensorcompute_requests_total",
                                          labels(rpc="ModelInfer", code="OK")), 0), 0)


if __name__ == "__main__":
    unittest.main()
