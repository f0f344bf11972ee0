"""The tensorcompute client: numpy arrays in, numpy arrays out, over gRPC.

Usage:

    import numpy as np
    from tensorcompute import Client, TensorComputeError

    with Client("localhost:50051", timeout=10.0, retries=2) as client:
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        client.gather(params, [3, -1, 0])               # rows 3, 3 and 0: shape (3, 3)
        client.gather(params, [[0, 2]], axis=1)         # shape (4, 1, 2)
        client.gather_nd(params, [[0, 1], [2, 2]])      # array([1., 8.], dtype=float32)
        try:
            client.gather(params, [4])
        except TensorComputeError as e:
            print(e.code, e.message)  # StatusCode.INVALID_ARGUMENT indices[0] = 4 is not in [-4, 4)

Inputs are anything np.asarray accepts. Element types (numpy -> wire):
  bool, int8/16/32/64, uint8/16/32/64, float16/32/64, complex64/128 -> the matching DT_*;
  ml_dtypes.bfloat16 -> DT_BFLOAT16 (pip install 'tensorcompute[bfloat16]');
  bytes ('S'), str ('U') and object arrays of str/bytes -> DT_STRING (str is encoded as UTF-8).
Any other dtype (datetime64, void, float128, ...) raises TypeError before any RPC. Indices
must be int32 or int64 (a list of Python ints becomes int64); other index dtypes are sent as
they are and the server answers INVALID_ARGUMENT. An empty list of indices is sent as int64.

Outputs are writable numpy arrays in native byte order, decoded from a private copy of the
response bytes (np.frombuffer on a bytearray); DT_STRING comes back as an object array of
`bytes` (decode it yourself: the server moves bytes and never interprets them). Note that
numpy's fixed-width 'S'/'U' arrays drop trailing NUL bytes/characters; pass an object array
to send them. A DT_BFLOAT16 output is an ml_dtypes.bfloat16 array; without ml_dtypes it raises
ImportError (only reachable if bfloat16 params were sent some other way).

Errors: every failed RPC raises TensorComputeError with `.code` (a grpc.StatusCode) and
`.message` (the server's message, verbatim); str(e) is "INVALID_ARGUMENT: <message>".

Targets: "host:port" or any gRPC target URI ("dns:///host:port", "ipv4:10.0.0.1:50051,
10.0.0.2:50051", "unix:/path"). The channel balances calls over every address the name
resolves to (round_robin). `max_message_bytes` caps messages both ways (gRPC's default
receive limit is 4 MiB; the server's default limit is 64 MiB, like the client's).

Retries: `retries=N` makes up to N extra attempts of a call that failed with UNAVAILABLE
(server overloaded or unreachable; Gather and GatherNd are pure functions, so retrying is
safe), sleeping an exponential backoff with jitter between attempts: attempt k (1-based)
waits between 0.5 and 1 times min(0.1 s * 2^(k-1), 5 s). All attempts share the call's one
timeout; when the next sleep would pass that deadline, the last error is raised at once.
With retries the channel also reconnects sooner (from 0.1 s instead of gRPC's 1 s), so that
retries after a refused connection really try the connection again.

TLS and tokens (the server's --tls_cert, --tls_client_ca and --auth_token_file):

    Client("tc.example:50051", tls=True, root_certificates="ca.pem",         # TLS
           certificate_chain="client.pem", private_key="client.key",       # + mTLS
           auth_token=open("token").read().strip())                        # + bearer token

root_certificates, certificate_chain and private_key are each PEM *bytes* (the contents) or a
str / os.PathLike naming a PEM file, read once here; any of them implies tls=True. Without
root_certificates the system's roots are used. tls_server_name overrides the name verified
against the server's certificate (gRPC's ssl_target_name_override). auth_token (str) is sent
on every call as "authorization: Bearer <token>"; a missing or wrong one gets UNAUTHENTICATED.
A TLS mismatch (plaintext to a TLS server, an untrusted server certificate, no client
certificate for an mTLS server) shows as UNAVAILABLE.
"""

