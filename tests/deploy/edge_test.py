"""The edge (deploy/edge/nginx.conf) in front of the server: what passes, what it stops, and
that nothing a hostile client does reaches the server unbounded (docs/deploy.md, "The edge").

Two ways to run it:
  - by ctest (local): the real server on loopback (--listen, --http_listen, tokens) and Debian's
    nginx with deploy/edge/nginx.conf (tests/testing/edge_process.py) on a port of its own,
    TLS with certificates made for the run;
  - by deploy/test-image.sh (external), against the two containers of a podman pod:
      TC_EDGE_TARGET=localhost:PORT TC_EDGE_CA=ca.pem TC_EDGE_TOKEN=... \
      TC_EDGE_SERVER_EXEC="podman exec CONTAINER" python edge_test.py
    where TC_EDGE_SERVER_EXEC runs a command beside the server (its /proc/1/status, and
    /proc/net/tcp of the pod's network namespace).

For each attack it asserts what the attacker gets (the status, or the connection closed, and
when), that a well-behaved client is answered through the edge during and after it, and that
the server saw at most a bounded part of it: its peak RSS (VmHWM) under its RSS at the start
plus two --max_message_bytes plus SLACK_MIB (not under ASan, TC_SANITIZED=1: its quarantine
holds freed memory), and its open connections (from the edge) at most
the edge's upstream keep-alive pools plus the requests in flight.

Run with the Python of .venv-triton (tritonclient, over TLS through the edge).
"""

import http.client
import json
import os
import re
import select
import shlex
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.request

import numpy as np

from edge_process import EdgeProcess, config_directives, nginx_binary
from h2_frames import (CANCEL, END_HEADERS, GOAWAY, HEADERS, PREFACE, RST_STREAM, SETTINGS,
                       frame, hpack_literal, read_frames)
from server_process import ServerProcess
from test_certs import make_certs

MIB = 1 << 20
MAX_MESSAGE = 64 * MIB   # --max_message_bytes, the default
SLACK_MIB = 96
UPSTREAM_CONNECTIONS = 2 * 2 * 64  # 2 workers x (gRPC + HTTP pools of 64)
INFER = "/v2/models/gather/infer"
GOOD_BODY = json.dumps({"inputs": [
    {"name": "params", "shape": [4], "datatype": "FP32", "data": [0.5, 1.5, 2.5, 3.5]},
    {"name": "indices", "shape": [2], "datatype": "INT64", "data": [3, 1]}]}).encode()
EXTERNAL = bool(os.environ.get("TC_EDGE_TARGET"))
HEADER_TIMEOUT_S = 10 if EXTERNAL else 2  # nginx.conf's client_header_timeout (locally: 2 s)


