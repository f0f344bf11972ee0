#!/usr/bin/env python3
"""Writes the checked-in seed corpora of tests/fuzz/ (run it again to remake them).

  tests/fuzz/corpus/core_gather_fuzzer/   inputs in core_gather_fuzzer's FuzzedDataProvider
                                          format (FdpWriter mirrors the calls it makes)
  tests/fuzz/corpus/wire_request_fuzzer/  one selector byte (0 Gather, 1 GatherNd, 0x40
                                          EmbeddingBag) and a serialized GatherRequest /
                                          GatherNdRequest / EmbeddingBagRequest
  tests/fuzz/corpus/http_request_fuzzer/  raw HTTP/1.1 bytes of one connection: the requests of
                                          tests/server/kserve_http*_test.py and docs/kserve.md

The seeds are the inputs of the advisories issue 8 names (TF CVE-2021-37687, -37653, -37654,
CVE-2022-35937, TF#58262, onnxruntime#27963), edge cases of validation, and one small valid
request of each dtype for Gather and GatherNd. Only the seed_* files are written here; the
other files of the corpora (SHA-1 names) are inputs that long fuzzing runs found and
`-merge=1` kept (docs/reliability.md). Usage (from the repository root, with the
project's virtual environment, which has grpcio-tools and protobuf):

  .venv/bin/python3 tests/fuzz/make_seeds.py
"""

import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "tests", "fuzz", "corpus")
PROTO_ROOT = os.path.join(REPO, "proto")

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# core::DataType numbers (core/dtype.h), with struct formats for the numeric ones.
DTYPES = {
    "bool": (1, "?"), "int8": (2, "b"), "int16": (3, "h"), "int32": (4, "i"), "int64": (5, "q"),
    "uint8": (6, "B"), "uint16": (7, "H"), "uint32": (8, "I"), "uint64": (9, "Q"),
    "float16": (10, "e"), "bfloat16": (11, "H"), "float32": (12, "f"), "float64": (13, "d"),
    "complex64": (14, "ff"), "complex128": (15, "dd"), "string": (16, None),
}
# core_gather_fuzzer.cc's kBigDims, in order.
BIG_DIMS = [1 << 16, 1 << 20, 1 << 31, (1 << 31) + 1, 1 << 32, 1 << 40, 1 << 62, INT64_MAX, -1,
            INT64_MIN]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# ---- core_gather_fuzzer ------------------------------------------------------------------

class FdpWriter:
    """Builds an input that makes FuzzedDataProvider return chosen values.

    ConsumeIntegralInRange(lo, hi) reads bytes from the END of the input, most significant
    first, as many as the range needs, and takes the result modulo (range + 1); so each value
    is written big-endian in that many bytes and the whole list is reversed at the end.
    """

    def __init__(self):
        self.consumed = bytearray()

    def in_range(self, lo, hi, value):
        assert lo <= value <= hi, (lo, value, hi)
        span, r, n = hi - lo, value - lo, 0
        while n < 8 and (span >> (8 * n)) > 0:
            n += 1
        self.consumed += r.to_bytes(n, "big") if n else b""

    def boolean(self, value):
        self.in_range(0, 255, 1 if value else 0)

    def int64(self, value):
        self.in_range(INT64_MIN, INT64_MAX, value)

    def data(self):
        return bytes(reversed(self.consumed))


def write_dim(w, d):
    if 0 <= d <= 5:
        w.in_range(0, 15, 0)
        w.in_range(0, 5, d)
    elif d in BIG_DIMS:
        w.in_range(0, 15, 13)
        w.in_range(0, len(BIG_DIMS) - 1, BIG_DIMS.index(d))
    elif 6 <= d <= 300:
        w.in_range(0, 15, 15)
        w.in_range(6, 300, d)
    else:
        w.in_range(0, 15, 14)
        w.int64(d)


def write_arg(w, value, rank):
    """ConsumeArg: None is 'unset' (axis) or 0 (batch_dims)."""
    if value is None:
        w.in_range(0, 15, 15)
    elif value == INT64_MIN:
        w.in_range(0, 15, 12)
    elif value == INT64_MAX:
        w.in_range(0, 15, 13)
    elif -rank - 1 <= value <= rank:
        w.in_range(0, 15, 0)
        w.in_range(-rank - 1, rank, value)
    else:
        w.in_range(0, 15, 14)
        w.int64(value)