import json
import operator
import os
import random
import sys
import time

import grpc
import numpy as np

from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc as pb_grpc

__all__ = ["Client", "TensorComputeError"]

_INITIAL_BACKOFF_S = 0.1
# round_robin over every address the target resolves to, skipping servers whose health
# (grpc.health.v1, client-side health checking) is not SERVING: a draining replica stops
# getting calls as soon as it says so, before it closes its connections.
_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": "tensorcompute.v1.TensorCompute"},
}
_MAX_BACKOFF_S = 5.0

# (numpy kind, itemsize) -> wire dtype, for the fixed-size numeric types.
_NUMERIC_TO_WIRE = {
    ("b", 1): pb.DT_BOOL,
    ("i", 1): pb.DT_INT8,
    ("i", 2): pb.DT_INT16,
    ("i", 4): pb.DT_INT32,
    ("i", 8): pb.DT_INT64,
    ("u", 1): pb.DT_UINT8,
    ("u", 2): pb.DT_UINT16,
    ("u", 4): pb.DT_UINT32,
    ("u", 8): pb.DT_UINT64,
    ("f", 2): pb.DT_FLOAT16,
    ("f", 4): pb.DT_FLOAT32,
    ("f", 8): pb.DT_FLOAT64,
    ("c", 8): pb.DT_COMPLEX64,
    ("c", 16): pb.DT_COMPLEX128,
}

_WIRE_TO_NUMPY = {
    pb.DT_BOOL: np.dtype(np.bool_),
    pb.DT_INT8: np.dtype(np.int8),
    pb.DT_INT16: np.dtype(np.int16),
    pb.DT_INT32: np.dtype(np.int32),
    pb.DT_INT64: np.dtype(np.int64),
    pb.DT_UINT8: np.dtype(np.uint8),
    pb.DT_UINT16: np.dtype(np.uint16),
    pb.DT_UINT32: np.dtype(np.uint32),
    pb.DT_UINT64: np.dtype(np.uint64),
    pb.DT_FLOAT16: np.dtype(np.float16),
    pb.DT_FLOAT32: np.dtype(np.float32),
    pb.DT_FLOAT64: np.dtype(np.float64),
    pb.DT_COMPLEX64: np.dtype(np.complex64),
    pb.DT_COMPLEX128: np.dtype(np.complex128),
}

_SUPPORTED = ("bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, "
              "float32, float64, complex64, complex128, ml_dtypes.bfloat16, and bytes/str "
              "(numpy 'S'/'U' or object arrays of str/bytes)")


class TensorComputeError(Exception):
    """A failed RPC: `.code` is the grpc.StatusCode, `.message` the server's message."""

    def __init__(self, code, message):
        self.code = code
        self.message = message if message is not None else ""
        super().__init__(f"{code.name}: {self.message}")