class Pair:
    """The edge and the server behind it, local or external."""

    def __init__(self):
        self._stack = []
        self.tmp = tempfile.mkdtemp(prefix="tc-edge-test-")
        try:
            self._start()
        except BaseException:  # setUpClass failed: tearDownClass will not run
            self.close()
            raise

    def _start(self):
        if EXTERNAL:
            host, _, port = os.environ["TC_EDGE_TARGET"].rpartition(":")
            self.host, self.port = host, int(port)
            self.ca = os.environ["TC_EDGE_CA"]
            self.token = os.environ["TC_EDGE_TOKEN"]
            self._exec = shlex.split(os.environ["TC_EDGE_SERVER_EXEC"])
            self.server_ports = {50051, 8000}
            self.metrics = os.environ.get("TC_EDGE_SERVER_METRICS")  # host:port, optional
            self.edge = None
            return
        certs = make_certs(self.tmp)
        self.ca = certs.ca
        self.token = "edge-s3cret"
        tokens = os.path.join(self.tmp, "tokens")
        with open(tokens, "w") as f:
            f.write(self.token + "\n")
        self.server = ServerProcess("--http_listen=127.0.0.1:0", f"--auth_token_file={tokens}",
                                    "--trusted_proxies=127.0.0.1,::1")
        self.server.__enter__()
        self._stack.append(self.server)
        self.certs = certs
        # Production values but the header timeout (the slow-client tests would wait 10 s).
        self.edge = EdgeProcess(self.server, certs.server_cert, certs.server_key,
                                overrides={"client_header_timeout": f"{HEADER_TIMEOUT_S}s"})
        self.edge.__enter__()
        self._stack.append(self.edge)
        # An address, not "localhost": gRPC resolves names with c-ares, whose Debian build
        # leaks a few bytes per lookup that LeakSanitizer reports in the ASan CLI.
        self.host, self.port = "127.0.0.1", self.edge.port
        self.server_ports = {self.server.port, self.server.http_port}
        self.metrics = f"127.0.0.1:{self.server.metrics_port}"

    def close(self):
        """Stops what was started, newest first, and removes the certificates and tokens."""
        try:
            while self._stack:
                self._stack.pop().__exit__(None, None, None)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def target(self):
        return f"{self.host}:{self.port}"

    def _server_file(self, path):
        if EXTERNAL:
            return subprocess.run([*self._exec, "cat", path], check=True, capture_output=True,
                                  text=True).stdout
        if path.startswith("/proc/1/"):
            path = f"/proc/{self.server._process.pid}/" + path[len("/proc/1/"):]
        with open(path) as f:
            return f.read()

    def server_kib(self, field):
        for line in self._server_file("/proc/1/status").splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def server_connections(self):
        """Established TCP connections to the server's ports (its side of each)."""
        n = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                text = self._server_file(table)
            except (OSError, subprocess.CalledProcessError):
                continue
            for line in text.splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and local_port in self.server_ports:
                    n += 1
        return n

    def server_calls(self, rpc):
        """Calls of `rpc` the server has answered (any status), from its /metrics; None where
        its metrics are out of reach."""
        if not self.metrics:
            return None
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as response:
            text = response.read().decode()
        pattern = rf'^tensorcompute_requests_total{{[^}}]*rpc="{rpc}"[^}}]*}} (\S+)$'
        return sum(float(v) for v in re.findall(pattern, text, re.M))

    def tls(self, alpn=("http/1.1",), timeout=10):
        context = ssl.create_default_context(cafile=self.ca)
        context.set_alpn_protocols(list(alpn))
        raw = socket.create_connection((self.host, self.port), timeout=timeout)
        return context.wrap_socket(raw, server_hostname="localhost")

    def rest(self, method, path, body=None, headers=None, timeout=30):
        context = ssl.create_default_context(cafile=self.ca)
        conn = http.client.HTTPSConnection(self.host, self.port, context=context,
                                           timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def good_infer(self):
        status, _, body = self.rest("POST", INFER, GOOD_BODY, {
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        if status != 200:
            raise AssertionError(f"the good client got {status}: {body[:200]!r}")
        return json.loads(body)["outputs"][0]["data"]


def read_status(sock, timeout, data=b""):
    """The status code of the first HTTP/1.1 response on `sock`, whose first bytes may already
    be `data`, or None if it closes first."""
    sock.settimeout(timeout)
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (socket.timeout, ConnectionError, ssl.SSLError):
        return None
    return int(data.split(b"\r\n", 1)[0].split()[1])


def arrived(sock):
    """Application data that has already arrived on the SSL socket `sock`, read without waiting:
    b"" if none (a TLS record that is not data, such as a session ticket, is consumed and gives
    none). Raises ConnectionError if the peer has closed."""
    if not sock.pending() and not select.select([sock], [], [], 0)[0]:
        return b""
    sock.settimeout(0)
    try:
        data = sock.recv(65536)
    except ssl.SSLWantReadError:
        return b""
    if not data:
        raise ConnectionError("closed")
    return data


def closed_within(sock, timeout):
    """Seconds until the peer closes `sock` (reading and dropping), or None after `timeout`."""
    start = time.monotonic()
    sock.settimeout(0.5)
    while time.monotonic() - start < timeout:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            return time.monotonic() - start
    return None


class EdgeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pair = Pair()
        cls.rss_start_kib = cls.pair.server_kib("VmRSS")
        cls.bound_kib = cls.rss_start_kib + (2 * MAX_MESSAGE // 1024) + SLACK_MIB * 1024

    @classmethod
    def tearDownClass(cls):
        cls.pair.close()

    def assert_server_bounded(self, what):
        peak = self.pair.server_kib("VmHWM")
        connections = self.pair.server_connections()
        print(f"  {what}: server peak RSS {peak // 1024} MiB (start {self.rss_start_kib // 1024}),"
              f" {connections} connections to it", flush=True)
        if not os.environ.get("TC_SANITIZED"):  # ASan's quarantine is not the server's
            self.assertLessEqual(peak, self.bound_kib, what)
        self.assertLessEqual(connections, UPSTREAM_CONNECTIONS, what)

    # ---- what passes -----------------------------------------------------------------------

    def test_grpc_and_rest_through_the_edge_over_tls(self):
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        auth = {"authorization": f"Bearer {self.pair.token}"}
        params = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
        indices = np.array([2, -3], dtype=np.int64)
        expected = params[[2, 0]]

        grpc_client = grpcclient.InferenceServerClient(self.pair.target, ssl=True,
                                                       root_certificates=self.pair.ca)
        self.assertTrue(grpc_client.is_server_live(headers=auth))
        self.assertTrue(grpc_client.is_server_ready(headers=auth))
        inputs = [grpcclient.InferInput("params", params.shape, "FP32"),
                  grpcclient.InferInput("indices", indices.shape, "INT64")]
        inputs[0].set_data_from_numpy(params)
        inputs[1].set_data_from_numpy(indices)
        result = grpc_client.infer("gather", inputs, headers=auth)
        np.testing.assert_array_equal(result.as_numpy(result.get_response().outputs[0].name),
                                      expected)
        with self.assertRaises(InferenceServerException) as refused:
            grpc_client.infer("gather", inputs)
        self.assertIn("UNAUTHENTICATED", str(refused.exception))

        http_client = httpclient.InferenceServerClient(self.pair.target, ssl=True,
                                                       ssl_options={"ca_certs": self.pair.ca})
        self.assertTrue(http_client.is_server_ready(headers=auth))
        inputs = [httpclient.InferInput("params", params.shape, "FP32"),
                  httpclient.InferInput("indices", indices.shape, "INT64")]
        inputs[0].set_data_from_numpy(params, binary_data=True)
        inputs[1].set_data_from_numpy(indices, binary_data=False)
        result = http_client.infer("gather", inputs, headers=auth)
        name = result.get_response()["outputs"][0]["name"]
        np.testing.assert_array_equal(result.as_numpy(name), expected)

    def test_the_cli_and_health_through_the_edge(self):
        cli = os.environ.get("TC_CLI_BINARY")
        if not cli:
            self.skipTest("no TC_CLI_BINARY")
        tokens = os.path.join(self.pair.tmp, "cli-token")
        with open(tokens, "w") as f:
            f.write(self.pair.token + "\n")
        tls = ["--target", self.pair.target, "--tls-ca", self.pair.ca]
        health = subprocess.run([cli, "health", *tls, "--timeout", "5"], capture_output=True,
                                text=True, timeout=30)
        self.assertEqual(health.returncode, 0, health.stderr)
        self.assertIn("SERVING", health.stdout)
        params = os.path.join(self.pair.tmp, "params.json")
        indices = os.path.join(self.pair.tmp, "indices.json")
        with open(params, "w") as f:
            f.write('{"dtype": "float32", "shape": [3, 2], "values": [1, 2, 3, 4, 5, 6]}')
        with open(indices, "w") as f:
            f.write('{"dtype": "int64", "values": [2, -3]}')
        gather = subprocess.run([cli, "gather", *tls, "--auth-token-file", tokens, "--params",
                                 params, "--indices", indices], capture_output=True, text=True,
                                timeout=30)
        self.assertEqual(gather.returncode, 0, gather.stderr)
        self.assertEqual(gather.stdout.strip(),
                         '{"dtype": "float32", "shape": [2, 2], "values": [5, 6, 1, 2]}')
        status, _, _ = self.pair.rest("GET", "/v2/health/ready")
        self.assertEqual(status, 200)
        self.assertEqual(self.pair.good_infer(), [3.5, 1.5])

    # ---- bodies ----------------------------------------------------------------------------

    def _chunked(self, headers, total, status_within):
        """Sends a chunked body of up to `total` bytes, looking for an answer after every MiB;
        returns (status, bytes sent when it came).

        One thread does both: an SSL socket must not be read and written from two threads at
        once (OpenSSL's SSL objects are not thread-safe; a reader thread once saw an SSL error
        before the first chunk was out, and the test read that as no answer)."""
        sock = self.pair.tls()
        head = [f"POST {INFER} HTTP/1.1", "Host: tc", "Transfer-Encoding: chunked",
                "Content-Type: application/json", *headers]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        chunk = b"%x\r\n" % MIB + b"[" * MIB + b"\r\n"
        sent, answer = 0, b""
        try:
            while sent < total and not answer:
                sock.settimeout(status_within)
                sock.sendall(chunk)
                sent += MIB
                answer = arrived(sock)
        except (ConnectionError, ssl.SSLError, OSError):
            pass  # the peer closed or stopped reading: its answer, if any, is what is left
        status = read_status(sock, status_within, answer)
        sock.close()
        return status, sent

    def test_chunked_gigabytes_without_a_token_are_refused_by_the_server_early(self):
        status, sent = self._chunked([], 2048 * MIB, 60)
        print(f"  401 after {sent} bytes sent", flush=True)
        self.assertEqual(status, 401)
        self.assertLess(sent, MAX_MESSAGE)
        self.assertEqual(self.pair.good_infer(), [3.5, 1.5])
        self.assert_server_bounded("chunked gigabytes without a token")

    def test_chunked_gigabytes_with_a_token_stop_at_the_body_limit(self):
        status, sent = self._chunked([f"Authorization: Bearer {self.pair.token}"], 1024 * MIB,
                                     120)
        print(f"  {status} after {sent} bytes sent", flush=True)
        self.assertEqual(status, 413)
        self.assertLessEqual(sent, MAX_MESSAGE + 16 * MIB)
        self.assertEqual(self.pair.good_infer(), [3.5, 1.5])
        self.assert_server_bounded("chunked gigabytes with a token")

    def test_an_oversize_content_length_is_413_from_the_edge_before_the_body(self):
        sock = self.pair.tls()
        sock.sendall((f"POST {INFER} HTTP/1.1\r\nHost: tc\r\nContent-Length: {1 << 30}\r\n"
                      f"Authorization: Bearer {self.pair.token}\r\n\r\n").encode())
        self.assertEqual(read_status(sock, 10), 413)
        sock.close()

    # ---- headers ---------------------------------------------------------------------------

    def test_header_floods_are_refused(self):
        long_line = self.pair.tls()
        long_line.sendall(f"GET /v2 HTTP/1.1\r\nHost: tc\r\nX-Big: {'a' * MIB}\r\n\r\n".encode())
        self.assertEqual(read_status(long_line, 10), 400)  # nginx: header line over 16 KiB
        long_line.close()
        many = self.pair.tls()
        lines = "".join(f"X-{i}: {i}\r\n" for i in range(200))
        many.sendall(f"GET /v2 HTTP/1.1\r\nHost: tc\r\n{lines}\r\n".encode())
        self.assertEqual(read_status(many, 10), 431)  # the server's --http_max_header_fields
        many.close()
        both = self.pair.tls()
        both.sendall((f"POST {INFER} HTTP/1.1\r\nHost: tc\r\nContent-Length: 5\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode())
        self.assertEqual(read_status(both, 10), 400)
        both.close()
        self.assert_server_bounded("header floods")

    # ---- slow and idle clients -------------------------------------------------------------

    def test_slowloris_is_closed_by_the_edge(self):
        sock = self.pair.tls()
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: tc\r\n")
        start, after = time.monotonic(), None
        while after is None and time.monotonic() - start < HEADER_TIMEOUT_S + 10:
            try:  # one thread writes and reads: see _chunked
                sock.settimeout(10)
                sock.sendall(b"X")
                arrived(sock)
                time.sleep(0.2)
            except (ConnectionError, ssl.SSLError, OSError):
                after = time.monotonic() - start
        sock.close()
        print(f"  closed after {after} s", flush=True)
        self.assertIsNotNone(after)
        self.assertLess(after, HEADER_TIMEOUT_S + 5)

    def test_two_thousand_idle_connections_never_reach_the_server(self):
        sockets = []
        try:
            for _ in range(2000):
                sockets.append(socket.create_connection((self.pair.host, self.pair.port), 10))
            self.assertEqual(self.pair.good_infer(), [3.5, 1.5])
            self.assert_server_bounded("2000 idle connections")
            time.sleep(HEADER_TIMEOUT_S + 1)
            closed = sum(closed_within(s, 0.01) is not None for s in sockets[:50])
            self.assertEqual(closed, 50, "idle connections still open past the header timeout")
        finally:
            for s in sockets:
                s.close()

    # ---- HTTP/2 ----------------------------------------------------------------------------

    def test_rapid_reset_is_cut_off_by_the_edge(self):
        """CVE-2023-44487: streams opened and reset at once, as fast as the client can."""
        sock = self.pair.tls(alpn=("h2",))
        self.assertEqual(sock.selected_alpn_protocol(), "h2")
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        headers = b"".join(hpack_literal(k, v) for k, v in [
            (":method", "POST"), (":scheme", "https"),
            (":path", "/tensorcompute.v1.TensorCompute/Gather"), (":authority", "localhost"),
            ("content-type", "application/grpc"), ("te", "trailers"),
            ("authorization", f"Bearer {self.pair.token}")])
        calls_before = self.pair.server_calls("Gather")
        sent, goaway, closed = 0, False, False
        buffer = b""
        sock.settimeout(0.001)
        start = time.monotonic()
        try:
            for batch in range(200):  # up to 20000 streams
                out = []
                for i in range(100):
                    stream = 1 + 2 * (batch * 100 + i)
                    out.append(frame(HEADERS, END_HEADERS, stream, headers))
                    out.append(frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL)))
                sock.sendall(b"".join(out))
                sent += 100
                try:
                    data = sock.recv(65536)
                    if not data:
                        closed = True
                        break
                    frames, buffer = read_frames(buffer + data)
                    goaway = goaway or any(f[0] == GOAWAY for f in frames)
                except (socket.timeout, ssl.SSLWantReadError):
                    pass
        except (ConnectionError, ssl.SSLError, OSError):
            closed = True
        if not closed:
            closed = closed_within(sock, 10) is not None
        sock.close()
        time.sleep(0.5)
        calls = self.pair.server_calls("Gather")
        reached = None if calls is None else int(calls - calls_before)
        print(f"  {sent} streams sent in {time.monotonic() - start:.1f} s; GOAWAY {goaway},"
              f" closed {closed}; {reached} reached the server", flush=True)
        self.assertTrue(closed, "the edge kept a rapid-reset connection open")
        if reached is not None:
            self.assertLessEqual(reached, 1000)  # keepalive_requests: then the edge closes
        self.assertEqual(self.pair.good_infer(), [3.5, 1.5])
        self.assert_server_bounded("rapid reset")

    def test_a_client_over_its_request_rate_gets_429(self):
        if EXTERNAL:
            self.skipTest("the production rate (20000/s) is beyond one test client")
        # An edge of its own, whose rate (20/s, a burst of 20) one client exceeds at once.
        edge = EdgeProcess(self.pair.server, self.pair.certs.server_cert,
                           self.pair.certs.server_key, overrides={
                               "limit_req_zone":
                                   "$binary_remote_addr zone=tc_req_per_client:10m rate=20r/s",
                               "limit_req": "zone=tc_req_per_client burst=20 nodelay"})
        with edge:
            context = ssl.create_default_context(cafile=self.pair.ca)
            conn = http.client.HTTPSConnection("localhost", edge.port, context=context,
                                               timeout=10)
            statuses = []
            for _ in range(100):  # one keep-alive connection, as fast as it goes
                conn.request("GET", "/v2/health/live")
                response = conn.getresponse()
                response.read()
                statuses.append(response.status)
            conn.close()
        print(f"  {statuses.count(200)} answered, {statuses.count(429)} refused", flush=True)
        self.assertIn(429, statuses)
        self.assertGreaterEqual(statuses.count(200), 20)  # the burst
        self.assertEqual(set(statuses) - {200, 429}, set())
        self.assertEqual(self.pair.good_infer(), [3.5, 1.5])

    # ---- the configuration -----------------------------------------------------------------

    def test_the_edge_limits_are_the_server_flags(self):
        if EXTERNAL:
            self.skipTest("checked by ctest, from the repository's files")
        helpfull = subprocess.run([os.environ["TC_SERVER_BINARY"], "--helpfull"],
                                  capture_output=True, text=True).stdout
        flags = {}
        for name in ("max_message_bytes", "max_resident_bytes", "http_max_header_bytes",
                     "max_concurrent_streams", "http_header_timeout_s",
                     "http_body_progress_timeout_s", "http_write_timeout_s",
                     "http_idle_timeout_s"):
            at = helpfull.index(f"--{name} ")
            default = helpfull[at:helpfull.index(";", helpfull.index("default:", at))]
            flags[name] = int(default.rsplit("default:", 1)[1].strip().strip('"'))
        conf = {}
        for name, args, location in config_directives():
            conf.setdefault((name, location), args)

        def seconds(value):
            return int(value[:-1]) if value.endswith("s") else int(value)

        self.assertEqual(int(conf[("client_max_body_size", None)][0]),
                         flags["max_message_bytes"] + 5)
        self.assertEqual(
            int(conf[("client_max_body_size", "= /tensorcompute.v1.TensorCompute/PutTensor")][0]),
            flags["max_resident_bytes"])
        self.assertEqual(int(conf[("large_client_header_buffers", None)][1]),
                         flags["http_max_header_bytes"])
        self.assertEqual(int(conf[("http2_max_concurrent_streams", None)][0]),
                         flags["max_concurrent_streams"])
        self.assertEqual(seconds(conf[("client_header_timeout", None)][0]),
                         flags["http_header_timeout_s"])
        self.assertEqual(seconds(conf[("client_body_timeout", None)][0]),
                         flags["http_body_progress_timeout_s"])
        self.assertEqual(seconds(conf[("send_timeout", None)][0]), flags["http_write_timeout_s"])
        self.assertEqual(seconds(conf[("keepalive_timeout", None)][0]),
                         flags["http_idle_timeout_s"])


def setUpModule():
    if not EXTERNAL and nginx_binary() is None:
        raise unittest.SkipTest("nginx is not installed (tools/install-deps.sh installs it)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