CORRUPT = {None: 15, "params_short": 0, "params_long": 1, "params_field": 2,
           "indices_short": 3, "indices_long": 4, "indices_field": 5}


def core_seed(nd, dtype, params_shape, index_dtype, indices_shape, values=(), axis=None,
              batch_dims=0, corrupt=None, string_scale=0, exec_sel=0):
    """One core_gather_fuzzer input. `values` are the index values (the fuzzer's "anything"
    selector, 8 bytes each); positions beyond them read as the smallest in-range value."""
    w = FdpWriter()
    w.boolean(nd)
    if dtype == "unspecified":
        w.in_range(0, 17, 16)
    elif dtype == "unknown":
        w.in_range(0, 17, 17)
    else:
        w.in_range(0, 17, DTYPES[dtype][0] - 1)
    if index_dtype == "int32":
        w.in_range(0, 7, 0)
    elif index_dtype == "int64":
        w.in_range(0, 7, 4)
    else:
        w.in_range(0, 7, 7)
        w.in_range(0, 15, DTYPES[index_dtype][0] - 1)
    for shape in (params_shape, indices_shape):
        w.in_range(0, 6, len(shape))
        for d in shape:
            write_dim(w, d)
    write_arg(w, axis, len(params_shape))
    write_arg(w, batch_dims, len(indices_shape))
    w.in_range(0, 15, CORRUPT[corrupt])
    w.in_range(0, 3, string_scale)
    w.in_range(0, 7, exec_sel)
    if index_dtype in ("int32", "int64"):
        for v in values:
            w.in_range(0, 15, 15)
            w.int64(v)
    return w.data()


# ---- wire_request_fuzzer -----------------------------------------------------------------

def load_pb2():
    """Compiles tensorcompute.proto with grpc_tools.protoc into a scratch folder."""
    scratch = tempfile.mkdtemp(prefix="tc-seeds-")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={PROTO_ROOT}",
                    f"--python_out={scratch}", "tensorcompute/v1/tensorcompute.proto"],
                   check=True)
    sys.path.insert(0, scratch)
    return importlib.import_module("tensorcompute.v1.tensorcompute_pb2"), scratch


def pattern_values(dtype, n):
    fmt = DTYPES[dtype][1]
    if dtype == "bool":
        return [i % 2 == 1 for i in range(n)]
    if fmt in ("f", "d", "e"):
        return [i * 0.5 - 1 for i in range(n)]
    if fmt in ("ff", "dd"):
        return [(i * 0.5, -float(i)) for i in range(n)]
    if fmt in ("B", "H", "I", "Q"):
        return [i * 3 + 1 for i in range(n)]
    return [i * 3 - 2 for i in range(n)]


def pack(dtype, values):
    fmt = DTYPES[dtype][1]
    if fmt in ("ff", "dd"):
        return b"".join(struct.pack("<" + fmt, *v) for v in values)
    return b"".join(struct.pack("<" + fmt, v) for v in values)


def tensor(pb2, dtype, shape, values=None, data=None, strings=None, dtype_number=None):
    t = pb2.Tensor()
    t.dtype = dtype_number if dtype_number is not None else DTYPES[dtype][0]
    t.shape.extend(shape)
    if dtype == "string" and data is None:
        if strings is None:
            strings = [("s%d" % i).encode() * (i % 3) for i in range(numel(shape))]
        t.strings.extend(strings)
    elif data is not None:
        t.data = data
    else:
        if values is None:
            values = pattern_values(dtype, numel(shape))
        t.data = pack(dtype, values)
    return t


def wire_seed(pb2, nd, params, indices, axis=None, batch_dims=0):
    if nd:
        req = pb2.GatherNdRequest(params=params, indices=indices, batch_dims=batch_dims)
    else:
        req = pb2.GatherRequest(params=params, indices=indices, batch_dims=batch_dims)
        if axis is not None:
            req.axis = axis
    return bytes([1 if nd else 0]) + req.SerializeToString()


