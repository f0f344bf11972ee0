"""A real tensorcompute-server (or the echo server) as a subprocess, for the Python tests.

    with ServerProcess() as server:          # $TC_SERVER_BINARY on 127.0.0.1:<free port>
        target = server.target               # "127.0.0.1:PORT"
        server.metrics_port                  # its Prometheus endpoint, also on a free port

The binary's startup line ("... listening on HOST:PORT port=N ...") gives the port (and, with
--health_listen, its "security: ... plaintext health on port N" line `server.health_port`;
with --http_listen, `server.http_port`, the KServe v2 HTTP/REST port;
`server.signal(signal.SIGHUP)` reloads --auth_token_file; `open_files=N` runs it under
`ulimit -n N`, soft and hard limit, so that it cannot raise it). Its output
is drained on a thread (kept in `server.output`) so that a full pipe never stalls it; on exit
the server gets SIGTERM and must exit within `stop_timeout` seconds. When the `with` block ends
in an exception (a failed test), stderr gets the server's last lines and whether it was still
running.
"""

import os
import re
import subprocess
import sys
import unittest

from child_process import keep_output, popen, stop


class ServerProcess:
    def __init__(self, *flags, binary=None, stop_timeout=30, open_files=None):
        self.binary = binary or os.environ["TC_SERVER_BINARY"]
        self.open_files = open_files
        # The server's metrics endpoint defaults to port 9090: tests running side by side
        # would collide there. (The echo server, given as `binary`, has no such flag.)
        metrics = ["--metrics_listen=127.0.0.1:0"] if binary is None else []
        self.flags = ["--listen=127.0.0.1:0", *metrics, *flags]
        self.stop_timeout = stop_timeout
        self.output = []
        self.port = None
        self.metrics_port = None
        self.health_port = None
        self.http_port = None
        self._process = None

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self._process.pid

    def cpu_seconds(self):
        """User and system CPU time of the server so far."""
        with open(f"/proc/{self._process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def returncode(self):
        """The server's exit code once the `with` block has stopped it (None while it runs)."""
        return self._process.returncode

    def __enter__(self):
        command = [self.binary, *self.flags]
        if self.open_files is not None:
            command = ["/bin/sh", "-c", f'ulimit -n {self.open_files} && exec "$0" "$@"',
                       *command]
        self._process = popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace")  # a logged message may quote a client's raw bytes
        for line in self._process.stdout:
            self.output.append(line)
            match = re.search(r"\bport=(\d+)", line)
            if match:
                self.port = int(match.group(1))
                metrics = re.search(r"\bmetrics_port=(\d+)", line)
                self.metrics_port = int(metrics.group(1)) if metrics else None
                http = re.search(r"\bhttp_port=(\d+)", line)
                self.http_port = int(http.group(1)) if http else None
                if not any(f.startswith("--health_listen=") for f in self.flags):
                    break
            match = re.search(r"plaintext health on port (\d+)", line)
            if match:
                self.health_port = int(match.group(1))
                break
        if self.port is None or (self.health_port is None and any(
                f.startswith("--health_listen=") for f in self.flags)):
            stop(self._process, None, 10)  # it may still run (no port line): never leave it
            raise RuntimeError(f"{self.binary} did not start:\n{''.join(self.output)}")
        self._drain = keep_output(self._process, self.output)
        return self

    def status_kib(self, field):
        """A kibibyte field of the server's /proc/PID/status, e.g. "VmRSS" or "VmHWM"."""
        with open(f"/proc/{self._process.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def signal(self, signum):
        self._process.send_signal(signum)

    def __exit__(self, exc_type, exc, traceback):
        exited = self._process.poll()  # before the stop: None while it runs
        stop(self._process, self._drain, self.stop_timeout)
        if exc_type is not None and not issubclass(exc_type, unittest.SkipTest):
            # The test failed with the server in hand: what the server said, and whether it was
            # still running, belong to the failure.
            state = "running" if exited is None else f"had exited with code {exited}"
            tail = "".join(self.output[-40:])
            print(f"--- {os.path.basename(self.binary)} ({state} when the test failed), "
                  f"its last lines:\n{tail}---", file=sys.stderr)
        return False
