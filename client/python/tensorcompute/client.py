"""The tensorcompute client: numpy arrays in, numpy arrays out, over gRPC.

Usage:

    import numpy as np
    from tensorcompute import Client, TensorComputeError

    with Client("localhost:50051", timeout=10.0, retries=2) as client:
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        client.gather(params, [3, -1, 0])               # rows 3, 3 and 0: shape (3, 3)
        client.gather(params, [[0, 2]], axis=1)         # shape (4, 1, 2)
        client.gather_nd(params, [[0, 1], [2, 2]])      # array([1., 8.], dtype=float32)
        client.embedding_bag(params, [0, 2, 3], offsets=[0, 2])   # rows 0+2 and 3: shape (2, 3)
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
(server overloaded or unreachable; Gather, GatherNd and EmbeddingBag are pure functions, so
retrying is safe), sleeping an exponential backoff with jitter between attempts: attempt k
(1-based) waits between 0.5 and 1 times min(0.1 s * 2^(k-1), 5 s). All attempts share the
call's one timeout; when the next sleep would pass that deadline, the last error is raised at
once.
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
certificate for an mTLS server) shows as UNAVAILABLE. admin_token (str), when set, is sent
instead of auth_token by put_tensor and delete_tensor (the server's --admin_token_file; without
it they answer PERMISSION_DENIED).

Resident tensors: a table stored on the server once, then gathered from by name, so that
each call carries only its indices:

    client.put_tensor("emb", table)                   # uploaded in 1 MiB chunks
    client.gather(None, ids, params_name="emb")       # == client.gather(table, ids), bit for bit
    client.embedding_bag(None, bags, params_name="emb")   # the same for pooled lookups
    client.list_tensors()                             # [TensorInfo(name='emb', ...)]
    client.delete_tensor("emb")

Every server replica holds its own copy; nothing is shared between replicas. With a target
that lists several addresses ("ipv4:10.0.0.1:50051,10.0.0.2:50051"), put_tensor and
delete_tensor with all_targets=True reach each address in turn; otherwise they reach one
address, the one the channel picks. A "dns:///name" target is one target whatever it resolves
to, so for a Kubernetes Deployment preload the table on every pod from a volume (the server's
`--preload NAME=PATH.npy`), or list the pods' addresses. A gather by name that reaches a
replica without the table raises NOT_FOUND.
"""

import collections
import datetime
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

__all__ = ["Client", "Shard", "TensorComputeError", "TensorInfo", "shard_rows"]

_DEFAULT_CHUNK_BYTES = 1 << 20

TensorInfo = collections.namedtuple(
    "TensorInfo",
    ["name", "dtype", "shape", "bytes", "device", "version", "created", "storage", "shard"],
    defaults=["as-is", None])
TensorInfo.__doc__ = """A resident tensor as the server describes it.

name (str); dtype (str: "float32", "string", ... as numpy names it; "bfloat16": for a compact
table what lookups return, "float32"); shape (tuple of ints; a compact table's [rows, dim]);
bytes (int: what it holds, counted against the server's --max_resident_bytes); device (str:
"cpu" or "gpu:N"); version (int: 1 for a name's first tensor, one more per replacement);
created (datetime.datetime, UTC: when this version became visible); storage (str: one of
STORAGE_KINDS, how it is stored); shard (None, or a Shard: which rows of a table sharded by
row ranges it holds; shape is then the whole table's).
"""

Shard = collections.namedtuple("Shard", ["index", "count", "total_rows"])
Shard.__doc__ = """Shard `index` of `count` of a table of `total_rows` rows: it holds rows
[index * ceil(total_rows / count), min(total_rows, (index + 1) * ceil(total_rows / count))).
"""