def bag_seed(pb2, params, indices, offsets=None, weights=None, mode=0, last=False, pad=None):
    req = pb2.EmbeddingBagRequest(params=params, indices=indices, mode=mode,
                                  include_last_offset=last)
    if offsets is not None:
        req.offsets.CopyFrom(offsets)
    if weights is not None:
        req.per_sample_weights.CopyFrom(weights)
    if pad is not None:
        req.padding_idx = pad
    return bytes([0x40]) + req.SerializeToString()


# ---- the seeds ---------------------------------------------------------------------------

def core_seeds():
    s = {}
    # Advisories.
    s["neg_index_minus10_into_1"] = core_seed(False, "float32", [1], "int32", [1], [-10], axis=0)
    s["nd_neg_index_minus10_into_1"] = core_seed(True, "float32", [1], "int64", [1], [-10])
    s["zero_batch_dim_batch_dims1"] = core_seed(False, "int32", [0, 3], "int64", [0, 2],
                                                axis=1, batch_dims=1)
    s["nd_zero_batch_dim_batch_dims1"] = core_seed(True, "int32", [0, 3], "int64", [0, 1],
                                                   batch_dims=1)
    s["batch_dims10_gt_rank"] = core_seed(False, "float32", [2, 3], "int32", [2], [0, 1],
                                          batch_dims=10)
    s["nd_batch_dims10_gt_rank"] = core_seed(True, "float32", [2, 3], "int32", [2, 1], [0, 1],
                                             batch_dims=10)
    for which in ("params_short", "params_long", "params_field", "indices_short",
                  "indices_long", "indices_field"):
        s["data_" + which] = core_seed(False, "float32", [2, 3], "int32", [2], [1, 0], axis=0,
                                       corrupt=which)
        s["strings_" + which] = core_seed(True, "string", [2, 3], "int64", [2, 1], [1, 0],
                                          corrupt=which, string_scale=1)
    s["declared_huge_params"] = core_seed(False, "int8", [1 << 40], "int32", [1], [0], axis=0)
    s["declared_huge_indices"] = core_seed(False, "int8", [3], "int64", [1 << 31], axis=0)
    for v in (0, -1):
        s["index_%d_into_zero_dim" % v] = core_seed(False, "int8", [0], "int32", [1], [v], axis=0)
        s["nd_index_%d_into_zero_dim" % v] = core_seed(True, "int8", [0, 2], "int64", [1, 1], [v])
    s["output_over_2pow31_elements"] = core_seed(False, "bool", [1, 1 << 16], "int32", [1 << 16],
                                                 axis=0)
    s["output_over_2pow31_zero_elements"] = core_seed(False, "int8", [1, 0, 1 << 40], "int32",
                                                      [1 << 31, 0], axis=0)
    for b in (-1, -3):
        s["nd_negative_batch_dims_%d" % b] = core_seed(
            True, "int32", [2, 3], "int32", [2, 1], [0, 1], batch_dims=b)
    s["nd_negative_batch_dims_min"] = core_seed(True, "int32", [2, 3], "int32", [2, 1], [0, 1],
                                                batch_dims=INT64_MIN)
    for name, v in (("min", INT64_MIN), ("max", INT64_MAX)):
        s["axis_" + name] = core_seed(False, "float64", [2, 3], "int64", [2], [0, 1], axis=v)
        s["batch_dims_" + name] = core_seed(False, "float64", [2, 3], "int64", [2], [0, 1],
                                            batch_dims=v)
        s["nd_batch_dims_" + name] = core_seed(True, "float64", [2, 3], "int64", [2, 1], [0, 1],
                                               batch_dims=v)
    # Validation edges.
    s["product_overflow"] = core_seed(False, "int8", [1 << 62, 4, 0], "int32", [1], [0], axis=1)
    s["negative_dim"] = core_seed(False, "int8", [2, -1], "int32", [1], [0], axis=0)
    s["dtype_unspecified"] = core_seed(False, "unspecified", [2], "int32", [1], [0], axis=0)
    s["dtype_unknown"] = core_seed(False, "unknown", [2], "int32", [1], [0], axis=0)
    s["float_indices"] = core_seed(False, "int8", [2], "float32", [1], axis=0)
    s["scalar_params"] = core_seed(False, "int8", [], "int32", [], [0], axis=0)
    s["nd_scalar_indices"] = core_seed(True, "int8", [3], "int32", [], [0])
    s["nd_depth_too_large"] = core_seed(True, "int8", [2, 2], "int32", [1, 3], [0, 0, 0])
    s["batch_dims_mismatch"] = core_seed(False, "int8", [2, 3], "int32", [3, 1], [0, 0, 0],
                                         axis=1, batch_dims=1)
    for name, dt, v in (("int32_min", "int32", INT32_MIN), ("int32_max", "int32", INT32_MAX),
                        ("int64_min", "int64", INT64_MIN), ("int64_max", "int64", INT64_MAX)):
        s["index_" + name] = core_seed(False, "int16", [3, 2], dt, [2], [1, v], axis=0)
        s["nd_index_" + name] = core_seed(True, "int16", [3, 2], dt, [1, 2], [v, 0])
    s["output_over_1mib"] = core_seed(False, "complex128", [300, 5], "int32", [2, 300], axis=0)
    s["strings_over_1mib"] = core_seed(False, "string", [2], "int32", [40], [1] * 40, axis=0,
                                       string_scale=3)
    s["parallel_streaming"] = core_seed(False, "float32", [5, 300], "int64", [5, 5],
                                        [i % 5 - 2 for i in range(25)], axis=0, exec_sel=3)
    s["convenience_nd"] = core_seed(True, "uint16", [2, 4, 5], "int32", [2, 2, 2],
                                    [2, 3, 0, 0, -1, -4, 1, 1], batch_dims=1, exec_sel=4)
    # Valid requests of every dtype.
    for dt in DTYPES:
        s["valid_gather_" + dt] = core_seed(False, dt, [3, 2, 2], "int32", [2, 2],
                                            [1, -2, 0, 1], axis=1 if dt != "string" else 0,
                                            string_scale=1)
        s["valid_gather_batch_" + dt] = core_seed(False, dt, [2, 3, 2], "int64", [2, 2],
                                                  [2, -1, 0, 1], axis=1, batch_dims=1)
        s["valid_nd_" + dt] = core_seed(True, dt, [3, 2, 2], "int64", [2, 2], [1, 0, -1, 1],
                                        string_scale=1)
    return s


