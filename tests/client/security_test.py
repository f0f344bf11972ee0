"""TLS, mTLS, the health-only listener and bearer tokens, end to end: the real
tensorcompute-server binary against the CLI, the load tester and the Python client.

Certificates are made at test time with `openssl` (tests/testing/test_certs.py). Run by ctest
as `python -m unittest -v security_test` from tests/client with tests/testing on PYTHONPATH,
$TC_SERVER_BINARY, $TC_CLI_BINARY and the `tensorcompute` package installed.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import grpc
import numpy as np

from tensorcompute import Client, TensorComputeError
from server_process import ServerProcess
from test_certs import make_certs

CLI = os.environ.get("TC_CLI_BINARY", "")
EXIT_OK, EXIT_RPC = 0, 3
TOKEN = "token-0123456789abcdef"
WRONG_TOKEN = "not-the-token-5f3a"
PARAMS = np.array([10, 20, 30], dtype=np.int32)
INDICES = [2, 0]
REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
HEALTH_SERVICE = "tensorcompute.v1.TensorCompute"

TMP = None
CERTS = None


def setUpModule():
    global TMP, CERTS
    if shutil.which("openssl") is None:
        raise unittest.SkipTest("no openssl command (apt-get install openssl)")
    TMP = tempfile.TemporaryDirectory(prefix="security_test.")
    CERTS = make_certs(TMP.name)


def tearDownModule():
    if TMP is not None:
        TMP.cleanup()


def path(name):
    return os.path.join(TMP.name, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def ca_pem():
    with open(CERTS.ca, "rb") as f:
        return f.read()


def run_cli(*args, env=None, timeout=60):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def describe(proc):
    return f"\n{' '.join(proc.args)}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def tensor_files():
    """params/indices .json files for the CLI (the same as PARAMS, INDICES)."""
    params = write("params.json", json.dumps({"dtype": "int32", "shape": [3],
                                              "values": PARAMS.tolist()}))
    indices = write("indices.json", json.dumps({"dtype": "int32", "shape": [2],
                                                "values": INDICES}))
    return params, indices


def gather(client):
    return client.gather(PARAMS, INDICES).tolist()


def raw_call(channel, method, streaming=False):
    """Calls `method` with an empty request; returns the status code."""
    try:
        if streaming:
            call = channel.stream_stream(method)(iter([b""]), timeout=10)
            for _ in call:
                pass
        else:
            channel.unary_unary(method)(b"", timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class StartupErrorsTest(unittest.TestCase):
    """Bad security options: the binary exits non-zero at once, saying which option is wrong."""

    def start_fails(self, *flags):
        proc = subprocess.run([os.environ["TC_SERVER_BINARY"], "--listen=127.0.0.1:0",
                               "--metrics_listen=", *flags], capture_output=True, text=True,
                              timeout=30)
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout + proc.stderr

    def test_cert_without_key(self):
        self.assertIn("both tls_cert and tls_key", self.start_fails(f"--tls_cert={CERTS.server_cert}"))

    def test_missing_file(self):
        out = self.start_fails(f"--tls_cert={path('nope.pem')}", f"--tls_key={CERTS.server_key}")
        self.assertIn("cannot read", out)

    def test_not_a_certificate(self):
        out = self.start_fails(f"--tls_cert={CERTS.server_key}", f"--tls_key={CERTS.server_key}")
        self.assertIn("no PEM certificate", out)

    def test_key_of_another_certificate(self):
        out = self.start_fails(f"--tls_cert={CERTS.server_cert}", f"--tls_key={CERTS.client_key}")
        self.assertIn("is not the private key", out)

    def test_client_ca_without_tls(self):
        self.assertIn("needs TLS", self.start_fails(f"--tls_client_ca={CERTS.ca}"))

    def test_token_file_without_tokens(self):
        tokens = write("empty_tokens", "# nothing yet\n\n")
        self.assertIn("no token", self.start_fails(f"--auth_token_file={tokens}"))
        self.assertIn("cannot read", self.start_fails(f"--auth_token_file={path('missing')}"))


class TlsAndTokenTest(unittest.TestCase):
    """TLS (no client certificates) with bearer tokens and a plaintext health listener."""

    @classmethod
    def setUpClass(cls):
        cls.tokens = write("tls_tokens", f"# accepted tokens\n\n{TOKEN}\n")
        cls.server = ServerProcess("--cpu_threads=2", f"--tls_cert={CERTS.server_cert}",
                                   f"--tls_key={CERTS.server_key}",
                                   f"--auth_token_file={cls.tokens}",
                                   "--health_listen=127.0.0.1:0")
        cls.server.__enter__()
        cls.health_target = f"127.0.0.1:{cls.server.health_port}"

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def client(self, **kwargs):
        return Client(self.server.target, timeout=10.0, **kwargs)

    def assertFails(self, code, client):
        with client, self.assertRaises(TensorComputeError) as caught:
            gather(client)
        self.assertEqual(caught.exception.code, code, caught.exception)
        return caught.exception.message

    def test_right_credentials_pass(self):
        with self.client(root_certificates=CERTS.ca, auth_token=TOKEN) as client:
            self.assertEqual(gather(client), [30, 10])
        # PEM bytes instead of a path, and the name in the certificate instead of the IP.
        with Client(f"localhost:{self.server.port}", root_certificates=ca_pem(),
                    auth_token=TOKEN) as client:
            self.assertEqual(gather(client), [30, 10])

    def test_plaintext_client_fails(self):
        self.assertFails(grpc.StatusCode.UNAVAILABLE, self.client(auth_token=TOKEN))

    def test_wrong_ca_fails(self):
        self.assertFails(grpc.StatusCode.UNAVAILABLE,
                         self.client(root_certificates=CERTS.other_ca, auth_token=TOKEN))

    def test_wrong_server_name_fails(self):
        self.assertFails(grpc.StatusCode.UNAVAILABLE,
                         self.client(root_certificates=CERTS.ca, auth_token=TOKEN,
                                     tls_server_name="not-in-the-certificate.example"))

    def test_missing_token_is_unauthenticated(self):
        message = self.assertFails(grpc.StatusCode.UNAUTHENTICATED,
                                   self.client(root_certificates=CERTS.ca))
        self.assertIn("authorization: Bearer <token>", message)

    def test_wrong_token_is_unauthenticated_and_not_echoed(self):
        message = self.assertFails(grpc.StatusCode.UNAUTHENTICATED,
                                   self.client(root_certificates=CERTS.ca,
                                               auth_token=WRONG_TOKEN))
        self.assertIn("invalid token", message)
        self.assertNotIn(WRONG_TOKEN, message)
        self.assertNotIn(WRONG_TOKEN, "".join(self.server.output))

    def test_malformed_authorization_is_unauthenticated(self):
        credentials = grpc.ssl_channel_credentials(ca_pem())
        with grpc.secure_channel(self.server.target, credentials) as channel:
            with self.assertRaises(grpc.RpcError) as caught:
                channel.unary_unary("/tensorcompute.v1.TensorCompute/Gather")(
                    b"", timeout=10, metadata=(("authorization", f"Basic {TOKEN}"),))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertIn("not a Bearer token", caught.exception.details())

    def test_health_needs_no_token(self):
        with self.client(root_certificates=CERTS.ca) as client:
            self.assertEqual(client.health(), "SERVING")
            self.assertEqual(client.health(HEALTH_SERVICE), "SERVING")

    def test_reflection_is_off_with_tokens(self):
        credentials = grpc.ssl_channel_credentials(ca_pem())
        with grpc.secure_channel(self.server.target, credentials) as channel:
            self.assertEqual(raw_call(channel, REFLECTION, streaming=True),
                             grpc.StatusCode.UNIMPLEMENTED)

    def test_health_listener_serves_health_only_in_plaintext(self):
        with Client(self.health_target, timeout=10.0) as client:
            self.assertEqual(client.health(), "SERVING")
            self.assertEqual(client.health(HEALTH_SERVICE), "SERVING")
            with self.assertRaises(TensorComputeError) as caught:
                gather(client)
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("grpc.health.v1 only", caught.exception.message)
        with grpc.insecure_channel(self.health_target) as channel:
            self.assertEqual(raw_call(channel, REFLECTION, streaming=True),
                             grpc.StatusCode.UNIMPLEMENTED)

    def test_cli(self):
        params, indices = tensor_files()
        common = ["--target", self.server.target, "--timeout", "10", "--params", params,
                  "--indices", indices]
        proc = run_cli("gather", *common)
        self.assertEqual(proc.returncode, EXIT_RPC, describe(proc))
        self.assertIn("UNAVAILABLE", proc.stderr)
        proc = run_cli("gather", *common, "--tls-ca", CERTS.ca)
        self.assertEqual(proc.returncode, EXIT_RPC, describe(proc))
        self.assertIn("UNAUTHENTICATED", proc.stderr)
        proc = run_cli("gather", *common, "--tls-ca", CERTS.ca, "--auth-token-file", self.tokens)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))
        self.assertEqual(json.loads(proc.stdout)["values"], [30, 10])
        proc = run_cli("gather", *common, "--tls", "--tls-ca", CERTS.ca,
                       env={"TENSORCOMPUTE_TOKEN": TOKEN})
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))
        proc = run_cli("health", "--target", self.health_target)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))
        self.assertIn("SERVING", proc.stdout)
        proc = run_cli("health", "--target", self.server.target, "--tls-ca", CERTS.ca)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))

    def test_load_tester_sends_the_token(self):
        common = ["load", "--target", self.server.target, "--tls-ca", CERTS.ca, "--requests",
                  "40", "--warmup", "0", "--concurrency", "4", "--json", "-"]
        proc = run_cli(*common, "--auth-token-file", self.tokens)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))
        self.assertEqual(json.loads(proc.stdout)["by_code"], {"OK": 40})
        proc = run_cli(*common)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))
        self.assertEqual(json.loads(proc.stdout)["by_code"], {"UNAUTHENTICATED": 40})

    def test_unauthenticated_is_counted(self):
        def count():
            url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("tensorcompute_requests_total{")
                       and 'code="UNAUTHENTICATED"' in line)
        before = count()
        self.assertFails(grpc.StatusCode.UNAUTHENTICATED, self.client(root_certificates=CERTS.ca))
        self.assertEqual(count(), before + 1)


class MutualTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu_threads=2", f"--tls_cert={CERTS.server_cert}",
                                   f"--tls_key={CERTS.server_key}",
                                   f"--tls_client_ca={CERTS.ca}")
        cls.server.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def test_right_client_certificate_passes(self):
        with Client(self.server.target, timeout=10.0, root_certificates=CERTS.ca,
                    certificate_chain=CERTS.client_cert, private_key=CERTS.client_key) as client:
            self.assertEqual(gather(client), [30, 10])
        params, indices = tensor_files()
        proc = run_cli("gather", "--target", self.server.target, "--params", params, "--indices",
                       indices, "--tls-ca", CERTS.ca, "--tls-cert", CERTS.client_cert,
                       "--tls-key", CERTS.client_key)
        self.assertEqual(proc.returncode, EXIT_OK, describe(proc))

    def test_no_client_certificate_fails(self):
        with Client(self.server.target, timeout=10.0, root_certificates=CERTS.ca) as client:
            with self.assertRaises(TensorComputeError) as caught:
                gather(client)
        self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_client_certificate_of_another_ca_fails(self):
        with Client(self.server.target, timeout=10.0, root_certificates=CERTS.ca,
                    certificate_chain=CERTS.other_client_cert,
                    private_key=CERTS.other_client_key) as client:
            with self.assertRaises(TensorComputeError) as caught:
                gather(client)
        self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_half_a_client_certificate_is_refused_by_the_client(self):
        with self.assertRaises(ValueError):
            Client(self.server.target, root_certificates=CERTS.ca,
                   certificate_chain=CERTS.client_cert)


class TokenRotationTest(unittest.TestCase):
    """SIGHUP re-reads --auth_token_file (plaintext server: tokens do not need TLS)."""

    def test_rotation(self):
        tokens = write("rotating_tokens", "old-token\n")
        with ServerProcess("--cpu_threads=2", f"--auth_token_file={tokens}",
                           "--health_listen=127.0.0.1:0") as server:
            old = Client(server.target, timeout=10.0, auth_token="old-token")
            new = Client(server.target, timeout=10.0, auth_token="new-token")

            def accepted(client):
                try:
                    gather(client)
                    return True
                except TensorComputeError as e:
                    self.assertEqual(e.code, grpc.StatusCode.UNAUTHENTICATED)
                    return False

            with old, new:
                self.assertTrue(accepted(old))
                self.assertFalse(accepted(new))
                # Overlap: both accepted while clients move over.
                write("rotating_tokens", "old-token\nnew-token\n")
                server.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: accepted(new)), "".join(server.output))
                self.assertTrue(accepted(old))
                # Then only the new one.
                write("rotating_tokens", "# rotated\nnew-token\n")
                server.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: not accepted(old)), "".join(server.output))
                self.assertTrue(accepted(new))
                # A broken file keeps the tokens in force, and says so.
                write("rotating_tokens", "# oops, emptied\n")
                server.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: "cannot reload" in "".join(server.output)))
                self.assertTrue(accepted(new))
                self.assertFalse(accepted(old))
                self.assertIn("2 tokens accepted", "".join(server.output))
                # Health needs no token on either port.
                self.assertEqual(Client(server.target).health(), "SERVING")
                with Client(f"127.0.0.1:{server.health_port}") as health:
                    self.assertEqual(health.health(), "SERVING")


class HealthListenerDrainTest(unittest.TestCase):
    def test_health_listener_mirrors_draining(self):
        server = ServerProcess("--cpu_threads=2", "--health_listen=127.0.0.1:0",
                               "--drain_notice_ms=3000")
        with server:
            with Client(f"127.0.0.1:{server.health_port}", timeout=5.0) as health:
                self.assertEqual(health.health(), "SERVING")
                server.signal(signal.SIGTERM)

                def not_serving():
                    try:
                        return health.health(HEALTH_SERVICE) == "NOT_SERVING"
                    except TensorComputeError:
                        return False
                self.assertTrue(wait_for(not_serving, timeout=3), "".join(server.output))
                self.assertEqual(health.health(), "NOT_SERVING")


if __name__ == "__main__":
    unittest.main()