def _bfloat16_dtype():
    """ml_dtypes.bfloat16 as a numpy dtype, or None when ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def _string_entries(array, name):
    """The elements of a 'S', 'U' or object array as a row-major list of bytes."""
    entries = []
    for i, item in enumerate(array.ravel(order="C").tolist()):
        if isinstance(item, bytes):
            entries.append(item)
        elif isinstance(item, str):
            entries.append(item.encode("utf-8"))
        else:
            raise TypeError(
                f"{name}: an object array must hold only str or bytes, but element {i} (row-major) "
                f"is {type(item).__name__}; supported element types: {_SUPPORTED}")
    return entries


def _to_tensor(value, name, default_dtype=None):
    """Converts anything np.asarray accepts to a tensorcompute.v1.Tensor."""
    array = np.asarray(value)
    if default_dtype is not None and array.size == 0 and not isinstance(value, np.ndarray):
        array = array.astype(default_dtype)  # np.asarray([]) is float64
    dtype = array.dtype
    tensor = pb.Tensor(shape=array.shape)
    if dtype.kind in "SUO":
        tensor.dtype = pb.DT_STRING
        tensor.strings.extend(_string_entries(array, name))
        return tensor
    wire = _NUMERIC_TO_WIRE.get((dtype.kind, dtype.itemsize))
    if wire is not None:
        little = np.ascontiguousarray(array.astype(dtype.newbyteorder("<"), copy=False))
        tensor.dtype = wire
        tensor.data = little.tobytes()
        return tensor
    if dtype.kind == "V" and dtype.name == "bfloat16" and dtype == _bfloat16_dtype():
        bits = np.ascontiguousarray(array).view(np.uint16).astype("<u2", copy=False)
        tensor.dtype = pb.DT_BFLOAT16
        tensor.data = bits.tobytes()
        return tensor
    raise TypeError(f"{name}: unsupported dtype {dtype}; supported: {_SUPPORTED}")


def _from_tensor(tensor):
    """Converts a response Tensor to a writable numpy array (strings: object array of bytes)."""
    shape = tuple(tensor.shape)
    count = 1
    for d in shape:
        count *= d
    if tensor.dtype == pb.DT_STRING:
        if len(tensor.strings) != count:
            raise TensorComputeError(
                grpc.StatusCode.INTERNAL,
                f"malformed response: {len(tensor.strings)} strings for shape {list(shape)}")
        out = np.empty(count, dtype=object)
        out[:] = list(tensor.strings)
        return out.reshape(shape)
    if tensor.dtype == pb.DT_BFLOAT16:
        dtype = _bfloat16_dtype()
        if dtype is None:
            raise ImportError("the server returned a bfloat16 tensor; install ml_dtypes "
                              "(pip install 'tensorcompute[bfloat16]') to receive it")
        bits = np.frombuffer(bytearray(tensor.data), dtype="<u2")
        if sys.byteorder != "little":
            bits = bits.astype(np.uint16)
        out = bits.view(dtype)
    elif tensor.dtype in _WIRE_TO_NUMPY:
        native = _WIRE_TO_NUMPY[tensor.dtype]
        out = np.frombuffer(bytearray(tensor.data), dtype=native.newbyteorder("<"))
        out = out.astype(native, copy=False)  # a no-op on little-endian machines
    else:
        raise TensorComputeError(grpc.StatusCode.INTERNAL,
                                 f"malformed response: unknown dtype {tensor.dtype}")
    if out.size != count:
        raise TensorComputeError(
            grpc.StatusCode.INTERNAL,
            f"malformed response: {len(tensor.data)} data bytes for shape {list(shape)}")
    return out.reshape(shape)


def _pem(value, name):
    """PEM bytes as they are; a str or os.PathLike names a file to read; None stays None."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (str, os.PathLike)):
        with open(value, "rb") as f:
            return f.read()
    raise TypeError(f"{name}: expected PEM bytes or a file path, got {type(value).__name__}")