def shard_rows(total_rows, count, index):
    """The rows [begin, end) that shard `index` of `count` of a table of total_rows holds."""
    per = max(1, -(-total_rows // count))
    begin = min(total_rows, index * per)
    return begin, min(total_rows, begin + per)

# How put_tensor may store a table (tensorcompute.proto, TableStorage): the wire value of each.
STORAGE_KINDS = {
    "as-is": 0,
    "float16": 1,
    "int8-rowwise": 2,
    "int8-rowwise-prequantized": 3,
}
_STORAGE_NAMES = {v: k for k, v in STORAGE_KINDS.items()}

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

# embedding_bag's mode argument -> EmbeddingBagRequest.Mode.
_EMBEDDING_BAG_MODES = {
    "sum": pb.EmbeddingBagRequest.SUM,
    "mean": pb.EmbeddingBagRequest.MEAN,
    "max": pb.EmbeddingBagRequest.MAX,
    "sqrtn": pb.EmbeddingBagRequest.SQRTN,
}

_ELEMENT_SIZES = {wire: dtype.itemsize for wire, dtype in _WIRE_TO_NUMPY.items()}
_ELEMENT_SIZES[pb.DT_BFLOAT16] = 2

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


_WIRE_NAMES = {value: pb.DataType.Name(value)[3:].lower() for value in pb.DataType.values()}


def _tensor_info(info):
    """A TensorInfo from a tensorcompute.v1.TensorInfo message."""
    created = datetime.datetime.fromtimestamp(info.created.seconds, tz=datetime.timezone.utc)
    created += datetime.timedelta(microseconds=info.created.nanos // 1000)
    return TensorInfo(name=info.name, dtype=_WIRE_NAMES.get(info.dtype, str(info.dtype)),
                      shape=tuple(info.shape), bytes=info.bytes, device=info.device,
                      version=info.version, created=created,
                      storage=_STORAGE_NAMES.get(info.storage, str(info.storage)),
                      shard=Shard(info.shard.index, info.shard.count, info.shard.total_rows)
                      if info.HasField("shard") else None)


def _put_requests(name, tensor, device, replace, chunk_bytes, storage=0, shard=None):
    """The messages of a PutTensor upload of `tensor` (a tensorcompute.v1.Tensor), lazily.

    The first one describes the tensor; each carries the next chunk: at most chunk_bytes bytes
    of data, in whole elements, at byte `offset`; or for strings consecutive elements whose wire
    size (bytes + tag + length) stays within chunk_bytes (one larger string alone), `offset`
    being the element index of the first. An empty tensor is the description alone.
    """
    first = pb.PutTensorRequest(name=name, dtype=tensor.dtype, shape=tensor.shape,
                                device=device, replace=replace, storage=storage)
    if shard is not None:
        first.shard.CopyFrom(pb.ShardSpec(index=shard.index, count=shard.count,
                                          total_rows=shard.total_rows))
    if tensor.dtype == pb.DT_STRING:
        strings = tensor.strings
        total = len(strings)
        begin = 0
        message = first
        while begin < total or message is first:
            end, size = begin, 0
            while end < total:
                item = 1 + _varint_size(len(strings[end])) + len(strings[end])
                if end > begin and size + item > chunk_bytes:
                    break
                size += item
                end += 1
            if end > begin:
                message.offset = begin
                message.strings.extend(strings[begin:end])
            yield message
            begin = end
            message = pb.PutTensorRequest()
        return
    data = tensor.data
    element = _ELEMENT_SIZES[tensor.dtype]
    chunk = max(element, chunk_bytes // element * element)
    first.offset = 0
    first.data = data[:chunk]
    yield first
    for begin in range(chunk, len(data), chunk):
        yield pb.PutTensorRequest(offset=begin, data=data[begin:begin + chunk])


def _varint_size(value):
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _replica_targets(target):
    """The addresses of an "ipv4:a,b" / "ipv6:a,b" target, one target each; else [target]."""
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            addresses = [a.strip() for a in target[len(scheme):].split(",") if a.strip()]
            return [scheme + a for a in addresses] or [target]
    return [target]


def _set_params(request, params, params_name):
    """Sets exactly one of request.params and request.params_name."""
    if (params is None) == (params_name is None):
        raise ValueError("expected exactly one of params and params_name")
    if params_name is not None:
        request.params_name = params_name
    else:
        request.params.CopyFrom(_to_tensor(params, "params"))


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
                 private_key=None, tls_server_name=None, auth_token=None, admin_token=None):
        """target: "host:port" or a gRPC target URI (dns:///h:p, ipv4:a:p,b:p, unix:path).
        timeout: default seconds per call, retries included (None = no deadline).
        max_message_bytes: largest message sent or received.
        retries: extra attempts on UNAVAILABLE, with exponential backoff and jitter (0 = off).
        tls, root_certificates, certificate_chain, private_key, tls_server_name, auth_token,
        admin_token: see "TLS and tokens" in the module docstring.
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
        if admin_token is not None and ("\n" in admin_token or "\r" in admin_token):
            raise ValueError("admin_token must be one line")
        self._metadata = (("authorization", f"Bearer {auth_token}"),) if auth_token else None
        self._admin_metadata = ((("authorization", f"Bearer {admin_token}"),) if admin_token
                                else self._metadata)
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
            make_channel = lambda to, opts: grpc.secure_channel(to, credentials, options=opts)
        else:
            make_channel = lambda to, opts: grpc.insecure_channel(to, options=opts)
        self._channel = make_channel(target, options)
        self._stub = pb_grpc.TensorComputeStub(self._channel)
        # put_tensor/delete_tensor(all_targets=True): one channel per address of the target,
        # made on first use.
        self._make_channel = make_channel
        self._options = options
        self._replica_channels = None
        # health() asks on a channel of its own that does not watch health: the call channel
        # would not call a server that is not SERVING (UNAVAILABLE, not "NOT_SERVING").
        # (Channels connect lazily: this one costs nothing until health() is called.)
        health_options = [
            (key, json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
             if key == "grpc.service_config" else value) for key, value in options]
        self._health_channel = make_channel(target, health_options)
        self._health_stub = None

    def gather(self, params, indices, axis=None, batch_dims=0, timeout=None, params_name=None):
        """tf.gather(params, indices, axis, batch_dims) on the server; returns a numpy array.

        axis=None leaves it unset: the server then uses batch_dims, as TensorFlow does.
        params_name: gather from that resident tensor (see put_tensor) instead; pass
        params=None then. Exactly one of params and params_name (else ValueError).
        """
        request = pb.GatherRequest(
            indices=_to_tensor(indices, "indices", default_dtype=np.int64),
            batch_dims=operator.index(batch_dims))
        _set_params(request, params, params_name)
        if axis is not None:
            request.axis = operator.index(axis)
        response = self._call(self._stub.Gather, request, timeout)
        return _from_tensor(response.output)

    def gather_nd(self, params, indices, batch_dims=0, timeout=None, params_name=None):
        """tf.gather_nd(params, indices, batch_dims) on the server; returns a numpy array.

        params_name: gather from that resident tensor instead of params (as in gather).
        """
        request = pb.GatherNdRequest(
            indices=_to_tensor(indices, "indices", default_dtype=np.int64),
            batch_dims=operator.index(batch_dims))
        _set_params(request, params, params_name)
        response = self._call(self._stub.GatherNd, request, timeout)
        return _from_tensor(response.output)

    def embedding_bag(self, params, indices, offsets=None, per_sample_weights=None, mode="sum",
                      include_last_offset=False, padding_idx=None, timeout=None,
                      params_name=None):
        """torch.nn.functional.embedding_bag(indices, params, offsets, mode=mode,
        per_sample_weights=..., include_last_offset=..., padding_idx=...) on the server, with
        TensorFlow's "sqrtn" as a fourth mode; returns a numpy array [bags, dim] in the
        params' dtype.

        params: a [rows, dim] table of float16, bfloat16, float32 or float64. indices: rank 1
        with offsets (bag b is indices[offsets[b]:offsets[b+1]], the last bag running to the
        end), or rank 2 [bags, n] without (fixed bags of n). offsets: rank 1, starting at 0,
        not decreasing; with include_last_offset it has one entry more than there are bags,
        the last being len(indices). Indices and offsets given as lists of ints are sent as
        int64. per_sample_weights: one weight per index, float32 or the params' dtype; a
        list of numbers (anything but a numpy array) is sent as float32. mode: "sum", "mean",
        "max" or "sqrtn" (any case); weights are not allowed with "max". padding_idx: a row
        in [-rows, rows) whose lookups add nothing and do not count; an empty bag (or one of
        padding rows only) gives zeros. Each element accumulates in float32 (float64 for
        float64 params) in index order, weighted terms with fma, then the division (mean,
        sqrtn), then one rounding to the params' dtype: tensorcompute.proto says every rule.
        params_name: look up in that resident tensor (see put_tensor) instead; pass
        params=None then. Exactly one of params and params_name, and a known mode (else
        ValueError, before any RPC). The server's errors (an index out of range, a bad
        offset, ...) raise TensorComputeError, INVALID_ARGUMENT naming the field and position.
        """
        wire_mode = _EMBEDDING_BAG_MODES.get(str(mode).lower()) if isinstance(mode, str) else None
        if wire_mode is None:
            raise ValueError(f"mode must be one of {', '.join(_EMBEDDING_BAG_MODES)}, "
                             f"got {mode!r}")
        request = pb.EmbeddingBagRequest(
            indices=_to_tensor(indices, "indices", default_dtype=np.int64), mode=wire_mode,
            include_last_offset=bool(include_last_offset))
        _set_params(request, params, params_name)
        if offsets is not None:
            request.offsets.CopyFrom(_to_tensor(offsets, "offsets", default_dtype=np.int64))
        if per_sample_weights is not None:
            if not isinstance(per_sample_weights, np.ndarray):
                per_sample_weights = np.asarray(per_sample_weights, dtype=np.float32)
            request.per_sample_weights.CopyFrom(
                _to_tensor(per_sample_weights, "per_sample_weights"))
        if padding_idx is not None:
            request.padding_idx = operator.index(padding_idx)
        response = self._call(self._stub.EmbeddingBag, request, timeout)
        return _from_tensor(response.output)

    def put_tensor(self, name, array, device="", replace=False, chunk_bytes=_DEFAULT_CHUNK_BYTES,
                   all_targets=False, timeout=None, storage="as-is", shard=None):
        """Stores `array` (anything np.asarray accepts; dtypes as for params) on the server as
        the resident tensor `name`, uploaded in messages of at most chunk_bytes tensor bytes
        (so it may be larger than max_message_bytes). Returns its TensorInfo.

        device: "" (the server's --device), "cpu", "gpu" or "gpu:N". replace: replace a
        tensor of that name (else ALREADY_EXISTS). all_targets: store a copy on every address
        of an "ipv4:a,b" target, one after the other (see the module docstring); the
        TensorInfo is the first one's. Sends admin_token when set. Raises TensorComputeError:
        ALREADY_EXISTS, RESOURCE_EXHAUSTED (over --max_resident_bytes), PERMISSION_DENIED,
        INVALID_ARGUMENT (a bad name, a scalar, an unknown device), ...; with all_targets,
        after trying every address, with the first failure's code and a message naming each
        address that failed and those that succeeded (their copies stay).

        storage: how the server stores a table (STORAGE_KINDS; tensorcompute.proto has every
        rule). "float16" and "int8-rowwise" take a float32 [rows, dim] array and convert it on
        the server (a value they cannot hold: INVALID_ARGUMENT); "int8-rowwise-prequantized"
        takes uint8 [rows, dim + 8] in FBGEMM's fused layout. Gather (axis 0) and embedding_bag
        on such a table return float32. An unknown kind is ValueError, before any RPC.

        shard: a Shard (or an (index, count, total_rows) tuple): `array` is that shard's rows
        of a table sharded by row ranges (shard_rows gives them); a server holding it answers
        lookups on the whole table, routing other rows to its --shard_peers.
        """
        if shard is not None:
            shard = Shard(*shard)
        wire_storage = STORAGE_KINDS.get(str(storage).lower().replace("_", "-"))
        if wire_storage is None:
            raise ValueError(f"storage must be one of {', '.join(STORAGE_KINDS)}, got {storage!r}")
        chunk_bytes = operator.index(chunk_bytes)
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        tensor = _to_tensor(array, "array")

        def put(stub):
            # A fresh message iterator per attempt: a retried upload starts over.
            response = self._call(
                stub.PutTensor, None, timeout, metadata=self._admin_metadata,
                make_request=lambda: _put_requests(name, tensor, device, bool(replace),
                                                   chunk_bytes, wire_storage, shard))
            return _tensor_info(response.tensor)

        return self._on_targets("put", name, all_targets, put)

    def delete_tensor(self, name, all_targets=False, timeout=None):
        """Deletes the resident tensor `name` (from every address with all_targets, as
        put_tensor); returns the deleted tensor's TensorInfo. Sends admin_token when set.
        Raises TensorComputeError: NOT_FOUND, PERMISSION_DENIED, ..."""
        request = pb.DeleteTensorRequest(name=name)

        def delete(stub):
            response = self._call(stub.DeleteTensor, request, timeout,
                                  metadata=self._admin_metadata)
            return _tensor_info(response.tensor)

        return self._on_targets("delete", name, all_targets, delete)

    def list_tensors(self, timeout=None):
        """The resident tensors of the server that answers, by name: a list of TensorInfo."""
        response = self._call(self._stub.ListTensors, pb.ListTensorsRequest(), timeout)
        return [_tensor_info(t) for t in response.tensors]

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
        for _, channel in self._replica_channels or []:
            channel.close()

    def _on_targets(self, what, name, all_targets, one):
        """one(stub) on this client's channel, or with all_targets on each address's."""
        if not all_targets:
            return one(self._stub)
        if self._replica_channels is None:
            self._replica_channels = [
                (target, self._make_channel(target, self._options))
                for target in _replica_targets(self.target)]
        if len(self._replica_channels) == 1:
            return one(self._stub)
        first, failures, succeeded = None, [], []
        for target, channel in self._replica_channels:
            try:
                info = one(pb_grpc.TensorComputeStub(channel))
            except TensorComputeError as e:
                failures.append((target, e))
                continue
            first = info if first is None else first
            succeeded.append(target)
        if not failures:
            return first
        detail = "; ".join(f"{t}: {e.code.name}: {e.message}" for t, e in failures)
        done = f"succeeded on: {', '.join(succeeded)}" if succeeded else "succeeded on none"
        raise TensorComputeError(
            failures[0][1].code,
            f"{what} {name}: failed on {len(failures)} of {len(self._replica_channels)} "
            f"targets: {detail}; {done}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"Client(target={self.target!r}, timeout={self.timeout!r}, retries={self.retries})"

    def _call(self, method, request, timeout, metadata=None, make_request=None):
        """method(request) with the retry policy; make_request() makes a fresh request (an
        iterator for a streaming call) per attempt instead."""
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        metadata = self._metadata if metadata is None else metadata
        attempt = 0
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if make_request is not None:
                    request = make_request()
                return method(request, timeout=remaining, metadata=metadata)
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
