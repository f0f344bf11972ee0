"""A byte-counting TCP forwarder for the Python tests.

    with CountingProxy(server.target) as proxy:   # clients connect to proxy.target
        ...
        proxy.sent, proxy.received                # bytes from the clients, and to them
"""

import socket
import threading


class CountingProxy:
    """A TCP forwarder from 127.0.0.1:<free port> to `upstream` ("127.0.0.1:PORT") that counts
    the bytes its clients send (`sent`) and receive (`received`), to see what compression
    puts on the wire."""

    def __init__(self, upstream):
        self._upstream = upstream.rsplit(":", 1)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.target = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.sent = 0
        self.received = 0
        self._lock = threading.Lock()
        self._sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection((self._upstream[0], int(self._upstream[1])))
            self._sockets += [downstream, upstream]
            for source, sink, counted in ((downstream, upstream, True),
                                          (upstream, downstream, False)):
                threading.Thread(target=self._pump, args=(source, sink, counted),
                                 daemon=True).start()

    def _pump(self, source, sink, counted):
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                with self._lock:
                    if counted:
                        self.sent += len(data)
                    else:
                        self.received += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._listener.close()
        for s in self._sockets:
            s.close()
        return False