class Client:
    """A connection to a tensorcompute server. Thread-safe; close() it (or use `with`)."""

    def __init__(self, target="localhost:50051", timeout=30.0, max_message_bytes=64 << 20,
                 retries=0, tls=False, root_certificates=None, certificate_chain=None,
                 private_key=None, tls_server_name=None, auth_token=None):
        """target: "host:port" or a gRPC target URI (dns:///h:p, ipv4:a:p,b:p, unix:path).
        timeout: default seconds per call, retries included (None = no deadline).
        max_message_bytes: largest message sent or received.
        retries: extra attempts on UNAVAILABLE, with exponential backoff and jitter (0 = off).
        tls, root_certificates, certificate_chain, private_key, tls_server_name, auth_token:
        see "TLS and tokens" in the module docstring.
        """
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        root_certificates = _pem(root_certificates, "root_certificates")
        certificate_chain = _pem(certificate_chain, "certificate_chain")
        private_key = _pem(private_key, "private_key")
        if (certificate_chain is None) != (private_key is None):
            raise ValueError("mTLS needs both certificate_chain and private_key")
        tls = bool(tls or root_certificates or certificate_chain or tls_server_name)
        if auth_token is not None and ("\n" in auth_token or "\r" in auth_token):
            raise ValueError("auth_token must be one line")
        self._metadata = (("authorization", f"Bearer {auth_token}"),) if auth_token else None
        self.target = target
        self.timeout = timeout
        self.retries = int(retries)
        options = [
            ("grpc.max_send_message_length", int(max_message_bytes)),
            ("grpc.max_receive_message_length", int(max_message_bytes)),
            ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
        ]
        if self.retries:
            backoff_ms = int(_INITIAL_BACKOFF_S * 1000)
            options += [
                ("grpc.initial_reconnect_backoff_ms", backoff_ms),
                ("grpc.min_reconnect_backoff_ms", backoff_ms),
                ("grpc.max_reconnect_backoff_ms", int(_MAX_BACKOFF_S * 1000)),
            ]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        if tls:
            credentials = grpc.ssl_channel_credentials(root_certificates, private_key,
                                                       certificate_chain)
            make_channel = lambda opts: grpc.secure_channel(target, credentials, options=opts)
        else:
            make_channel = lambda opts: grpc.insecure_channel(target, options=opts)
        self._channel = make_channel(options)
        self._stub = pb_grpc.TensorComputeStub(self._channel)
        # health() asks on a channel of its own that does not watch health: the call channel
        # would not call a server that is not SERVING (UNAVAILABLE, not "NOT_SERVING").
        # (Channels connect lazily: this one costs nothing until health() is called.)
        health_options = [
            (key, json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
             if key == "grpc.service_config" else value) for key, value in options]
        self._health_channel = make_channel(health_options)
        self._health_stub = None

    def gather(self, params, indices, axis=None, batch_dims=0, timeout=None):
        """tf.gather(params, indices, axis, batch_dims) on the server; returns a numpy array.

        axis=None leaves it unset: the server then uses batch_dims, as TensorFlow does.
        """
        request = pb.GatherRequest(
            params=_to_tensor(params, "params"),
            indices=_to_tensor(indices, "indices", default_dtype=np.int64),
            batch_dims=operator.index(batch_dims))
        if axis is not None:
            request.axis = operator.index(axis)
        response = self._call(self._stub.Gather, request, timeout)
        return _from_tensor(response.output)

    def gather_nd(self, params, indices, batch_dims=0, timeout=None):
        """tf.gather_nd(params, indices, batch_dims) on the server; returns a numpy array."""
        request = pb.GatherNdRequest(
            params=_to_tensor(params, "params"),
            indices=_to_tensor(indices, "indices", default_dtype=np.int64),
            batch_dims=operator.index(batch_dims))
        response = self._call(self._stub.GatherNd, request, timeout)
        return _from_tensor(response.output)

    def health(self, service="", timeout=None):
        """The grpc.health.v1 status of `service` ("" = the whole server): "SERVING",
        "NOT_SERVING", ... An unknown service raises TensorComputeError (NOT_FOUND)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        if self._health_stub is None:
            self._health_stub = health_pb2_grpc.HealthStub(self._health_channel)
        response = self._call(self._health_stub.Check,
                              health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def close(self):
        """Closes the channel; later calls raise ValueError."""
        self._channel.close()
        self._health_channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"Client(target={self.target!r}, timeout={self.timeout!r}, retries={self.retries})"

    def _call(self, method, request, timeout):
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as e:
                error = TensorComputeError(e.code(), e.details())
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt >= self.retries:
                    raise error from None
            attempt += 1
            backoff = min(_INITIAL_BACKOFF_S * 2 ** (attempt - 1), _MAX_BACKOFF_S)
            sleep = backoff * random.uniform(0.5, 1.0)
            if deadline is not None and time.monotonic() + sleep >= deadline:
                raise error
            time.sleep(sleep)
