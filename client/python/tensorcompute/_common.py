"""What the sync client (tensorcompute.client) and the asyncio one (tensorcompute.aio) share:
every rule of the wire and of the calls, written once, with no I/O of its own.

  - the public types (TensorComputeError, TensorInfo, Shard, shard_rows, key_shard,
    STORAGE_KINDS);
  - numpy <-> tensorcompute.v1.Tensor, and each RPC's request built from a method's arguments
    (argument errors are raised here, before any RPC) and its answer decoded;
  - ClientBase: the constructor's arguments checked and turned into channels (grpc or
    grpc.aio, the subclass says which), metadata, the retry policy (Attempts) and the
    all_targets outcome.

The two clients only send: `response = self._call(method, request)` or `await ...`.
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

DEFAULT_CHUNK_BYTES = 1 << 20

TensorInfo = collections.namedtuple(
    "TensorInfo",
    ["name", "dtype", "shape", "bytes", "device", "version", "created", "storage", "shard",
     "sequence", "keyed", "tier", "disk"],
    defaults=["as-is", None, 0, None, "memory", None], module="tensorcompute")
TensorInfo.__doc__ = """A resident tensor as the server describes it.

name (str); dtype (str: "float32", "string", ... as numpy names it; "bfloat16": for a compact
table what lookups return, "float32"); shape (tuple of ints; a compact table's [rows, dim]);
bytes (int: what it holds, counted against the server's --max_resident_bytes); device (str:
"cpu" or "gpu:N"); version (int: 1 for a name's first tensor, one more per replacement);
created (datetime.datetime, UTC: when this version became visible); storage (str: one of
STORAGE_KINDS, how it is stored); shard (None, or a Shard: which rows of a table sharded by
row ranges it holds, shape then the whole table's; or, with by_key=True, which keys of a keyed
table sharded by key, key_shard); sequence (int: how many changes this
server applied to the name's rows, one per update_rows message and per replacement; what
min_sequence= on a lookup compares with); keyed (None, or a KeyedInfo: a table put with keys);
tier (str: "memory", or "disk" for a table whose rows are in a file on the server's disk, its
bytes then its row cache's); disk (None, or a DiskInfo: a table on disk's file and cache).
"""

DiskInfo = collections.namedtuple("DiskInfo", ["file", "file_bytes", "cache_rows", "cached_rows"],
                                  module="tensorcompute")
DiskInfo.__doc__ = """A table on disk (put_tensor with tier="disk", or --preload ...:disk):
file (str: the --preload file, or "TABLE_DIR/(unnamed)" for one the server wrote); file_bytes
(int: its rows' bytes in the file); cache_rows (int: the rows its cache may hold); cached_rows
(int: the rows it holds now).
"""

KeyedInfo = collections.namedtuple("KeyedInfo", ["missing", "has_default_row", "capacity", "keys"],
                                   module="tensorcompute")
KeyedInfo.__doc__ = """A keyed table's keys (put_tensor with keys=): missing (str: its policy for
a key it lacks, "error", "zero" or "default"); has_default_row (bool); capacity (int: the rows
it has now, the capacity put or what update_rows grew it to); keys (int: how many keys it holds
now).
"""

Shard = collections.namedtuple("Shard", ["index", "count", "total_rows", "by_key"],
                               defaults=(False,), module="tensorcompute")
Shard.__doc__ = """Shard `index` of `count` of a table of `total_rows` rows: it holds rows
[index * ceil(total_rows / count), min(total_rows, (index + 1) * ceil(total_rows / count))).
With by_key=True, shard `index` of a keyed table sharded by key: it holds the keys k with
key_shard(k, count) == index (total_rows is then the whole table's keys, or 0).
"""

_SPLITMIX_1 = np.uint64(0xbf58476d1ce4e5b9)
_SPLITMIX_2 = np.uint64(0x94d049bb133111eb)


def key_shard(keys, count):
    """The shard owning each key of a keyed table sharded by key over `count` shards: an int64
    array of keys' shape. The documented hash (docs/resident-tables.md, "Sharding by key"),
    splitmix64's finalizer of the key's 64 bits, then the unsigned remainder by count:

        z = uint64(key)
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9      (mod 2**64)
        z = (z ^ (z >> 27)) * 0x94d049bb133111eb      (mod 2**64)
        z = z ^ (z >> 31)
        shard = z % count

    e.g. key_shard(1, 8) == 5 and key_shard(-1, 10) == 7.
    """
    count = operator.index(count)
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    keys = np.asarray(keys, dtype=np.int64)
    z = np.ascontiguousarray(keys).reshape(-1).view(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _SPLITMIX_1
        z = (z ^ (z >> np.uint64(27))) * _SPLITMIX_2
        z = z ^ (z >> np.uint64(31))
    shards = (z % np.uint64(count)).astype(np.int64)
    return shards.reshape(keys.shape)


key_shard.__module__ = "tensorcompute"


def shard_rows(total_rows, count, index):
    """The rows [begin, end) that shard `index` of `count` of a table of total_rows holds."""
    per = max(1, -(-total_rows // count))
    begin = min(total_rows, index * per)
    return begin, min(total_rows, begin + per)


shard_rows.__module__ = "tensorcompute"

# How put_tensor may store a table (tensorcompute.proto, TableStorage): the wire value of each.
STORAGE_KINDS = {
    "as-is": 0,
    "float16": 1,
    "int8-rowwise": 2,
    "int8-rowwise-prequantized": 3,
}
_STORAGE_NAMES = {v: k for k, v in STORAGE_KINDS.items()}

# Where put_tensor may keep a table's rows (tensorcompute.proto, TableTier): the wire value of each.
TIERS = {
    "memory": 0,
    "disk": 1,
}
_TIER_NAMES = {v: k for k, v in TIERS.items()}

# The compression argument -> grpc.Compression (None: none).
COMPRESSIONS = {
    "none": grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}

_INITIAL_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 5.0
# round_robin over every address the target resolves to, skipping servers whose health
# (grpc.health.v1, client-side health checking) is not SERVING: a draining replica stops
# getting calls as soon as it says so, before it closes its connections.
_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": "tensorcompute.v1.TensorCompute"},
}

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

# The missing= argument of put_tensor, gather and embedding_bag -> MissingKeys ("skip": bags
# only; None or "table" in a lookup: the table's policy).
_MISSING_KEYS = {
    "table": pb.MISSING_TABLE,
    "error": pb.MISSING_ERROR,
    "zero": pb.MISSING_ZERO,
    "default": pb.MISSING_DEFAULT_ROW,
    "default_row": pb.MISSING_DEFAULT_ROW,
    "skip": pb.MISSING_SKIP,
}
_MISSING_NAMES = {
    pb.MISSING_ERROR: "error",
    pb.MISSING_ZERO: "zero",
    pb.MISSING_DEFAULT_ROW: "default",
    pb.MISSING_SKIP: "skip",
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


TensorComputeError.__module__ = "tensorcompute"


# --- numpy <-> tensorcompute.v1.Tensor ------------------------------------------------------

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


def to_tensor(value, name, default_dtype=None):
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


def from_tensor(tensor):
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


def tensor_info(info):
    """A TensorInfo from a tensorcompute.v1.TensorInfo message."""
    created = datetime.datetime.fromtimestamp(info.created.seconds, tz=datetime.timezone.utc)
    created += datetime.timedelta(microseconds=info.created.nanos // 1000)
    return TensorInfo(name=info.name, dtype=_WIRE_NAMES.get(info.dtype, str(info.dtype)),
                      shape=tuple(info.shape), bytes=info.bytes, device=info.device,
                      version=info.version, created=created,
                      storage=_STORAGE_NAMES.get(info.storage, str(info.storage)),
                      shard=Shard(info.shard.index, info.shard.count, info.shard.total_rows,
                                  info.shard.by_key)
                      if info.HasField("shard") else None,
                      sequence=info.sequence,
                      keyed=KeyedInfo(_MISSING_NAMES.get(info.keyed.missing,
                                                         str(info.keyed.missing)),
                                      info.keyed.has_default_row, info.keyed.capacity,
                                      info.keyed.keys) if info.HasField("keyed") else None,
                      tier=_TIER_NAMES.get(info.tier, str(info.tier)),
                      disk=DiskInfo(info.disk.file, info.disk.file_bytes, info.disk.cache_rows,
                                    info.disk.cached_rows) if info.HasField("disk") else None)


# --- requests from a method's arguments -----------------------------------------------------

def _set_params(request, params, params_name):
    """Sets exactly one of request.params and request.params_name."""
    if (params is None) == (params_name is None):
        raise ValueError("expected exactly one of params and params_name")
    if params_name is not None:
        request.params_name = params_name
    else:
        request.params.CopyFrom(to_tensor(params, "params"))


def _set_min_sequence(request, min_sequence):
    """Sets request.min_sequence (None: 0, any)."""
    if min_sequence is not None:
        request.min_sequence = operator.index(min_sequence)


def _missing_keys(missing):
    """The missing= argument as a MissingKeys: None is MISSING_TABLE; ValueError for an
    unknown one."""
    if missing is None:
        return pb.MISSING_TABLE
    wire = (_MISSING_KEYS.get(missing.lower().replace("-", "_"))
            if isinstance(missing, str) else None)
    if wire is None:
        raise ValueError(f"missing must be None or one of error, zero, default, skip, got "
                         f"{missing!r}")
    return wire


def _keys_tensor(keys):
    """Lookup keys as a Tensor: signed integers are sent as int64 (a list of ints, an empty
    list too); any other dtype as it is, for the server to refuse."""
    array = np.asarray(keys)
    if array.dtype.kind == "i" or (array.size == 0 and not isinstance(keys, np.ndarray)):
        array = array.astype(np.int64, copy=False)
    return to_tensor(array, "keys")


def _set_lookup(request, indices, keys, missing, return_found):
    """Sets request.indices, or request.keys (a lookup by keys on a keyed table); and
    request.missing and request.return_found (the server refuses them with indices)."""
    if (indices is None) == (keys is None):
        raise ValueError("expected exactly one of indices and keys")
    if keys is None:
        request.indices.CopyFrom(to_tensor(indices, "indices", default_dtype=np.int64))
    else:
        request.keys.CopyFrom(_keys_tensor(keys))
    request.missing = _missing_keys(missing)
    request.return_found = bool(return_found)


def gather_request(params, indices, axis, batch_dims, params_name, min_sequence=None,
                   keys=None, missing=None, return_found=False):
    """Client.gather's GatherRequest."""
    request = pb.GatherRequest(batch_dims=operator.index(batch_dims))
    _set_lookup(request, indices, keys, missing, return_found)
    _set_params(request, params, params_name)
    _set_min_sequence(request, min_sequence)
    if axis is not None:
        request.axis = operator.index(axis)
    return request


def gather_nd_request(params, indices, batch_dims, params_name, min_sequence=None):
    """Client.gather_nd's GatherNdRequest."""
    request = pb.GatherNdRequest(
        indices=to_tensor(indices, "indices", default_dtype=np.int64),
        batch_dims=operator.index(batch_dims))
    _set_params(request, params, params_name)
    _set_min_sequence(request, min_sequence)
    return request


def embedding_bag_request(params, indices, offsets, per_sample_weights, mode,
                          include_last_offset, padding_idx, params_name, min_sequence=None,
                          keys=None, missing=None, return_found=False):
    """Client.embedding_bag's EmbeddingBagRequest."""
    wire_mode = _EMBEDDING_BAG_MODES.get(str(mode).lower()) if isinstance(mode, str) else None
    if wire_mode is None:
        raise ValueError(f"mode must be one of {', '.join(_EMBEDDING_BAG_MODES)}, "
                         f"got {mode!r}")
    request = pb.EmbeddingBagRequest(mode=wire_mode,
                                     include_last_offset=bool(include_last_offset))
    _set_lookup(request, indices, keys, missing, return_found)
    _set_params(request, params, params_name)
    if offsets is not None:
        request.offsets.CopyFrom(to_tensor(offsets, "offsets", default_dtype=np.int64))
    if per_sample_weights is not None:
        if not isinstance(per_sample_weights, np.ndarray):
            per_sample_weights = np.asarray(per_sample_weights, dtype=np.float32)
        request.per_sample_weights.CopyFrom(
            to_tensor(per_sample_weights, "per_sample_weights"))
    if padding_idx is not None:
        request.padding_idx = operator.index(padding_idx)
    _set_min_sequence(request, min_sequence)
    return request


def output(response):
    """The output tensor of a Gather, GatherNd or EmbeddingBag response, as numpy."""
    return from_tensor(response.output)


def lookup_output(response, return_found):
    """A Gather's or EmbeddingBag's answer: the output, or with return_found (output, found),
    found the bool mask of the keys' shape."""
    if not return_found:
        return output(response)
    return from_tensor(response.output), from_tensor(response.found)


def put_uploads(name, array, device, replace, chunk_bytes, storage, shard, keys=None,
                missing=None, default_row=None, capacity=None, tier="memory"):
    """Client.put_tensor's upload: a function that makes a fresh iterator over its
    PutTensorRequests (one per attempt: a retried upload starts over)."""
    if keys is None and (missing is not None or default_row is not None or
                         capacity is not None):
        raise ValueError("missing, default_row and capacity are for a keyed table: pass keys")
    if shard is not None:
        shard = Shard(*shard)
    wire_storage = STORAGE_KINDS.get(str(storage).lower().replace("_", "-"))
    if wire_storage is None:
        raise ValueError(f"storage must be one of {', '.join(STORAGE_KINDS)}, got {storage!r}")
    wire_tier = TIERS.get(str(tier).lower())
    if wire_tier is None:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    chunk_bytes = operator.index(chunk_bytes)
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    lazy = _fixed_size_reader(array)
    if lazy is not None:  # read chunk by chunk when sent: a np.memmap is never copied whole
        tensor, read = lazy
    else:
        tensor = to_tensor(array, "array")
        read = None
    keyed, key_bytes = None, None
    if keys is not None:
        keyed, key_bytes = _keyed_table(tensor, wire_storage, keys, missing, default_row,
                                        capacity)
    return lambda: _put_requests(name, tensor, device, bool(replace), chunk_bytes, wire_storage,
                                 shard, read, keyed, key_bytes, wire_tier)


def _keyed_table(tensor, storage, keys, missing, default_row, capacity):
    """put_tensor's KeyedTable for `tensor` (the table's Tensor, perhaps without its data) and
    its keys as int64 little-endian bytes. ValueError for keys that are not signed integers of
    rank 1, one per row, or an unknown missing."""
    keys = _key_array(keys, "keys")
    if not tensor.shape or tensor.shape[0] != keys.shape[0]:
        raise ValueError(f"keys must be one per row: got {keys.shape[0]} keys for a table of "
                         f"shape {list(tensor.shape)}")
    keyed = pb.KeyedTable(missing=_missing_keys(missing),
                          capacity=0 if capacity is None else operator.index(capacity))
    if default_row is not None:
        if not isinstance(default_row, np.ndarray):
            # A list of numbers in the dtype lookups return: float32 for a converted table.
            default_row = np.asarray(default_row, dtype=_default_row_dtype(tensor, storage))
        keyed.default_row.CopyFrom(to_tensor(default_row, "default_row"))
    return keyed, keys.tobytes()


def _default_row_dtype(tensor, storage):
    """The dtype a default row given as a list is sent in: float32 for the kinds the server
    converts, else the table's (None, numpy's choice, for one numpy cannot name)."""
    if storage in (STORAGE_KINDS["float16"], STORAGE_KINDS["int8-rowwise"]):
        return np.float32
    return _WIRE_TO_NUMPY.get(tensor.dtype)


def _fixed_size_reader(array):
    """For a C-contiguous ndarray (np.memmap included) of a numeric or bfloat16 dtype: a
    tensorcompute.v1.Tensor with its dtype and shape but no data, and read(begin, end), the
    little-endian bytes of its elements [begin, end) (converted per call). Anything else: None
    (to_tensor converts it whole)."""
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
        return None
    dtype = array.dtype
    flat = array.reshape(-1)  # a view: C-contiguous
    wire = _NUMERIC_TO_WIRE.get((dtype.kind, dtype.itemsize))
    if wire is not None:
        little = dtype.newbyteorder("<")

        def read(begin, end):
            return flat[begin:end].astype(little, copy=False).tobytes()
    elif dtype.kind == "V" and dtype.name == "bfloat16" and dtype == _bfloat16_dtype():
        wire = pb.DT_BFLOAT16

        def read(begin, end):
            return flat[begin:end].view(np.uint16).astype("<u2", copy=False).tobytes()
    else:
        return None
    return pb.Tensor(dtype=wire, shape=array.shape), read


def _put_requests(name, tensor, device, replace, chunk_bytes, storage=0, shard=None, read=None,
                  keyed=None, key_bytes=None, tier=0):
    """The messages of a PutTensor upload of `tensor` (a tensorcompute.v1.Tensor), lazily.

    The first one describes the tensor; each carries the next chunk: at most chunk_bytes bytes
    of data, in whole elements, at byte `offset`; or for strings consecutive elements whose wire
    size (bytes + tag + length) stays within chunk_bytes (one larger string alone), `offset`
    being the element index of the first. An empty tensor is the description alone. `read`
    (from _fixed_size_reader), when given, supplies the data's elements [begin, end) as bytes
    instead of tensor.data.

    A keyed table (`keyed`, its KeyedTable, and key_bytes, its keys as int64 little-endian)
    sends each row's key beside it: a message carries the keys of the rows its data starts, and
    its rows are whole when a row and its key fit in chunk_bytes (at most chunk_bytes of data
    and keys then). Keys that no data carries (rows of 0 bytes, strings) follow in messages of
    their own, of at most chunk_bytes.
    """
    first = pb.PutTensorRequest(name=name, dtype=tensor.dtype, shape=tensor.shape,
                                device=device, replace=replace, storage=storage, tier=tier)
    if shard is not None:
        first.shard.CopyFrom(pb.ShardSpec(index=shard.index, count=shard.count,
                                          total_rows=shard.total_rows, by_key=shard.by_key))
    if keyed is not None:
        first.keyed.CopyFrom(keyed)
    for message in _data_requests(first, tensor, chunk_bytes, read, key_bytes):
        yield message


def _data_requests(first, tensor, chunk_bytes, read, key_bytes):
    """_put_requests' messages from the first one on: the data, and a keyed table's keys."""
    key_bytes = key_bytes or b""
    if tensor.dtype == pb.DT_STRING:
        offset = 0
        for message in _string_requests(first, tensor, chunk_bytes):
            offset = message.offset + len(message.strings)
            yield message
        yield from _key_requests(key_bytes, 0, chunk_bytes, offset)
        return
    element = _ELEMENT_SIZES[tensor.dtype]
    chunk = max(element, chunk_bytes // element * element)
    if read is None:
        data = tensor.data
        total = len(data)

        def read(begin, end):
            return data[begin * element:end * element]
    else:
        total = element
        for d in tensor.shape:
            total *= d
    rows = tensor.shape[0] if tensor.shape else 0
    row_bytes = total // rows if rows else 0
    if key_bytes and 0 < row_bytes and row_bytes + 8 <= chunk_bytes:
        chunk = chunk_bytes // (row_bytes + 8) * row_bytes  # whole rows and their keys

    def keys_until(end):  # the keys of the rows that data [0, end) starts
        return 8 * -(-end // row_bytes) if row_bytes else 0

    first.offset = 0
    first.data = read(0, min(total, chunk) // element)
    first.keys = key_bytes[:keys_until(min(total, chunk))]
    yield first
    for begin in range(chunk, total, chunk):
        end = min(total, begin + chunk)
        yield pb.PutTensorRequest(offset=begin, data=read(begin // element, end // element),
                                  keys=key_bytes[keys_until(begin):keys_until(end)])
    yield from _key_requests(key_bytes, keys_until(total), chunk_bytes, total)


def _key_requests(key_bytes, begin, chunk_bytes, offset):
    """Messages of keys alone: key_bytes[begin:], whole keys, at most chunk_bytes of them (one
    key at least) a message, each at `offset` (where the data or the strings ended)."""
    per = max(8, chunk_bytes // 8 * 8)
    for start in range(begin, len(key_bytes), per):
        yield pb.PutTensorRequest(offset=offset, keys=key_bytes[start:start + per])


def _string_requests(first, tensor, chunk_bytes):
    """The messages of a DT_STRING upload: consecutive elements whose wire size stays within
    chunk_bytes (one larger string alone), `offset` the element index of the first."""
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


# Room left in an update_rows message, beyond its rows, for the name and the tensors' headers.
UPDATE_MESSAGE_OVERHEAD = 4096


def update_uploads(name, indices, values, chunk_bytes, max_message_bytes, keys=None,
                   delete_keys=None):
    """Client.update_rows's stream: a function that makes a fresh iterator over its
    UpdateRowsRequests (one per attempt: a retried stream starts over). Argument errors are
    raised here, before any RPC."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    chunk_bytes = operator.index(chunk_bytes)
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    chunk_bytes = min(chunk_bytes, max(1, int(max_message_bytes) - UPDATE_MESSAGE_OVERHEAD))
    if keys is not None or delete_keys is not None:
        if indices is not None:
            raise ValueError("give indices, or keys (and delete_keys), not both")
        return _keyed_update_uploads(name, keys, values, delete_keys, chunk_bytes)
    if indices is None or values is None:
        raise ValueError("update_rows needs indices and values (or keys= for a keyed table)")
    indices = np.asarray(indices)
    if indices.size == 0 and indices.dtype.kind == "f":
        indices = indices.astype(np.int64)  # np.asarray([]) is float64
    if indices.ndim != 1 or indices.dtype.kind != "i" or indices.dtype.itemsize not in (4, 8):
        raise ValueError(f"indices must be int32 or int64 of rank 1, got {indices.dtype} "
                         f"{list(indices.shape)}")
    indices = indices.astype(np.int32 if indices.dtype.itemsize == 4 else np.int64, copy=False)
    values = np.asarray(values)
    if values.ndim < 1 or values.shape[0] != indices.shape[0]:
        raise ValueError(f"values must have one row per index: got shape {list(values.shape)} "
                         f"for {indices.shape[0]} indices")
    if values.dtype.kind in "SUO":
        raise TypeError("values: string tables are not updated in place (replace them with "
                        "put_tensor)")
    reader = _fixed_size_reader(np.ascontiguousarray(values))
    if reader is None:
        raise TypeError(f"values: unsupported dtype {values.dtype}; supported: {_SUPPORTED}")
    header, read = reader
    row_elements = 1
    for d in values.shape[1:]:
        row_elements *= d
    row_bytes = row_elements * _ELEMENT_SIZES[header.dtype]
    rows_per_message = max(1, chunk_bytes // (row_bytes + indices.dtype.itemsize))
    index_wire = _NUMERIC_TO_WIRE[(indices.dtype.kind, indices.dtype.itemsize)]
    little_indices = indices.astype(indices.dtype.newbyteorder("<"), copy=False)

    def requests():
        total = indices.shape[0]
        begin = 0
        while True:
            end = min(total, begin + rows_per_message)
            message = pb.UpdateRowsRequest(
                indices=pb.Tensor(dtype=index_wire, shape=[end - begin],
                                  data=little_indices[begin:end].tobytes()),
                values=pb.Tensor(dtype=header.dtype, shape=[end - begin, *values.shape[1:]],
                                 data=read(begin * row_elements, end * row_elements)))
            if begin == 0:
                message.name = name
            yield message
            begin = end
            if begin >= total:
                return

    return requests


def _key_array(keys, what):
    """Keys as little-endian int64 of rank 1 (a list of ints, or any signed integers)."""
    keys = np.asarray(keys)
    if keys.size == 0 and keys.dtype.kind == "f":
        keys = keys.astype(np.int64)  # np.asarray([]) is float64
    if keys.ndim != 1 or keys.dtype.kind != "i":
        raise ValueError(f"{what} must be signed integers of rank 1, got {keys.dtype} "
                         f"{list(keys.shape)}")
    return keys.astype("<i8", copy=False)


def _keyed_update_uploads(name, keys, values, delete_keys, chunk_bytes):
    """update_uploads by keys: first the deletes (so that their slots are free for the keys
    written after), then the keys written with their rows, in messages of at most chunk_bytes
    (whole rows, at least one a message)."""
    doomed = _key_array([] if delete_keys is None else delete_keys, "delete_keys")
    if keys is None:
        if values is not None:
            raise ValueError("values need keys (the keys whose rows they are)")
        keys = np.zeros([0], np.int64)
        values = None
    keys = _key_array(keys, "keys")
    written = {int(k): i for i, k in enumerate(keys.tolist())}
    for i, k in enumerate(doomed.tolist()):
        if int(k) in written:
            raise ValueError(f"delete_keys[{i}] = {k} is also in keys[{written[int(k)]}]; a "
                             f"call writes or deletes a key, not both")
    reader = None
    if keys.shape[0] > 0 or values is not None:
        values = np.asarray(values)
        if values.ndim < 1 or values.shape[0] != keys.shape[0]:
            raise ValueError(f"values must have one row per key: got shape "
                             f"{list(values.shape)} for {keys.shape[0]} keys")
        if values.dtype.kind in "SUO":
            raise TypeError("values: string tables are not keyed")
        reader = _fixed_size_reader(np.ascontiguousarray(values))
        if reader is None:
            raise TypeError(f"values: unsupported dtype {values.dtype}; supported: {_SUPPORTED}")
    keys_per_delete = max(1, chunk_bytes // 8)
    if reader is not None:
        header, read = reader
        row_elements = 1
        for d in values.shape[1:]:
            row_elements *= d
        row_bytes = row_elements * _ELEMENT_SIZES[header.dtype]
        rows_per_message = max(1, chunk_bytes // (row_bytes + 8))

    def requests():
        messages = []
        for begin in range(0, doomed.shape[0], keys_per_delete):
            part = doomed[begin:begin + keys_per_delete]
            messages.append(pb.UpdateRowsRequest(
                delete_keys=pb.Tensor(dtype=pb.DT_INT64, shape=[part.shape[0]],
                                      data=part.tobytes())))
        if reader is not None:
            total = keys.shape[0]
            begin = 0
            while True:
                end = min(total, begin + rows_per_message)
                messages.append(pb.UpdateRowsRequest(
                    keys=pb.Tensor(dtype=pb.DT_INT64, shape=[end - begin],
                                   data=keys[begin:end].tobytes()),
                    values=pb.Tensor(dtype=header.dtype, shape=[end - begin, *values.shape[1:]],
                                     data=read(begin * row_elements, end * row_elements))))
                begin = end
                if begin >= total:
                    break
        if not messages:  # nothing to write or delete: one empty delete names the table
            messages.append(pb.UpdateRowsRequest(
                delete_keys=pb.Tensor(dtype=pb.DT_INT64, shape=[0])))
        messages[0].name = name
        yield from messages

    return requests


def update_sequence(response):
    """UpdateRows' answer: the table's new sequence."""
    return response.sequence


def _varint_size(value):
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def delete_request(name):
    return pb.DeleteTensorRequest(name=name)


def list_request():
    return pb.ListTensorsRequest()


def tensor_infos(response):
    """ListTensors' answer: a list of TensorInfo."""
    return [tensor_info(t) for t in response.tensors]


def put_or_delete_info(response):
    """PutTensor's or DeleteTensor's answer: the TensorInfo."""
    return tensor_info(response.tensor)


def health_request(service):
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckRequest(service=service)


def health_status(response):
    """A HealthCheckResponse's status by name: "SERVING", "NOT_SERVING", ..."""
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


# --- targets, channels, retries -------------------------------------------------------------

def _replica_targets(target):
    """The addresses of an "ipv4:a,b" / "ipv6:a,b" target, one target each; else [target]."""
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            addresses = [a.strip() for a in target[len(scheme):].split(",") if a.strip()]
            return [scheme + a for a in addresses] or [target]
    return [target]


def _pem(value, name):
    """PEM bytes as they are; a str or os.PathLike names a file to read; None stays None."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (str, os.PathLike)):
        with open(value, "rb") as f:
            return f.read()
    raise TypeError(f"{name}: expected PEM bytes or a file path, got {type(value).__name__}")


def _compression(value):
    """The compression argument as a grpc.Compression; ValueError for an unknown one."""
    if value is None:
        return grpc.Compression.NoCompression
    if isinstance(value, grpc.Compression):
        return value
    compression = COMPRESSIONS.get(value.lower()) if isinstance(value, str) else None
    if compression is None:
        raise ValueError(f"compression must be None, one of {', '.join(COMPRESSIONS)} or a "
                         f"grpc.Compression, got {value!r}")
    return compression


class Attempts:
    """One call's retry policy: its deadline, and the backoff before each further attempt."""

    def __init__(self, retries, timeout):
        self._retries = retries
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._attempt = 0

    def remaining(self):
        """The timeout for the next attempt: what is left of the call's (None: no deadline)."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def backoff(self, rpc_error):
        """After an attempt failed with rpc_error (a grpc.RpcError): the seconds to sleep
        before the next one. Raises the failure as TensorComputeError when there is none: the
        code is not UNAVAILABLE, no retry is left, or the sleep would pass the deadline."""
        error = TensorComputeError(rpc_error.code(), rpc_error.details())
        if rpc_error.code() != grpc.StatusCode.UNAVAILABLE or self._attempt >= self._retries:
            raise error from None
        self._attempt += 1
        backoff = min(_INITIAL_BACKOFF_S * 2 ** (self._attempt - 1), _MAX_BACKOFF_S)
        sleep = backoff * random.uniform(0.5, 1.0)
        if self._deadline is not None and time.monotonic() + sleep >= self._deadline:
            raise error from None
        return sleep


def all_targets_outcome(what, name, outcomes):
    """The result of put/delete with all_targets from [(target, TensorInfo or
    TensorComputeError)], one per address: the first TensorInfo when every address succeeded;
    else a TensorComputeError naming each failure and each success is raised."""
    failures = [(t, e) for t, e in outcomes if isinstance(e, TensorComputeError)]
    succeeded = [t for t, e in outcomes if not isinstance(e, TensorComputeError)]
    if not failures:
        return outcomes[0][1]
    detail = "; ".join(f"{t}: {e.code.name}: {e.message}" for t, e in failures)
    done = f"succeeded on: {', '.join(succeeded)}" if succeeded else "succeeded on none"
    raise TensorComputeError(
        failures[0][1].code,
        f"{what} {name}: failed on {len(failures)} of {len(outcomes)} targets: {detail}; "
        f"{done}")


class ClientBase:
    """The channels and settings of a client; the subclass sets _grpc (grpc or grpc.aio) and
    sends the calls."""

    _grpc = None
    _repr_name = None

    def __init__(self, target="localhost:50051", timeout=30.0, max_message_bytes=64 << 20,
                 retries=0, tls=False, root_certificates=None, certificate_chain=None,
                 private_key=None, tls_server_name=None, auth_token=None, admin_token=None,
                 compression=None):
        """target: "host:port" or a gRPC target URI (dns:///h:p, ipv4:a:p,b:p, unix:path).
        timeout: default seconds per call, retries included (None = no deadline).
        max_message_bytes: largest message sent or received.
        retries: extra attempts on UNAVAILABLE, with exponential backoff and jitter (0 = off).
        tls, root_certificates, certificate_chain, private_key, tls_server_name, auth_token,
        admin_token: see "TLS and tokens" in tensorcompute.client's docstring.
        compression: None (the default) or "none", "gzip", "deflate" (or a grpc.Compression):
        how this client compresses what it sends; see "Compression" there. An unknown one is
        ValueError.
        """
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        wire_compression = _compression(compression)
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
        self._max_message_bytes = int(max_message_bytes)
        self.retries = int(retries)
        self.compression = compression
        options = [
            ("grpc.max_send_message_length", int(max_message_bytes)),
            ("grpc.max_receive_message_length", int(max_message_bytes)),
            ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
        ]
        if self.retries:
            # With retries the channel also reconnects sooner, so that a retry after a refused
            # connection really tries the connection again.
            backoff_ms = int(_INITIAL_BACKOFF_S * 1000)
            options += [
                ("grpc.initial_reconnect_backoff_ms", backoff_ms),
                ("grpc.min_reconnect_backoff_ms", backoff_ms),
                ("grpc.max_reconnect_backoff_ms", int(_MAX_BACKOFF_S * 1000)),
            ]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        credentials = (grpc.ssl_channel_credentials(root_certificates, private_key,
                                                    certificate_chain) if tls else None)

        def make_channel(to, opts):
            if credentials is not None:
                return self._grpc.secure_channel(to, credentials, options=opts,
                                                 compression=wire_compression)
            return self._grpc.insecure_channel(to, options=opts, compression=wire_compression)

        self._closed = False
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

    def _health_check(self):
        """The health service's Check method, on the health channel."""
        from grpc_health.v1 import health_pb2_grpc

        if self._health_stub is None:
            self._health_stub = health_pb2_grpc.HealthStub(self._health_channel)
        return self._health_stub.Check

    def _replica_stubs(self):
        """[(address, stub)] for all_targets, one per address of the target; None when the
        target is one address (then this client's own stub serves)."""
        if self._replica_channels is None:
            self._replica_channels = [
                (target, self._make_channel(target, self._options))
                for target in _replica_targets(self.target)]
        if len(self._replica_channels) == 1:
            return None
        return [(target, pb_grpc.TensorComputeStub(channel))
                for target, channel in self._replica_channels]

    def _channels_to_close(self):
        """Every channel this client made; marks it closed (later calls raise ValueError)."""
        self._closed = True
        return [self._channel, self._health_channel,
                *(channel for _, channel in self._replica_channels or [])]

    def _check_open(self):
        if self._closed:
            raise ValueError("Cannot invoke RPC on closed channel!")

    def __repr__(self):
        compression = "" if self.compression is None else f", compression={self.compression!r}"
        return (f"{self._repr_name}(target={self.target!r}, timeout={self.timeout!r}, "
                f"retries={self.retries}{compression})")
