"""Shards that require tokens, TLS and mTLS route to each other with their own credentials
(issue 40: --shard_peer_token_file, --shard_peer_tls, --shard_peer_tls_ca,
--shard_peer_tls_server_name), end to end on 127.0.0.1 with the real binary.

Table T (1000 rows) in two shards. Every lookup below reads rows of both, so it succeeds only
when the server it is sent to reaches the other shard.

- Tokens: both shards require a client token (--auth_token_file) and send their own to each
  other: shard 0 from a file of its own, shard 1 from its --auth_token_file itself (the token
  listed first). A client's lookup through either answers T's rows; a client without the token,
  or with a wrong one, gets UNAUTHENTICATED and nothing reaches the other shard. A router with
  no peer token gets UNAVAILABLE naming the shard and the peer's refusal. SIGHUP re-reads the
  peer token file.
- mTLS: both shards serve mTLS with tokens and route over mTLS (their own certificate as the
  client certificate). Routers that lack a client certificate, speak plaintext, verify another
  name or trust another CA get UNAVAILABLE naming the shard.
- Each new flag's bad values stop the binary at start, naming the flag.

Needs $TC_SERVER_BINARY, the `tensorcompute` package and the `openssl` command.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

from tensorcompute import Client, TensorComputeError
from prometheus_scrape import labels, scrape
from reserved_ports import ReservedPorts
from server_process import ServerProcess
from test_certs import make_certs

ROWS, DIM = 1000, 8
SHARDS = 2
CLIENT_TOKEN = "client-token-5d1e7a"
PEER_TOKEN = "peer-token-0b94c2"
# Rows of shard 0 ([0, 500)) and shard 1 ([500, 1000)), negative ones too.
SPANNING = np.array([0, 999, 499, 500, -1, 3, 750], dtype=np.int64)

TMP = None
CERTS = None
TABLE = None
TABLE_PATH = None


def setUpModule():
    global TMP, CERTS, TABLE, TABLE_PATH
    if shutil.which("openssl") is None:
        raise unittest.SkipTest("no openssl command (apt-get install openssl)")
    TMP = tempfile.TemporaryDirectory(prefix="sharded_security_test.")
    CERTS = make_certs(TMP.name)
    TABLE = np.random.default_rng(40).standard_normal((ROWS, DIM)).astype(np.float32)
    TABLE_PATH = path("t.npy")
    np.save(TABLE_PATH, TABLE)


def tearDownModule():
    if TMP is not None:
        TMP.cleanup()


def path(name):
    return os.path.join(TMP.name, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def shard(index, port, peers, *flags):
    """A server of shard `index` of T on `port`, routing to `peers`."""
    return ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{port}",
                         f"--preload=T={TABLE_PATH}", f"--shard_index={index}",
                         f"--shard_count={SHARDS}", f"--shard_peers={peers}", *flags)


def peers_of(ports):
    return ",".join(f"ipv4:127.0.0.1:{port}" for port in ports)


def requests(server, rpc, code):
    return scrape(server.metrics_port).get(
        ("tensorcompute_requests_total", labels(rpc=rpc, code=code)), 0)


def shard_calls(server, index, code):
    return scrape(server.metrics_port).get(
        ("tensorcompute_shard_calls_total", labels(shard=str(index), code=code)), 0)


def wait_for_output(server, text, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while "".join(server.output).count(text) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not log {text!r} {count} times")
        time.sleep(0.05)


class ServersTestCase(unittest.TestCase):
    servers = {}  # per class: name -> ServerProcess

    @classmethod
    def start(cls, name, server):
        cls.servers[name] = server.__enter__()

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers.values():
            server.__exit__(None, None, None)
        cls.reservation.close()

    def lookup_fails(self, client, code):
        with client, self.assertRaises(TensorComputeError) as caught:
            client.gather(None, SPANNING, params_name="T")
        self.assertEqual(caught.exception.code, code, caught.exception)
        return caught.exception.message

    def assertRoutes(self, client):
        with client:
            got = client.gather(None, SPANNING, params_name="T")
            np.testing.assert_array_equal(got, TABLE[SPANNING])
            bags = client.embedding_bag(None, SPANNING, offsets=np.array([0, 3]),
                                        params_name="T", mode="sum")
            np.testing.assert_allclose(bags, [TABLE[SPANNING[:3]].sum(0),
                                              TABLE[SPANNING[3:]].sum(0)], rtol=1e-6)


class TokenRoutingTest(ServersTestCase):
    """Shards requiring tokens, routing with theirs; one router without."""

    @classmethod
    def setUpClass(cls):
        cls.servers = {}
        cls.reservation = ReservedPorts(3)
        a, b, c = cls.reservation.numbers
        # The token a shard sends listed first: shard 1 sends it from its own token file.
        cls.tokens = write("tokens", f"# the shards' token first\n{PEER_TOKEN}\n{CLIENT_TOKEN}\n")
        cls.peer_token = write("peer_token", f"{PEER_TOKEN}\n")
        auth = f"--auth_token_file={cls.tokens}"
        cls.start("s0", shard(0, a, peers_of([a, b]), auth,
                              f"--shard_peer_token_file={cls.peer_token}"))
        cls.start("s1", shard(1, b, peers_of([a, b]), auth,
                              f"--shard_peer_token_file={cls.tokens}"))
        # Shard 0 again, routing to shard 1 without a token.
        cls.start("bare", shard(0, c, peers_of([c, b]), auth))

    def client(self, name, token=CLIENT_TOKEN):
        return Client(self.servers[name].target, timeout=20.0, auth_token=token)

    def test_lookups_route_through_either_shard_with_the_clients_token(self):
        for name, other in (("s0", 1), ("s1", 0)):
            before = shard_calls(self.servers[name], other, "OK")
            self.assertRoutes(self.client(name))
            self.assertGreaterEqual(shard_calls(self.servers[name], other, "OK"), before + 2, name)

    def test_a_client_without_the_token_gets_nothing_through(self):
        router, peer = self.servers["s0"], self.servers["s1"]
        refused = requests(router, "Gather", "UNAUTHENTICATED")
        routed = shard_calls(router, 1, "OK") + shard_calls(router, 1, "UNAVAILABLE")
        answered = sum(requests(peer, "Gather", code)
                       for code in ("OK", "UNAUTHENTICATED", "FAILED_PRECONDITION"))
        message = self.lookup_fails(self.client("s0", token=None),
                                    grpc.StatusCode.UNAUTHENTICATED)
        self.assertIn("missing credentials", message)
        message = self.lookup_fails(self.client("s0", token="not-a-token"),
                                    grpc.StatusCode.UNAUTHENTICATED)
        self.assertIn("invalid token", message)
        self.assertEqual(requests(router, "Gather", "UNAUTHENTICATED"), refused + 2)
        # Refused before routing: no sub-call was made, and the peer saw no request.
        self.assertEqual(shard_calls(router, 1, "OK") + shard_calls(router, 1, "UNAVAILABLE"),
                         routed)
        self.assertEqual(sum(requests(peer, "Gather", code)
                             for code in ("OK", "UNAUTHENTICATED", "FAILED_PRECONDITION")),
                         answered)

    def test_a_router_without_a_peer_token_gets_the_shard_named(self):
        peer = self.servers["s1"]
        refused = requests(peer, "Gather", "UNAUTHENTICATED")
        message = self.lookup_fails(self.client("bare"), grpc.StatusCode.UNAVAILABLE)
        self.assertIn(f"shard 1 of 2 of table 'T' (ipv4:127.0.0.1:{peer.port})", message)
        self.assertIn("missing credentials", message)
        self.assertIn("--shard_peer_token_file", message)
        self.assertGreater(requests(peer, "Gather", "UNAUTHENTICATED"), refused)
        # Its own rows need no peer.
        with self.client("bare") as client:
            np.testing.assert_array_equal(
                client.gather(None, np.array([0, 499]), params_name="T"), TABLE[[0, 499]])

    def test_sighup_rereads_the_peer_token_file(self):
        router = self.servers["s0"]
        reloads = "".join(router.output).count("received SIGHUP: reloaded")
        try:
            write("peer_token", "a-token-the-peers-do-not-list\n")
            router.signal(signal.SIGHUP)
            wait_for_output(router, "received SIGHUP: reloaded", reloads + 1)
            message = self.lookup_fails(self.client("s0"), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("shard 1 of 2 of table 'T'", message)
            self.assertIn("invalid token", message)
            self.assertNotIn("a-token-the-peers-do-not-list", message)
        finally:
            write("peer_token", f"{PEER_TOKEN}\n")
            router.signal(signal.SIGHUP)
            wait_for_output(router, "received SIGHUP: reloaded", reloads + 2)
        self.assertRoutes(self.client("s0"))
        self.assertNotIn(PEER_TOKEN, "".join(router.output))


class MtlsRoutingTest(ServersTestCase):
    """Shards serving mTLS with tokens, routing over mTLS; routers with wrong TLS settings."""

    @classmethod
    def setUpClass(cls):
        cls.servers = {}
        cls.reservation = ReservedPorts(6)
        a, b, *routers = cls.reservation.numbers
        cls.peer_port = b
        tokens = write("mtls_tokens", f"{PEER_TOKEN}\n{CLIENT_TOKEN}\n")
        peer_flags = (f"--shard_peer_token_file={tokens}", "--shard_peer_tls",
                      f"--shard_peer_tls_ca={CERTS.ca}")
        mtls = (f"--tls_cert={CERTS.peer_cert}", f"--tls_key={CERTS.peer_key}",
                f"--tls_client_ca={CERTS.ca}", f"--auth_token_file={tokens}")
        cls.start("s0", shard(0, a, peers_of([a, b]), *mtls, *peer_flags))
        cls.start("s1", shard(1, b, peers_of([a, b]), *mtls, *peer_flags))
        # Plaintext routers of shard 0 (their own port), each with one thing wrong for shard 1.
        token = f"--shard_peer_token_file={tokens}"
        wrong = {
            "no client certificate": (token, "--shard_peer_tls", f"--shard_peer_tls_ca={CERTS.ca}"),
            "plaintext": (token,),
            "another name": (token, "--shard_peer_tls", f"--shard_peer_tls_ca={CERTS.ca}",
                             "--shard_peer_tls_server_name=not-the-peer.example"),
            "another CA": (token, "--shard_peer_tls", f"--shard_peer_tls_ca={CERTS.other_ca}"),
        }
        cls.wrong = list(wrong)
        for (name, flags), port in zip(wrong.items(), routers):
            cls.start(name, shard(0, port, peers_of([port, b]), *flags))

    def test_lookups_route_over_mtls_through_either_shard(self):
        for name, other in (("s0", 1), ("s1", 0)):
            before = shard_calls(self.servers[name], other, "OK")
            self.assertRoutes(Client(self.servers[name].target, timeout=20.0,
                                     root_certificates=CERTS.ca,
                                     certificate_chain=CERTS.client_cert,
                                     private_key=CERTS.client_key, auth_token=CLIENT_TOKEN))
            self.assertGreaterEqual(shard_calls(self.servers[name], other, "OK"), before + 2, name)

    def test_a_client_without_the_token_gets_nothing_through(self):
        before = shard_calls(self.servers["s0"], 1, "OK")
        self.lookup_fails(Client(self.servers["s0"].target, timeout=20.0,
                                 root_certificates=CERTS.ca, certificate_chain=CERTS.client_cert,
                                 private_key=CERTS.client_key), grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(shard_calls(self.servers["s0"], 1, "OK"), before)

    def test_routers_with_wrong_tls_settings_get_the_shard_named(self):
        for name in self.wrong:
            with self.subTest(name):
                message = self.lookup_fails(Client(self.servers[name].target, timeout=20.0),
                                            grpc.StatusCode.UNAVAILABLE)
                self.assertIn(f"shard 1 of 2 of table 'T' (ipv4:127.0.0.1:{self.peer_port})",
                              message)

    def test_the_name_override_is_what_is_verified(self):
        # The peers' certificate names localhost: verified instead of the target's IP.
        with ReservedPorts(1) as port, shard(
                0, port.numbers[0], peers_of([port.numbers[0], self.peer_port]),
                f"--shard_peer_token_file={path('mtls_tokens')}", "--shard_peer_tls",
                f"--shard_peer_tls_ca={CERTS.ca}", f"--tls_cert={CERTS.peer_cert}",
                f"--tls_key={CERTS.peer_key}", "--shard_peer_tls_server_name=localhost") as router:
            self.assertRoutes(Client(router.target, timeout=20.0, root_certificates=CERTS.ca))


class StartupErrorsTest(unittest.TestCase):
    """Bad values of the peer credential flags: the binary exits non-zero at once, naming it."""

    PEERS = "--shard_peers=ipv4:127.0.0.1:1"

    def start_fails(self, *flags):
        proc = subprocess.run([os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                               "--metrics_listen=", *flags], capture_output=True, text=True,
                              timeout=30)
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout + proc.stderr

    def test_shard_peer_token_file(self):
        out = self.start_fails(self.PEERS, f"--shard_peer_token_file={path('missing')}")
        self.assertIn(f"shard_peer_token_file={path('missing')}: cannot read", out)
        empty = write("no_tokens", "# none yet\n\n")
        self.assertIn("shard_peer_token_file", self.start_fails(
            self.PEERS, f"--shard_peer_token_file={empty}"))
        self.assertIn("no token", self.start_fails(self.PEERS, f"--shard_peer_token_file={empty}"))
        tokens = write("some_tokens", "t\n")
        self.assertIn("set shard_peers too",
                      self.start_fails(f"--shard_peer_token_file={tokens}"))

    def test_shard_peer_tls(self):
        self.assertIn("shard_peer_tls", self.start_fails(self.PEERS, "--shard_peer_tls=maybe"))
        self.assertIn("set shard_peers too", self.start_fails("--shard_peer_tls"))

    def test_shard_peer_tls_ca(self):
        out = self.start_fails(self.PEERS, "--shard_peer_tls",
                               f"--shard_peer_tls_ca={CERTS.server_key}")
        self.assertIn("shard_peer_tls_ca=", out)
        self.assertIn("no PEM certificate", out)
        self.assertIn("cannot read", self.start_fails(self.PEERS, "--shard_peer_tls",
                                                      f"--shard_peer_tls_ca={path('none.pem')}"))
        self.assertIn("need shard_peer_tls",
                      self.start_fails(self.PEERS, f"--shard_peer_tls_ca={CERTS.ca}"))

    def test_shard_peer_tls_server_name(self):
        self.assertIn("need shard_peer_tls", self.start_fails(
            self.PEERS, "--shard_peer_tls_server_name=localhost"))

    def test_a_client_certificate_needs_its_key(self):
        # The router's client certificate is the server's own: checked as for the main port.
        self.assertIn("both tls_cert and tls_key", self.start_fails(
            self.PEERS, "--shard_peer_tls", f"--tls_cert={CERTS.peer_cert}"))


if __name__ == "__main__":
    unittest.main()
