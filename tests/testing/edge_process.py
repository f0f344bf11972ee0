"""The edge (Debian's nginx with deploy/edge/nginx.conf) as a subprocess, for the Python tests.

    with ServerProcess("--http_listen=127.0.0.1:0") as server, \
         EdgeProcess(server, cert, key) as edge:
        edge.port                      # its TLS port on 127.0.0.1 (HTTP/2 and HTTP/1.1)

The configuration is deploy/edge/nginx.conf itself, with only what a test must change
replaced: the upstream ports (the server's, picked at random), the listen port, the certificate
paths and /tmp (a directory of the test's own). `overrides` maps a directive to a new value
wherever it is set (e.g. {"client_header_timeout": "2s"}), for tests that would otherwise wait
out a production timeout. `nginx_binary()` is None where nginx is not installed.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from child_process import keep_output, popen, stop
from reserved_ports import ReservedPorts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(REPO, "deploy", "edge", "nginx.conf")


def nginx_binary():
    for path in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def config_directives(text=None):
    """Every `name value...;` of nginx.conf (comments dropped), as (name, [args], location)
    tuples, location being the enclosing `location` block's argument or None."""
    if text is None:
        with open(CONFIG) as f:
            text = f.read()
    text = re.sub(r"'[^']*'|\"[^\"]*\"", '""', text)  # log formats hold braces
    text = re.sub(r"#[^\n]*", "", text)
    out = []
    blocks = []
    for token in re.finditer(r"([^;{}]+)([;{}])|}", text):
        if token.group(0) == "}" or token.group(2) == "}":
            if blocks:
                blocks.pop()
            continue
        words = token.group(1).split()
        if not words:
            continue
        if token.group(2) == "{":
            blocks.append(words)
            continue
        location = next((" ".join(b[1:]) for b in reversed(blocks) if b[0] == "location"), None)
        out.append((words[0], words[1:], location))
    return out


class EdgeProcess:
    def __init__(self, server, cert, key, overrides=None, grpc_port=None, http_port=None):
        self.grpc_port = grpc_port or server.port
        self.http_port = http_port or server.http_port
        self.cert = cert
        self.key = key
        self.overrides = overrides or {}
        self.port = None
        self.output = []
        self._dir = None
        self._process = None

    def _render(self):
        with open(CONFIG) as f:
            text = f.read()
        text = text.replace("server 127.0.0.1:50051;", f"server 127.0.0.1:{self.grpc_port};")
        text = text.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{self.http_port};")
        text = text.replace("listen 8443 ssl http2;", f"listen 127.0.0.1:{self.port} ssl http2;")
        text = text.replace("listen [::]:8443 ssl http2;", "")
        text = text.replace("/etc/tensorcompute/tls/tls.crt", self.cert)
        text = text.replace("/etc/tensorcompute/tls/tls.key", self.key)
        text = text.replace("/tmp/nginx", self._dir + "/nginx")
        for name, value in self.overrides.items():
            text, n = re.subn(rf"(?m)^(\s*){re.escape(name)}\s[^;]*;", rf"\g<1>{name} {value};",
                              text)
            if n == 0:
                raise KeyError(f"{name} is not set in {CONFIG}")
        if os.geteuid() == 0:
            # As root, nginx would run its workers as nobody, who cannot read the test's files.
            text = "user root root;\n" + text
        return text

    def __enter__(self):
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed (tools/install-deps.sh installs it)")
        self._dir = tempfile.mkdtemp(prefix="tc-edge-")
        with ReservedPorts(1) as reservation:  # until nginx listens on it
            self.port = reservation.numbers[0]
            conf = os.path.join(self._dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self._render())
            self._process = popen(
                [binary, "-e", "stderr", "-p", self._dir, "-c", conf, "-g", "daemon off;"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            self._drain = keep_output(self._process, self.output)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    self._drain.join(timeout=2)
                    raise RuntimeError("nginx exited:\n" + "".join(self.output))
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.05)
        raise RuntimeError("nginx did not listen:\n" + "".join(self.output))

    @property
    def target(self):
        return f"localhost:{self.port}"

    def __exit__(self, *exc):
        try:
            stop(self._process, self._drain, 15)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        return False