def wire_seeds(pb2):
    s = {}
    T = lambda *a, **k: tensor(pb2, *a, **k)  # noqa: E731
    i32 = lambda shape, v: T("int32", shape, v)  # noqa: E731
    i64 = lambda shape, v: T("int64", shape, v)  # noqa: E731
    # Advisories.
    s["neg_index_minus10_into_1"] = wire_seed(pb2, False, T("float32", [1]), i32([1], [-10]), 0)
    s["nd_neg_index_minus10_into_1"] = wire_seed(pb2, True, T("float32", [1]), i64([1], [-10]))
    s["zero_batch_dim_batch_dims1"] = wire_seed(pb2, False, T("int32", [0, 3]), i64([0, 2], []),
                                                axis=1, batch_dims=1)
    s["nd_zero_batch_dim_batch_dims1"] = wire_seed(pb2, True, T("int32", [0, 3]), i64([0, 1], []),
                                                   batch_dims=1)
    s["batch_dims10_gt_rank"] = wire_seed(pb2, False, T("float32", [2, 3]), i32([2], [0, 1]),
                                          batch_dims=10)
    s["nd_batch_dims10_gt_rank"] = wire_seed(pb2, True, T("float32", [2, 3]), i32([2, 1], [0, 1]),
                                             batch_dims=10)
    good = pack("float32", pattern_values("float32", 6))
    s["data_one_byte_short"] = wire_seed(pb2, False, T("float32", [2, 3], data=good[:-1]),
                                         i32([2], [1, 0]), 0)
    s["data_one_byte_long"] = wire_seed(pb2, False, T("float32", [2, 3], data=good + b"\0"),
                                        i32([2], [1, 0]), 0)
    s["indices_one_byte_short"] = wire_seed(pb2, False, T("float32", [2, 3]),
                                            T("int32", [2], data=pack("int32", [1, 0])[:-1]), 0)
    s["indices_one_byte_long"] = wire_seed(pb2, False, T("float32", [2, 3]),
                                           T("int64", [2], data=pack("int64", [1, 0]) + b"\0"), 0)
    s["strings_one_short"] = wire_seed(pb2, True, T("string", [2, 3], strings=[b"a"] * 5),
                                       i32([1, 1], [1]))
    s["strings_one_long"] = wire_seed(pb2, True, T("string", [2, 3], strings=[b"a"] * 7),
                                      i32([1, 1], [1]))
    s["strings_with_data"] = wire_seed(pb2, False, T("string", [1], data=b"x"), i32([1], [0]), 0)
    s["declared_huge_params"] = wire_seed(pb2, False, T("int8", [1 << 40], data=b"\1\2\3"),
                                          i32([1], [0]), 0)
    s["declared_huge_indices"] = wire_seed(pb2, False, T("int8", [3]),
                                           T("int64", [1 << 31], data=pack("int64", [0])), 0)
    for v in (0, -1):
        s["index_%d_into_zero_dim" % v] = wire_seed(pb2, False, T("int8", [0]), i32([1], [v]), 0)
        s["nd_index_%d_into_zero_dim" % v] = wire_seed(pb2, True, T("int8", [0, 2]),
                                                       i64([1, 1], [v]))
    # 65536 x 32769 > 2^31 output elements, refused by the plan (about 200 KB: real data).
    s["output_over_2pow31_elements"] = wire_seed(
        pb2, False, T("bool", [1, 1 << 16], data=bytes(1 << 16)),
        T("int32", [32769], data=bytes(4 * 32769)), 0)
    s["output_over_2pow31_zero_elements"] = wire_seed(pb2, False, T("int8", [1, 0, 1 << 40]),
                                                      T("int32", [1 << 31, 0], data=b""), 0)
    for b in (-1, -3):
        s["nd_negative_batch_dims_%d" % b] = wire_seed(pb2, True, T("int32", [2, 3]),
                                                       i32([2, 1], [0, 1]), batch_dims=b)
    for name, v in (("min", INT64_MIN), ("max", INT64_MAX)):
        s["axis_" + name] = wire_seed(pb2, False, T("float64", [2, 3]), i64([2], [0, 1]), axis=v)
        s["batch_dims_" + name] = wire_seed(pb2, False, T("float64", [2, 3]), i64([2], [0, 1]),
                                            batch_dims=v)
        s["nd_batch_dims_" + name] = wire_seed(pb2, True, T("float64", [2, 3]), i64([2, 1], [0, 1]),
                                               batch_dims=v)
    # Validation edges.
    s["product_overflow"] = wire_seed(pb2, False, T("int8", [1 << 62, 4, 0]), i32([1], [0]), 1)
    s["dims_2pow62"] = wire_seed(pb2, False, T("int8", [1 << 62, 1 << 62], data=b"\0"),
                                 i32([1], [0]), 1)
    s["negative_dim"] = wire_seed(pb2, False, T("int8", [2, -1], data=b""), i32([1], [0]), 0)
    s["rank_33"] = wire_seed(pb2, False, T("int8", [1] * 33), i32([1], [0]), 0)
    # Ranks 32 and 32 are allowed; the output then has rank 63 (the client decodes any rank).
    s["output_rank_63"] = wire_seed(pb2, False, T("int8", [1] * 32), i32([1] * 32, [0]), 0)
    s["rank_100_indices"] = wire_seed(pb2, False, T("int8", [2]), i32([1] * 100, [0]), 0)
    s["dtype_unspecified"] = wire_seed(pb2, False, T("int8", [2], dtype_number=0), i32([1], [0]), 0)
    s["dtype_99"] = wire_seed(pb2, False, T("int8", [2], dtype_number=99), i32([1], [0]), 0)
    s["indices_dtype_99"] = wire_seed(pb2, True, T("int8", [2]),
                                      T("int32", [1, 1], [0], dtype_number=99))
    s["float_indices"] = wire_seed(pb2, False, T("int8", [2]), T("float32", [1]), 0)
    s["scalar_params"] = wire_seed(pb2, False, T("int8", []), i32([], [0]), 0)
    s["nd_scalar_indices"] = wire_seed(pb2, True, T("int8", [3]), i32([], [0]))
    s["nd_depth_too_large"] = wire_seed(pb2, True, T("int8", [2, 2]), i32([1, 3], [0, 0, 0]))
    s["batch_dims_mismatch"] = wire_seed(pb2, False, T("int8", [2, 3]), i32([3, 1], [0, 0, 0]),
                                         axis=1, batch_dims=1)
    for name, dt, v in (("int32_min", "int32", INT32_MIN), ("int32_max", "int32", INT32_MAX),
                        ("int64_min", "int64", INT64_MIN), ("int64_max", "int64", INT64_MAX)):
        s["index_" + name] = wire_seed(pb2, False, T("int16", [3, 2]), T(dt, [2], [1, v]), 0)
        s["nd_index_" + name] = wire_seed(pb2, True, T("int16", [3, 2]), T(dt, [1, 2], [v, 0]))
    s["output_over_4mib"] = wire_seed(pb2, False, T("complex128", [2, 300]),
                                      T("int32", [1000], data=bytes(4 * 1000)), 0)
    s["strings_over_4mib"] = wire_seed(pb2, False, T("string", [1], strings=[b"x" * 1000]),
                                       T("int32", [5000], data=bytes(4 * 5000)), 0)
    s["empty_request"] = bytes([0])
    s["empty_nd_request"] = bytes([1])
    s["garbage"] = bytes([0]) + b"\xff\xff\xff\xff\x0f garbage"
    s["truncated"] = wire_seed(pb2, False, T("float32", [2, 3]), i32([2], [1, 0]), 0)[:-3]
    # Valid requests of every dtype.
    for dt in DTYPES:
        s["valid_gather_" + dt] = wire_seed(pb2, False, T(dt, [3, 2, 2]),
                                            i32([2, 2], [1, -2, 0, 1]), axis=1)
        s["valid_gather_batch_" + dt] = wire_seed(pb2, False, T(dt, [2, 3, 2]),
                                                  i64([2, 2], [2, -1, 0, 1]), axis=1, batch_dims=1)
        s["valid_gather_noaxis_" + dt] = wire_seed(pb2, False, T(dt, [3, 2]), i64([], [-3]))
        s["valid_nd_" + dt] = wire_seed(pb2, True, T(dt, [3, 2, 2]), i64([2, 2], [1, 0, -1, 1]))
        s["valid_nd_batch_" + dt] = wire_seed(pb2, True, T(dt, [2, 3, 2]),
                                              i32([2, 1, 2], [2, 1, -1, 0]), batch_dims=1)
    # EmbeddingBag: every float dtype and mode, offsets and fixed bags, weights, padding, and the
    # edges of the offsets rules.
    for dt in ("float16", "bfloat16", "float32", "float64"):
        for mode in range(4):
            s["bag_fixed_%s_mode%d" % (dt, mode)] = bag_seed(
                pb2, T(dt, [4, 3]), i64([2, 3], [0, -1, 2, 3, 3, 1]), mode=mode, pad=3)
            s["bag_offsets_%s_mode%d" % (dt, mode)] = bag_seed(
                pb2, T(dt, [4, 3]), i32([5], [1, 2, -4, 0, 3]), i64([3], [0, 0, 2]), mode=mode,
                weights=None if mode == 2 else T("float32", [5], [0.5, -1, 2, 0, 1.5]))
    s["bag_last_offset"] = bag_seed(pb2, T("float32", [4, 2]), i64([3], [0, 1, 2]),
                                    i64([3], [0, 1, 3]), last=True)
    s["bag_offsets_decrease"] = bag_seed(pb2, T("float32", [4, 2]), i64([3], [0, 1, 2]),
                                         i64([3], [0, 2, 1]))
    s["bag_index_out_of_range"] = bag_seed(pb2, T("float32", [4, 2]), i64([2, 2], [0, 1, 2, 9]))
    s["bag_many_empty_bags"] = bag_seed(pb2, T("float32", [1, 1]), i64([1000000, 0], []))
    s["bag_empty"] = bytes([0x40])
    return s


