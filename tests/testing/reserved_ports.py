"""Loopback ports reserved for servers whose port must be known before they start (shard
replicas list each other in --shard_peers; the edge's port goes into its config).

    with ReservedPorts(4) as ports:          # ports.numbers: [int, ...]
        ... start servers on 127.0.0.1:ports.numbers[i] ...

A port that was merely free (bound to 0, then closed) can go to another test's server, which
binds port 0 at that moment, before ours binds it; ours then fails to start, or, where both
share it, each takes half the other's connections. A reserved port stays bound, with
SO_REUSEADDR and never listening, until the reservation is closed: the kernel gives no bound
port to another bind to port 0, while a server that sets SO_REUSEADDR itself (gRPC, Boost.Asio
and nginx do) binds and listens on it as usual, and again after a restart.
"""

import socket


class ReservedPorts:
    def __init__(self, count):
        self._sockets = []
        try:
            for _ in range(count):
                s = socket.socket()
                self._sockets.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", 0))
        except BaseException:
            self.close()
            raise
        self.numbers = [s.getsockname()[1] for s in self._sockets]

    def close(self):
        for s in self._sockets:
            s.close()
        self._sockets = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