# ---- http_request_fuzzer -----------------------------------------------------------------

INFER = "/v2/models/gather/infer"


def http_request(method, target, body=b"", headers=None, length=True):
    """One HTTP/1.1 request; Content-Length from the body unless given or `length` is False."""
    headers = dict(headers or {})
    lines = [f"{method} {target} HTTP/1.1", "Host: t"]
    if length and body and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body, size=7):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def infer_json(params, indices, model_params=None, id_=None):
    doc = {"inputs": [dict(name="params", **params), dict(name="indices", **indices)]}
    if model_params:
        doc["parameters"] = model_params
    if id_:
        doc["id"] = id_
    return json.dumps(doc, separators=(",", ":")).encode()


def binary_infer(params_dt, params_fmt, params_shape, params_values, idx):
    """Triton's binary data extension: the JSON, then params' and indices' bytes."""
    pbytes = b"".join(struct.pack("<" + params_fmt, v) for v in params_values)
    ibytes = b"".join(struct.pack("<q", v) for v in idx)
    doc = {"inputs": [
        {"name": "params", "datatype": params_dt, "shape": params_shape,
         "parameters": {"binary_data_size": len(pbytes)}},
        {"name": "indices", "datatype": "INT64", "shape": [len(idx)],
         "parameters": {"binary_data_size": len(ibytes)}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
    head = json.dumps(doc, separators=(",", ":")).encode()
    return head + pbytes + ibytes, len(head)


def http_seeds():
    s = {}
    idx = {"datatype": "INT64", "shape": [2], "data": [1, 0]}
    # One valid JSON infer of each datatype.
    values = {"BOOL": [True, False], "UINT8": [1, 255], "UINT16": [2, 65535], "UINT32": [3, 7],
              "UINT64": [4, 18446744073709551615], "INT8": [-128, 127], "INT16": [-5, 6],
              "INT32": [-7, 8], "INT64": [-9223372036854775808, 10], "FP16": [0.5, -2.25],
              "BF16": [1.5, 3.0], "FP32": [1e-3, 3.5], "FP64": [1e300, -0.0],
              "BYTES": ["a", "\u00e9t\u00e9"]}
    for dt, v in values.items():
        body = infer_json({"datatype": dt, "shape": [2], "data": v}, idx)
        s[f"infer_json_{dt.lower()}"] = http_request("POST", INFER, body)
    # docs/kserve.md's curl examples.
    s["doc_ready"] = http_request("GET", "/v2/health/ready")
    s["doc_model_metadata"] = http_request("GET", "/v2/models/gather")
    s["doc_versions_3"] = http_request("GET", "/v2/models/gather/versions/3")
    s["doc_gather_fp32"] = http_request("POST", INFER, infer_json(
        {"datatype": "FP32", "shape": [3, 2], "data": [[1, 2], [3, 4], [5, 6]]},
        {"datatype": "INT64", "shape": [2], "data": [2, 0]}))
    s["doc_gather_nd_bytes"] = http_request("POST", "/v2/models/gather_nd/infer", infer_json(
        {"datatype": "BYTES", "shape": [2, 2], "data": [["a", "b"], ["c", "d"]]},
        {"datatype": "INT32", "shape": [2, 2], "data": [[1, 0], [0, 1]]}, id_="q1"))
    s["doc_axis1_index7"] = http_request("POST", INFER, infer_json(
        {"datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]},
        {"datatype": "INT64", "shape": [1], "data": [7]}, model_params={"axis": 1}))
    # Binary data (in and out), and a header length that does not add up.
    body, n = binary_infer("INT16", "h", [3], [7, -8, 9], [2, 0])
    s["binary_int16"] = http_request("POST", INFER, body, {"Inference-Header-Content-Length": n})
    body, n = binary_infer("BF16", "H", [2], [0x3FC0, 0x4040], [1])
    s["binary_bf16"] = http_request("POST", INFER, body, {"Inference-Header-Content-Length": n})
    s["binary_header_length_99"] = http_request(
        "POST", INFER, body, {"Inference-Header-Content-Length": "99"})
    s["binary_header_length_nan"] = http_request(
        "POST", INFER, body, {"Inference-Header-Content-Length": "x"})
    small = infer_json({"datatype": "INT32", "shape": [3], "data": [1, 2, 3]},
                       {"datatype": "INT64", "shape": [1], "data": [-1]})
    # Framing: chunked, negative or bad chunk sizes, CL + TE, two lengths, encodings.
    s["chunked"] = http_request("POST", INFER, chunked(small), {"Transfer-Encoding": "chunked"})
    s["chunked_negative_size"] = http_request(
        "POST", INFER, b"-5\r\nhello\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"})
    s["chunked_huge_size"] = http_request(
        "POST", INFER, b"ffffffffffffffff\r\nab\r\n", {"Transfer-Encoding": "chunked"})
    s["chunked_extension_trailer"] = http_request(
        "POST", INFER, b"%x;ext=1\r\n" % len(small) + small + b"\r\n0\r\nX-T: 1\r\n\r\n",
        {"Transfer-Encoding": "chunked"})
    s["cl_and_te"] = http_request("POST", INFER, chunked(small),
                                  {"Content-Length": "5", "Transfer-Encoding": "chunked"})
    s["two_content_lengths"] = (b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: t\r\n"
                                b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}")
    s["te_gzip"] = http_request("POST", INFER, small, {"Transfer-Encoding": "gzip"}, length=False)
    s["content_encoding_gzip"] = http_request("POST", INFER, small, {"Content-Encoding": "gzip"})
    s["content_encoding_identity"] = http_request(
        "POST", INFER, small, {"Content-Encoding": " Identity "})
    s["content_length_2pow40"] = http_request("POST", INFER, headers={"Content-Length": 1 << 40})
    s["content_length_short"] = http_request("POST", INFER, small[:10],
                                             {"Content-Length": len(small)})
    s["expect_100_continue"] = http_request("POST", INFER, small, {"Expect": "100-continue"})
    s["many_headers_101"] = http_request(
        "GET", "/v2/health/live", headers={f"X-H{i}": "v" for i in range(101)})
    s["header_over_16k"] = http_request("GET", "/v2/health/live", headers={"X-Big": "v" * 16400})
    s["http10_keep_alive"] = http_request("GET", "/v2", headers={"Connection": "keep-alive"}) \
        .replace(b"HTTP/1.1", b"HTTP/1.0")
    s["head_ready"] = http_request("HEAD", "/v2/models/gather/ready")
    s["escaped_name_version"] = http_request("POST", "/v2/models/ga%74her/versions/%31/infer?x=1",
                                             small)
    s["no_such_endpoint"] = http_request("GET", "/v3")
    s["garbage"] = b"\x00\x01GARBAGE / HTTP/9.9\r\n\r\n"
    # Pipelined: an infer, a GET, a refused one (closes), and one never read.
    s["pipelined"] = (http_request("POST", INFER, small) + http_request("GET", "/v2/health/live")
                      + http_request("POST", INFER, chunked(small, 3),
                                     {"Transfer-Encoding": "chunked"})
                      + http_request("POST", INFER, small, {"Content-Encoding": "br"})
                      + http_request("GET", "/v2"))
    # Malformed JSON bodies the decoder must refuse.
    s["json_truncated"] = http_request("POST", INFER, small[:-3])
    s["json_deep"] = http_request("POST", INFER, b'{"inputs":' + b"[" * 70 + b"]" * 70 + b"}")
    s["json_data_before_shape"] = http_request("POST", INFER, (
        b'{"inputs":[{"data":[1,2],"name":"params","datatype":"INT8","shape":[2]},'
        b'{"name":"indices","shape":[1],"datatype":"INT64","data":[1]}],'
        b'"parameters":{"binary_data_output":true,"timeout":5}}'))
    s["json_count_mismatch"] = http_request("POST", INFER, infer_json(
        {"datatype": "INT8", "shape": [3], "data": [1, 2]}, idx))
    return s


def write(target, seeds):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(folder, "seed_" + name), "wb") as f:
            f.write(data)
    print(f"{target}: {len(seeds)} seeds in {os.path.relpath(folder, REPO)}")


def main():
    write("core_gather_fuzzer", core_seeds())
    write("http_request_fuzzer", http_seeds())
    pb2, scratch = load_pb2()
    try:
        write("wire_request_fuzzer", wire_seeds(pb2))
    finally:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
