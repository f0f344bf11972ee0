"""End-to-end tests of the `tensorcompute` CLI against a real tensorcompute-server.

Run by ctest from tests/client as `python -m unittest -v cli_test` (tests/testing on PYTHONPATH)
with
  TC_SERVER_BINARY       the server (build/server/tensorcompute-server)
  TC_CLI_BINARY          the CLI (build/client/tensorcompute)
  TC_ECHO_SERVER_BINARY  the echo server (answers every call with its request's bytes)

One server serves the whole module; tests that need special server flags start their own.
Every expected result comes from NumPy (np.take, the small reference functions below, or
tests/testing/embedding_bag_reference.py); .npy files are compared bit for bit, JSON output
value by value.
"""

import base64
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from compact_reference import dequantize_rowwise8, quantize_rowwise8
from embedding_bag_reference import EB_FLOAT_DTYPES, EB_MODES, mismatch, random_bag_case, \
    ref_embedding_bag
from server_process import ServerProcess

CLI = os.environ.get("TC_CLI_BINARY", "")
SERVER = None
TMP = None

# A target where nothing listens (port 1 is reserved; connecting is refused at once).
UNREACHABLE = "127.0.0.1:1"

EXIT_OK, EXIT_USAGE, EXIT_RPC, EXIT_IO = 0, 2, 3, 4


def setUpModule():
    global SERVER, TMP
    if not CLI or not os.path.exists(CLI):
        raise unittest.SkipTest(f"TC_CLI_BINARY not set or missing: {CLI!r}")
    TMP = tempfile.TemporaryDirectory(prefix="cli_test.")
    SERVER = ServerProcess("--cpu_threads=2")
    SERVER.__enter__()


def tearDownModule():
    if SERVER is not None:
        SERVER.__exit__(None, None, None)
    if TMP is not None:
        TMP.cleanup()


def tmp_path(name):
    return os.path.join(TMP.name, name)


def run_cli(*args, timeout=60):
    """Runs the CLI; returns the CompletedProcess (stdout/stderr as text)."""
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True,
                          encoding="utf-8", errors="replace", timeout=timeout)


def describe(proc):
    return (f"\ncommand: {' '.join(proc.args)}\nexit: {proc.returncode}\n"
            f"stdout: {proc.stdout[:2000]}\nstderr: {proc.stderr[:2000]}")


# --- JSON tensors -----------------------------------------------------------------------

NUMPY_DTYPES = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "uint64": np.uint64, "float16": np.float16, "float32": np.float32,
    "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128,
}


def _parse_int(text):
    # "-0" is how a float -0.0 may be written; keep its sign.
    return -0.0 if text == "-0" else int(text)


def loads(text):
    return json.loads(text, parse_int=_parse_int)


def json_float(v):
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v.lower()]
    return float(v)


def json_string(v):
    if isinstance(v, dict):
        return base64.b64decode(v["base64"])
    return v.encode("utf-8")


def flatten(values, leaf_is_pair=False):
    """Flattens nested lists row-major; with leaf_is_pair, [re, im] pairs are the leaves."""
    if not isinstance(values, list):
        return [values]
    if leaf_is_pair and len(values) == 2 and not any(isinstance(v, list) for v in values):
        return [values]
    out = []
    for v in values:
        out.extend(flatten(v, leaf_is_pair))
    return out


def from_json_tensor(obj):
    """A JSON tensor ({"dtype", "shape", "values"}) as a NumPy array.

    bfloat16 becomes float32 (its values are exact there); strings become an object array of
    bytes. Values may be flat or nested.
    """
    dtype = obj["dtype"]
    shape = tuple(obj["shape"])
    values = obj["values"]
    if dtype in ("complex64", "complex128"):
        pairs = flatten(values, leaf_is_pair=True)
        vals = [complex(json_float(re_), json_float(im)) for re_, im in pairs]
        return np.array(vals, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
    vals = flatten(values)
    if dtype == "string":
        arr = np.empty(len(vals), dtype=object)
        for i, v in enumerate(vals):
            arr[i] = json_string(v)
        return arr.reshape(shape)
    if dtype == "bfloat16":
        # Written values need only read back to the same bfloat16 (e.g. 0.15625 may be
        # written "0.156"), so round each to bfloat16 as a reader must.
        return to_bfloat16(np.array([json_float(v) for v in vals], dtype=np.float64)).reshape(
            shape)
    if dtype in ("float16", "float32", "float64"):
        return np.array([json_float(v) for v in vals], dtype=np.float64).astype(
            NUMPY_DTYPES[dtype]).reshape(shape)
    if dtype == "bool":
        return np.array([bool(v) for v in vals], dtype=np.bool_).reshape(shape)
    # Integers: exact (Python ints).
    return np.array(vals, dtype=NUMPY_DTYPES[dtype]).reshape(shape)


def to_bfloat16(values):
    """float64 values rounded (to nearest even) to bfloat16, returned as float32."""
    f32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    rounded = np.where(np.isnan(f32), bits, rounded).astype(np.uint32)
    return rounded.view(np.float32)


def json_dtype_name(np_dtype):
    np_dtype = np.dtype(np_dtype)
    if np_dtype.kind in "SU":
        return "string"
    return {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}[np_dtype]


def as_bytes_array(arr):
    """A string array ('U', 'S' or object of bytes/str) as an object array of bytes."""
    out = np.empty(arr.shape, dtype=object)
    for pos in np.ndindex(*arr.shape):
        v = arr[pos]
        out[pos] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return out


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# --- NumPy references -------------------------------------------------------------------

def ref_gather(params, indices, axis=None, batch_dims=0):
    b = batch_dims
    axis = b if axis is None else axis % params.ndim
    if b == 0:
        return np.take(params, indices, axis=axis)
    out_shape = params.shape[:axis] + indices.shape[b:] + params.shape[axis + 1:]
    out = np.empty(out_shape, dtype=params.dtype)
    for bi in np.ndindex(*params.shape[:b]):
        out[bi] = np.take(params[bi], indices[bi], axis=axis - b)
    return out


def ref_gather_nd(params, indices, batch_dims=0):
    b = batch_dims
    depth = indices.shape[-1]
    out = np.empty(indices.shape[:-1] + params.shape[b + depth:], dtype=params.dtype)
    for pos in np.ndindex(*indices.shape[:-1]):
        out[pos] = params[pos[:b] + tuple(int(v) for v in indices[pos])]
    return out


# --- Random data of every dtype ---------------------------------------------------------

UNICODE_WORDS = ["", "a", "héllo", "日本語", "Ωmega", "emoji \U0001F600", "tab\there",
                 "quote\"back\\slash", "plain", "ß"]
BYTE_WORDS = [b"", b"abc", b"\xff\xfe", b"a\x00b", b"\x80", b"caf\xc3\xa9", b"x" * 17,
              b"\xc3\x28", b"ok", b"\x01\x02\x03"]

NPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float16", "float32", "float64", "complex64", "complex128", "U", "S"]


def random_tensor(kind, shape, rng):
    n = int(np.prod(shape))
    if kind == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if kind == "U":
        return np.array(rng.choice(np.array(UNICODE_WORDS, dtype=object), n).tolist(),
                        dtype="U").reshape(shape)
    if kind == "S":
        return np.array([BYTE_WORDS[i] for i in rng.integers(0, len(BYTE_WORDS), n)],
                        dtype="S").reshape(shape)
    dt = np.dtype(kind)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        a[:2] = [info.min, info.max]
        return a.reshape(shape)
    specials = [np.nan, np.inf, -np.inf, -0.0]
    if dt.kind == "f":
        a = (rng.standard_normal(n) * 100).astype(dt)
        a[:len(specials)] = specials
        rng.shuffle(a)
        return a.reshape(shape)
    if dt.kind == "c":
        a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        a[0] = complex(np.nan, 1.0)
        a[1] = complex(-np.inf, np.inf)
        rng.shuffle(a)
        return a.reshape(shape)
    raise ValueError(kind)


def random_indices(rng, shape, dims, index_dtype):
    """Indices of `shape` whose last axis cycles through `dims` (valid, many negative)."""
    idx = np.empty(shape, dtype=index_dtype)
    for pos in np.ndindex(*shape):
        d = dims[pos[-1] % len(dims)] if len(dims) > 1 else dims[0]
        idx[pos] = rng.integers(-d, d)
    return idx


class CliCase(unittest.TestCase):
    maxDiff = 4000

    def assertExit(self, proc, code):
        self.assertEqual(proc.returncode, code, describe(proc))

    def assertErrorLine(self, proc, pattern):
        lines = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
        self.assertTrue(lines, "no 'error: ' line on stderr" + describe(proc))
        self.assertTrue(any(re.search(pattern, l) for l in lines),
                        f"no error line matches {pattern!r}" + describe(proc))

    def run_ok(self, *args, timeout=60):
        proc = run_cli(*args, timeout=timeout)
        self.assertExit(proc, EXIT_OK)
        return proc

    def stdout_tensor(self, proc):
        lines = proc.stdout.splitlines()
        self.assertEqual(len(lines), 1, "stdout is not one line" + describe(proc))
        return loads(lines[0])

    def assertTensorEqual(self, got, want, exact_bits=False):
        """got/want: NumPy arrays. Strings compare as bytes; exact_bits compares raw bytes."""
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        if want.dtype.kind in "SUO":
            np.testing.assert_array_equal(as_bytes_array(got), as_bytes_array(want))
            return
        self.assertEqual(got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
        if exact_bits:
            self.assertEqual(np.ascontiguousarray(got).tobytes(),
                             np.ascontiguousarray(want).tobytes())

    def assertJsonResult(self, obj, want):
        """obj: the CLI's JSON tensor; want: the NumPy reference."""
        self.assertEqual(obj["dtype"], json_dtype_name(want.dtype))
        self.assertEqual(obj["shape"], list(want.shape))
        self.assertIsInstance(obj["values"], list)
        got = from_json_tensor(obj)
        if want.dtype.kind in "SU":
            self.assertTensorEqual(got, want)
        else:
            self.assertTensorEqual(got, want)
            if want.dtype.kind == "f":
                # -0.0 must keep its sign (JSON "-0.0" / "-0").
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))

    def assertNpyResult(self, path, want):
        got = np.load(path, allow_pickle=False)
        self.assertTrue(got.dtype.isnative or got.dtype.byteorder in "=|<",
                        f"not little-endian: {got.dtype}")
        # C order.
        with open(path, "rb") as f:
            header = f.read(256)
        self.assertIn(b"'fortran_order': False", header)
        if want.dtype.kind in "SU":
            flat = as_bytes_array(want).ravel().tolist()
            expected_kind = "U" if all(is_utf8(b) and b"\x00" not in b for b in flat) else "S"
            self.assertEqual(got.dtype.kind, expected_kind,
                             f"string result written as {got.dtype}, expected '{expected_kind}'")
            self.assertTensorEqual(got, want)
        else:
            self.assertTensorEqual(got, want, exact_bits=True)


# --- 1. .npy input, every dtype ---------------------------------------------------------

class NpyDtypesTest(CliCase):
    """For each dtype: three calls (gather batch_dims=0 axis=1 -> stdout; gather batch_dims=1
    axis=-1 -> --out .npy; gather-nd with depth/batch_dims/output alternating by dtype)."""

    def test_every_dtype(self):
        rng = np.random.default_rng(20240601)
        for n, kind in enumerate(NPY_DTYPES):
            with self.subTest(dtype=kind):
                self.check_dtype(n, kind, rng)

    def check_dtype(self, n, kind, rng):
        index_dtype = np.int32 if n % 2 == 0 else np.int64
        params = random_tensor(kind, (3, 5, 4), rng)
        params_path = tmp_path(f"params_{kind}.npy")
        np.save(params_path, params)

        # gather, batch_dims=0, axis=1, negative indices, result on stdout.
        idx = random_indices(rng, (2, 3), [5], index_dtype)
        idx[0, 0] = -5
        idx[1, 2] = 4
        idx_path = tmp_path(f"idx_a_{kind}.npy")
        np.save(idx_path, idx)
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", params_path,
                           "--indices", idx_path, "--axis", 1)
        self.assertJsonResult(self.stdout_tensor(proc), ref_gather(params, idx, axis=1))

        # gather, batch_dims=1, axis=-1, result to .npy.
        idx = random_indices(rng, (3, 6), [4], index_dtype)
        idx[0, 0] = -4
        idx_path = tmp_path(f"idx_b_{kind}.npy")
        np.save(idx_path, idx)
        out_path = tmp_path(f"out_b_{kind}.npy")
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", params_path,
                           "--indices", idx_path, "--axis", -1, "--batch-dims", 1,
                           "--out", out_path)
        self.assertEqual(proc.stdout, "", "stdout not empty with --out" + describe(proc))
        self.assertNpyResult(out_path, ref_gather(params, idx, axis=-1, batch_dims=1))

        # gather-nd: batch_dims 1 (depth 2) on even dtypes, 0 (depth 1 or 3) on odd ones;
        # stdout on every other pair, .npy on the rest.
        if n % 2 == 0:
            batch_dims, idx = 1, random_indices(rng, (3, 2, 2), [5, 4], index_dtype)
        else:
            depth = 1 if n % 4 == 1 else 3
            batch_dims = 0
            idx = random_indices(rng, (2, 2, depth), [3, 5, 4][:depth], index_dtype)
        idx_path = tmp_path(f"idx_nd_{kind}.npy")
        np.save(idx_path, idx)
        want = ref_gather_nd(params, idx, batch_dims=batch_dims)
        args = ["gather-nd", "--target", SERVER.target, "--params", params_path,
                "--indices", idx_path, "--batch-dims", batch_dims]
        if (n // 2) % 2 == 0:
            proc = self.run_ok(*args)
            self.assertJsonResult(self.stdout_tensor(proc), want)
        else:
            out_path = tmp_path(f"out_nd_{kind}.npy")
            proc = self.run_ok(*args, "--out", out_path)
            self.assertEqual(proc.stdout, "")
            self.assertNpyResult(out_path, want)

    def test_big_endian_and_fortran_order_input(self):
        # NumPy's format allows both; the CLI must read them as the values they hold.
        params = np.arange(24, dtype=">f8").reshape(4, 6) * 1.5 - 3
        params_f = np.asfortranarray(params.astype("<i4"))
        idx = np.array([[3, -4], [0, 1]], dtype=">i8")
        p1, p2, i1 = tmp_path("be.npy"), tmp_path("fortran.npy"), tmp_path("be_idx.npy")
        np.save(p1, params)
        np.save(p2, params_f)
        np.save(i1, idx)
        out = tmp_path("be_out.npy")
        self.run_ok("gather", "--target", SERVER.target, "--params", p1, "--indices", i1,
                    "--out", out)
        self.assertNpyResult(out, np.take(params.astype("<f8"), idx.astype("<i8"), axis=0))
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", p2, "--indices", i1,
                           "--axis", 1)
        self.assertJsonResult(self.stdout_tensor(proc),
                              np.take(np.ascontiguousarray(params_f), idx, axis=1))

    def test_scalar_index_and_default_target_flag_order(self):
        params = np.arange(12, dtype=np.int16).reshape(3, 4)
        p, i = tmp_path("scalar_params.npy"), tmp_path("scalar_idx.npy")
        np.save(p, params)
        np.save(i, np.array(-1, dtype=np.int32))
        # Flags in another order than the usage line shows.
        proc = self.run_ok("gather", "--indices", i, "--params", p, "--target", SERVER.target)
        self.assertJsonResult(self.stdout_tensor(proc), params[-1])


# --- 2. .json input ---------------------------------------------------------------------

def write_json(name, obj):
    path = tmp_path(name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    return path


class JsonInputTest(CliCase):

    def gather_json(self, params, indices, *extra):
        p = write_json("jp.json", params)
        i = write_json("ji.json", indices)
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", p, "--indices", i,
                           *extra)
        return self.stdout_tensor(proc)

    def test_bfloat16(self):
        params = {"dtype": "bfloat16", "shape": [2, 3],
                  "values": [[1.5, -2.0, 0.15625], [3.0, "inf", "-inf"]]}
        idx = {"dtype": "int32", "shape": [3], "values": [2, -3, 1]}
        obj = self.gather_json(params, idx, "--axis", 1)
        self.assertEqual(obj["dtype"], "bfloat16")
        self.assertEqual(obj["shape"], [2, 3])
        got = from_json_tensor(obj)
        want = np.array([[0.15625, 1.5, -2.0], [-np.inf, 3.0, np.inf]], dtype=np.float32)
        np.testing.assert_array_equal(got, want)

    def test_bfloat16_nan_and_rounding(self):
        # 1.00390625 = 1 + 2^-8 is halfway between bfloat16 1.0 and 1.0078125: rounds to even
        # (1.0); 1.01171875 = 1 + 3*2^-8 is halfway between 1.0078125 and 1.015625: to 1.015625.
        params = {"dtype": "bfloat16", "values": ["nan", 1.00390625, 1.01171875, 256.0]}
        idx = {"dtype": "int64", "values": [0, 1, 2, 3]}
        got = from_json_tensor(self.gather_json(params, idx))
        self.assertTrue(np.isnan(got[0]))
        np.testing.assert_array_equal(got[1:], np.array([1.0, 1.015625, 256.0], np.float32))

    def test_complex(self):
        params = {"dtype": "complex64", "shape": [3],
                  "values": [[1, 2], [3.5, -4], ["nan", "inf"]]}
        idx = {"dtype": "int32", "shape": [2, 2], "values": [[2, 0], [-2, 1]]}
        obj = self.gather_json(params, idx)
        self.assertEqual(obj["dtype"], "complex64")
        self.assertEqual(obj["shape"], [2, 2])
        got = from_json_tensor(obj)
        want = np.array([[complex(np.nan, np.inf), 1 + 2j], [3.5 - 4j, 3.5 - 4j]],
                        dtype=np.complex64)
        np.testing.assert_array_equal(got, want)

    def test_complex128_and_float64_exact(self):
        v = [0.1, 1e-300, 2.0 ** -1074, 1.7976931348623157e308]
        params = {"dtype": "float64", "values": v}
        idx = {"dtype": "int32", "values": [3, 2, 1, 0]}
        got = from_json_tensor(self.gather_json(params, idx))
        self.assertEqual(got.tolist(), v[::-1])
        params = {"dtype": "complex128", "values": [[0.1, -0.2], [1e300, 5e-324]]}
        got = from_json_tensor(self.gather_json(params, {"dtype": "int64", "values": [1, 0]}))
        self.assertEqual(got.tolist(), [complex(1e300, 5e-324), complex(0.1, -0.2)])

    def test_strings_non_ascii_and_base64(self):
        raw = b"\xff\x00\xfe"
        params = {"dtype": "string", "shape": [2, 2],
                  "values": [["héllo", "日本語"], [{"base64": base64.b64encode(raw).decode()},
                                                "plain"]]}
        idx = {"dtype": "int32", "shape": [2], "values": [1, 0]}
        obj = self.gather_json(params, idx)
        self.assertEqual(obj["dtype"], "string")
        self.assertEqual(obj["shape"], [2, 2])
        got = from_json_tensor(obj)
        self.assertEqual(got.ravel().tolist(),
                         [raw, b"plain", "héllo".encode(), "日本語".encode()])
        # Valid UTF-8 comes back as JSON strings, the rest as base64.
        flat = obj["values"]
        self.assertIsInstance(flat[0], dict)
        self.assertEqual(flat[2], "héllo")

    def test_nested_values_and_integers(self):
        params = {"dtype": "int64", "shape": [2, 2, 2],
                  "values": [[[2 ** 63 - 1, -2 ** 63], [1, -1]], [[5, 6], [7, 8]]]}
        idx = {"dtype": "int64", "shape": [1], "values": [-1]}
        obj = self.gather_json(params, idx, "--axis", 2)
        self.assertEqual(obj["shape"], [2, 2, 1])
        self.assertEqual(from_json_tensor(obj).ravel().tolist(), [-2 ** 63, -1, 6, 8])
        params = {"dtype": "uint64", "values": [2 ** 64 - 1, 0]}
        obj = self.gather_json(params, {"dtype": "int32", "values": [0]})
        self.assertEqual(obj["values"], [2 ** 64 - 1])
        params = {"dtype": "bool", "values": [[True, False], [False, True]]}
        obj = self.gather_json(params, {"dtype": "int32", "values": [1]})
        self.assertEqual(from_json_tensor(obj).tolist(), [[False, True]])

    def test_gather_nd_json(self):
        params = {"dtype": "float32", "values": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}
        idx = {"dtype": "int32", "values": [[[1], [0]], [[0], [-1]]]}
        p = write_json("nd_p.json", params)
        i = write_json("nd_i.json", idx)
        proc = self.run_ok("gather-nd", "--target", SERVER.target, "--params", p,
                           "--indices", i, "--batch-dims", 1)
        want = ref_gather_nd(np.array(params["values"], np.float32),
                             np.array(idx["values"], np.int32), batch_dims=1)
        self.assertJsonResult(self.stdout_tensor(proc), want)

    def test_out_json_round_trip(self):
        raw = b"\x80abc"
        params = {"dtype": "string", "values": ["ü", {"base64": base64.b64encode(raw).decode()},
                                                 "x"]}
        p = write_json("rt_p.json", params)
        i = write_json("rt_i.json", {"dtype": "int32", "values": [1, 0, 2, -2]})
        out = tmp_path("rt_out.json")
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", p, "--indices", i,
                           "--out", out)
        self.assertEqual(proc.stdout, "")
        with open(out, encoding="utf-8") as f:
            obj = loads(f.read())
        self.assertEqual(obj["dtype"], "string")
        self.assertEqual(obj["shape"], [4])
        self.assertEqual(from_json_tensor(obj).tolist(), [raw, "ü".encode(), b"x", raw])
        # The written file is valid input: gather it back in order.
        out2 = tmp_path("rt_out2.json")
        i2 = write_json("rt_i2.json", {"dtype": "int32", "values": [1, 0]})
        self.run_ok("gather", "--target", SERVER.target, "--params", out, "--indices", i2,
                    "--out", out2)
        with open(out2, encoding="utf-8") as f:
            self.assertEqual(from_json_tensor(loads(f.read())).tolist(), ["ü".encode(), raw])

        # bfloat16 / float16 / nan round trip through --out .json bit for bit.
        params = {"dtype": "bfloat16", "values": [1.5, -2.0, 0.15625, "nan", "-inf", 3.0e38]}
        p = write_json("rt_bf.json", params)
        i = write_json("rt_bf_i.json", {"dtype": "int32", "values": [0, 1, 2, 3, 4, 5]})
        out = tmp_path("rt_bf_out.json")
        self.run_ok("gather", "--target", SERVER.target, "--params", p, "--indices", i,
                    "--out", out)
        proc = self.run_ok("gather", "--target", SERVER.target, "--params", out, "--indices", i)
        obj = self.stdout_tensor(proc)
        self.assertEqual(obj["dtype"], "bfloat16")
        got = from_json_tensor(obj)
        want_bf = np.array([1.5, -2.0, 0.15625, np.nan, -np.inf], dtype=np.float32)
        np.testing.assert_array_equal(got[:5], want_bf)
        # 3.0e38 rounds to the nearest bfloat16 (0x7F62 << 16 = 3.0040553e38).
        self.assertEqual(np.float32(got[5]).view(np.uint32), 0x7F620000)

    def test_json_input_npy_output(self):
        params = {"dtype": "float16", "values": [0.1, 65504, -0.0, "inf"]}
        p = write_json("h_p.json", params)
        i = write_json("h_i.json", {"dtype": "int32", "values": [3, 2, 1, 0]})
        out = tmp_path("h_out.npy")
        self.run_ok("gather", "--target", SERVER.target, "--params", p, "--indices", i,
                    "--out", out)
        want = np.array([np.inf, -0.0, 65504, 0.1], dtype=np.float16)
        self.assertNpyResult(out, want)


# --- 3. Errors and exit codes -----------------------------------------------------------

class ErrorsTest(CliCase):

    @classmethod
    def setUpClass(cls):
        cls.params = tmp_path("err_params.npy")
        np.save(cls.params, np.array([10, 20, 30], dtype=np.float32))
        cls.indices = tmp_path("err_idx.npy")
        np.save(cls.indices, np.array([0, 1], dtype=np.int32))
        cls.bad_indices = tmp_path("err_bad_idx.npy")
        np.save(cls.bad_indices, np.array([0, 7], dtype=np.int32))

    def test_index_out_of_range(self):
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.bad_indices)
        self.assertExit(proc, EXIT_RPC)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        self.assertIn("is not in [", proc.stderr)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: indices\[1\] = 7 is not in "
                                   r"\[-3, 3\)")
        self.assertEqual(proc.stdout, "")

    def test_gather_nd_index_out_of_range(self):
        p = tmp_path("err_nd_p.npy")
        np.save(p, np.zeros((3, 4), np.int8))
        i = tmp_path("err_nd_i.npy")
        np.save(i, np.array([[0, 0], [1, -5]], dtype=np.int64))
        proc = run_cli("gather-nd", "--target", SERVER.target, "--params", p, "--indices", i)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: indices\[1,1\] = -5 is not in "
                                   r"\[-4, 4\)")

    def test_bad_axis_is_rpc_error(self):
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.indices, "--axis", 3)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: axis = 3 is not in \[-1, 1\)")

    def test_float_indices_is_rpc_error(self):
        i = tmp_path("err_float_idx.npy")
        np.save(i, np.array([0.0], dtype=np.float32))
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", i)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: indices must be int32 or int64")

    def test_missing_params_file(self):
        missing = tmp_path("no_such_file.npy")
        proc = run_cli("gather", "--target", SERVER.target, "--params", missing,
                       "--indices", self.indices)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(missing))

    def test_malformed_npy(self):
        bad = tmp_path("malformed.npy")
        with open(bad, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00garbage that is not a header")
        proc = run_cli("gather", "--target", SERVER.target, "--params", bad,
                       "--indices", self.indices)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(bad))
        # Truncated data (header says 3 float32, file has 2).
        trunc = tmp_path("truncated.npy")
        with open(self.params, "rb") as f:
            data = f.read()
        with open(trunc, "wb") as f:
            f.write(data[:-4])
        proc = run_cli("gather", "--target", SERVER.target, "--params", trunc,
                       "--indices", self.indices)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(trunc))

    def test_bad_json(self):
        bad = tmp_path("bad.json")
        with open(bad, "w") as f:
            f.write('{"dtype": "float32", "values": [1, 2,')
        proc = run_cli("gather", "--target", SERVER.target, "--params", bad,
                       "--indices", self.indices)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(bad))
        # Well-formed JSON, invalid tensor: value out of range for the dtype.
        bad2 = write_json("bad2.json", {"dtype": "uint8", "values": [1, 300]})
        proc = run_cli("gather", "--target", SERVER.target, "--params", bad2,
                       "--indices", self.indices)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(bad2))

    def test_unknown_subcommand(self):
        proc = run_cli("scatter", "--target", SERVER.target)
        self.assertExit(proc, EXIT_USAGE)

    def test_no_subcommand(self):
        self.assertExit(run_cli(), EXIT_USAGE)

    def test_missing_params_flag(self):
        proc = run_cli("gather", "--target", SERVER.target, "--indices", self.indices)
        self.assertExit(proc, EXIT_USAGE)
        proc = run_cli("gather-nd", "--target", SERVER.target, "--params", self.params)
        self.assertExit(proc, EXIT_USAGE)

    def test_bad_flag_values(self):
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.indices, "--axis", "notanumber")
        self.assertExit(proc, EXIT_USAGE)
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.indices, "--no-such-flag", "1")
        self.assertExit(proc, EXIT_USAGE)

    def test_unknown_out_extension(self):
        out = tmp_path("out.txt")
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.indices, "--out", out)
        self.assertExit(proc, EXIT_USAGE)

    def test_unknown_input_extension(self):
        # The format is chosen by the extension; an unknown one cannot be read.
        p = tmp_path("params.csv")
        with open(p, "w") as f:
            f.write("1,2,3\n")
        proc = run_cli("gather", "--target", SERVER.target, "--params", p,
                       "--indices", self.indices)
        self.assertIn(proc.returncode, (EXIT_USAGE, EXIT_IO), describe(proc))

    def test_unreachable_target(self):
        proc = run_cli("gather", "--target", UNREACHABLE, "--params", self.params,
                       "--indices", self.indices, "--timeout", 2, timeout=30)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: (UNAVAILABLE|DEADLINE_EXCEEDED): ")

    def test_bfloat16_result_to_npy(self):
        p = write_json("bf_p.json", {"dtype": "bfloat16", "values": [1.5, 2.0]})
        out = tmp_path("bf_out.npy")
        proc = run_cli("gather", "--target", SERVER.target, "--params", p,
                       "--indices", self.indices, "--out", out)
        self.assertExit(proc, EXIT_IO)
        self.assertIn("error: ", proc.stderr)

    def test_output_not_writable(self):
        out = tmp_path("no_such_dir/out.npy")
        proc = run_cli("gather", "--target", SERVER.target, "--params", self.params,
                       "--indices", self.indices, "--out", out)
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, re.escape(out))


# --- 4. health --------------------------------------------------------------------------

class HealthTest(CliCase):

    def test_serving(self):
        proc = self.run_ok("health", "--target", SERVER.target)
        self.assertEqual(proc.stdout.strip(), f"{SERVER.target} SERVING", describe(proc))

    def test_service_name(self):
        # The server registers only the whole-server status (""); any other name is
        # NOT_FOUND, which is not SERVING: exit 3 with the code on the target's line.
        proc = run_cli("health", "--target", SERVER.target, "--service", "no.such.Service",
                       timeout=45)
        self.assertExit(proc, EXIT_RPC)
        self.assertIn("NOT_FOUND", proc.stdout + proc.stderr)
        self.assertNotIn("SERVING", proc.stdout.replace("NOT_SERVING", ""))

    def test_unreachable(self):
        proc = run_cli("health", "--target", UNREACHABLE, timeout=45)
        self.assertExit(proc, EXIT_RPC)
        self.assertIn(UNREACHABLE, proc.stdout + proc.stderr)
        self.assertNotIn(f"{UNREACHABLE} SERVING", proc.stdout)

    def test_two_targets_one_down(self):
        proc = run_cli("health", "--target", f"{SERVER.target},{UNREACHABLE}", timeout=30)
        self.assertExit(proc, EXIT_RPC)
        self.assertIn(f"{SERVER.target} SERVING", proc.stdout)
        self.assertIn(UNREACHABLE, proc.stdout + proc.stderr)


# --- 5. load ----------------------------------------------------------------------------

LOAD_KEYS = ["sent", "not_sent", "by_code", "errors", "unexpected", "seconds", "qps",
             "bytes_sent", "bytes_received", "sent_mb_per_s", "received_mb_per_s",
             "latency_us_min", "latency_us_p50", "latency_us_p90", "latency_us_p99",
             "latency_us_p999", "latency_us_max", "latency_us_mean", "mode", "targets"]


class LoadTest(CliCase):

    def load_json(self, target, *args, timeout=120):
        proc = self.run_ok("load", "--target", target, "--warmup", 0, *args, "--json", "-",
                           timeout=timeout)
        lines = [l for l in proc.stdout.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "--json - must print one JSON object" + describe(proc))
        report = json.loads(lines[0])
        for key in LOAD_KEYS:
            self.assertIn(key, report, describe(proc))
        return report, proc

    def assertLatenciesOrdered(self, r):
        lat = [r[k] for k in ("latency_us_min", "latency_us_p50", "latency_us_p90",
                              "latency_us_p99", "latency_us_p999", "latency_us_max")]
        self.assertEqual(lat, sorted(lat), f"latencies not ordered: {lat}")
        self.assertGreater(lat[0], 0)
        self.assertLessEqual(r["latency_us_min"], r["latency_us_mean"])
        self.assertLessEqual(r["latency_us_mean"], r["latency_us_max"])

    def test_closed_loop(self):
        r, _ = self.load_json(SERVER.target, "--requests", 200, "--concurrency", 4)
        self.assertEqual(r["sent"], 200)
        self.assertEqual(sum(r["by_code"].values()), 200)
        self.assertEqual(r["by_code"], {"OK": 200})
        self.assertEqual(r["errors"], 0)
        self.assertEqual(r["unexpected"], 0)
        self.assertEqual(r["not_sent"], 0)
        self.assertIn(r["targets"], (1, [SERVER.target]), r)
        self.assertGreater(r["seconds"], 0)
        self.assertGreater(r["qps"], 0)
        self.assertGreater(r["bytes_sent"], 0)
        self.assertGreater(r["bytes_received"], 0)
        # Defaults: float32 params 1024x64, 16 indices -> each response carries >= 16*64*4 B.
        self.assertGreaterEqual(r["bytes_received"], 200 * 16 * 64 * 4)
        self.assertLatenciesOrdered(r)

    def test_invalid_fraction(self):
        r, _ = self.load_json(SERVER.target, "--requests", 200, "--concurrency", 4,
                              "--invalid-fraction", 0.5)
        self.assertEqual(r["sent"], 200)
        self.assertEqual(sum(r["by_code"].values()), 200)
        self.assertEqual(set(r["by_code"]), {"OK", "INVALID_ARGUMENT"}, r["by_code"])
        self.assertEqual(r["errors"], r["by_code"]["INVALID_ARGUMENT"])
        self.assertEqual(r["unexpected"], 0)

    def test_gather_nd_options(self):
        r, _ = self.load_json(SERVER.target, "--op", "gather-nd", "--dtype", "int64",
                              "--params-shape", "32,16,8", "--indices", 8, "--index-depth", 2,
                              "--index-dtype", "int64", "--requests", 50, "--concurrency", 2)
        self.assertEqual(r["by_code"], {"OK": 50})
        # 8 tuples of depth 2 pick slices of 8 int64: >= 512 bytes per response.
        self.assertGreaterEqual(r["bytes_received"], 50 * 8 * 8 * 8)

    def test_open_loop(self):
        r, _ = self.load_json(SERVER.target, "--duration", 1, "--rate", 200)
        total = r["sent"] + r["not_sent"]
        self.assertTrue(150 <= total <= 260, f"sent + not_sent = {total}: {r}")
        self.assertIn(sum(r["by_code"].values()), (r["sent"], r["sent"] - r["not_sent"]), r)
        self.assertTrue(100 <= r["qps"] <= 300, f"qps = {r['qps']}")
        self.assertEqual(r["unexpected"], 0)
        self.assertLatenciesOrdered(r)

    def test_overloaded_server_unavailable(self):
        # One executor thread, one queue slot, one request per batch: 32 concurrent calls
        # producing 1 MiB outputs each overflow the queue; the rejections are counted.
        with ServerProcess("--queue_capacity=1", "--max_batch_size=1", "--cpu_threads=1") as s:
            r, _ = self.load_json(s.target, "--rows", 64, "--slice", 1024, "--indices", 256,
                                  "--concurrency", 32, "--requests", 300, timeout=240)
        self.assertEqual(r["sent"], 300)
        self.assertEqual(sum(r["by_code"].values()), 300)
        self.assertIn("UNAVAILABLE", r["by_code"], r["by_code"])
        self.assertIn("OK", r["by_code"], r["by_code"])
        self.assertEqual(set(r["by_code"]) - {"OK", "UNAVAILABLE"}, set(), r["by_code"])
        self.assertEqual(r["errors"], r["by_code"]["UNAVAILABLE"])

    def test_echo_server(self):
        with ServerProcess(binary=os.environ["TC_ECHO_SERVER_BINARY"]) as echo:
            r, _ = self.load_json(echo.target, "--requests", 100, "--concurrency", 2)
        self.assertEqual(r["by_code"], {"OK": 100})
        self.assertEqual(r["sent"], 100)
        self.assertEqual(r["errors"], 0)
        # The echo answers with the request's bytes.
        self.assertEqual(r["bytes_received"], r["bytes_sent"])

    def test_json_file_and_text_report(self):
        path = tmp_path("load.json")
        proc = self.run_ok("load", "--target", SERVER.target, "--warmup", 0, "--requests", 50,
                           "--json", path, timeout=120)
        with open(path) as f:
            r = json.load(f)
        for key in LOAD_KEYS:
            self.assertIn(key, r)
        self.assertEqual(r["by_code"], {"OK": 50})
        for word in ("requests", "QPS", "p50", "p99", "OK"):
            self.assertIn(word, proc.stdout, describe(proc))
        with self.assertRaises(ValueError):
            json.loads(proc.stdout)

    def test_text_report(self):
        proc = self.run_ok("load", "--target", SERVER.target, "--warmup", 0, "--requests", 20,
                           timeout=120)
        for word in ("requests", "QPS", "p50", "p99", "OK"):
            self.assertIn(word, proc.stdout, describe(proc))

    def test_embedding_bag(self):
        # Defaults: float32 params 1024x64; 32 lookups in bags of 4 -> 8 rows of 64 floats
        # answered per call, not 32.
        r, _ = self.load_json(SERVER.target, "--op", "embedding-bag", "--bag-size", 4,
                              "--indices", 32, "--requests", 60, "--concurrency", 3,
                              "--invalid-fraction", 0.5)
        self.assertEqual(r["by_code"], {"OK": 30, "INVALID_ARGUMENT": 30})
        self.assertEqual(r["unexpected"], 0)
        self.assertGreaterEqual(r["bytes_received"], 30 * 8 * 64 * 4)
        self.assertLess(r["bytes_received"], 30 * 32 * 64 * 4)
        # From a resident table: its dtype and shape come from the server's list.
        np.save(tmp_path("eb_load.npy"), np.ones((37, 5), dtype=np.float64))
        self.run_ok("put", "eb_load", "--input", tmp_path("eb_load.npy"), "--replace",
                    "--target", SERVER.target)
        try:
            r, proc = self.load_json(SERVER.target, "--op", "embedding-bag", "--bag-size", 8,
                                     "--params-name", "eb_load", "--requests", 40)
        finally:
            self.run_ok("delete", "eb_load", "--target", SERVER.target)
        self.assertEqual(r["by_code"], {"OK": 40})
        self.assertIn("TensorCompute/EmbeddingBag", proc.stderr)
        self.assertLess(r["bytes_sent"] / 40, 150)  # 16 int32 lookups and the name

    def test_embedding_bag_usage_errors(self):
        cases = [
            (["--indices", 10, "--bag-size", 4], "10 lookups per request do not make whole "
                                                 "bags of 4"),
            (["--protocol", "kserve-http"], "native protocol only"),
            (["--protocol", "kserve"], "native protocol only"),
            (["--dtype", "int32"], "float16, bfloat16, float32 or float64, got int32"),
            (["--params-shape", "8,4,2"], r"\[rows, dim\]"),
        ]
        for args, pattern in cases:
            with self.subTest(args=args):
                proc = run_cli("load", "--target", SERVER.target, "--requests", 1,
                               "--op", "embedding-bag", *args)
                self.assertExit(proc, EXIT_USAGE)
                self.assertErrorLine(proc, pattern)
        proc = run_cli("load", "--target", SERVER.target, "--requests", 1, "--op",
                       "embedding-bag", "--bag-size", 0)
        self.assertExit(proc, EXIT_USAGE)

    def test_usage_errors(self):
        for args in (["--op", "scatter"], ["--concurrency", "many"], ["--dtype", "float128"],
                     ["--index-dtype", "int16"], ["--no-such-flag", "1"]):
            with self.subTest(args=args):
                proc = run_cli("load", "--target", SERVER.target, "--requests", 1, *args)
                self.assertExit(proc, EXIT_USAGE)


# --- Load sweeps (--sweep-concurrency, --sweep-rate, --csv) and tools/plot_load.py ----------

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOT_LOAD = os.path.join(REPO, "tools", "plot_load.py")
SWEEP_CSV_HEADER = ["mode", "value", "op", "protocol", "sent", "not_sent", "ok", "errors",
                    "seconds", "throughput_rps", "sent_bytes_per_s", "received_bytes_per_s",
                    "p50_us", "p90_us", "p99_us", "p999_us", "max_us"]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


class LoadSweepTest(CliCase):

    def test_concurrency_sweep_writes_csv_and_json_and_plots(self):
        csv_path, json_path = tmp_path("sweep.csv"), tmp_path("sweep.json")
        proc = self.run_ok("load", "--target", SERVER.target, "--sweep-concurrency", "1,2",
                           "--duration", 0.5, "--warmup", 0.1, "--csv", csv_path,
                           "--json", json_path, timeout=120)
        # Progress per point on stderr; a summary line per point on stdout.
        self.assertIn("sweep: point 1 of 2: concurrency 1", proc.stderr, describe(proc))
        self.assertIn("sweep: point 2 of 2: concurrency 2", proc.stderr, describe(proc))
        self.assertRegex(proc.stdout, r"concurrency 1: [0-9.]+ QPS, p50 [0-9.]+ us")
        self.assertRegex(proc.stdout, r"concurrency 2: [0-9.]+ QPS, p50 [0-9.]+ us")

        rows = read_csv(csv_path)
        self.assertEqual(rows[0], SWEEP_CSV_HEADER)
        self.assertEqual(len(rows), 3, rows)
        points = [dict(zip(rows[0], r)) for r in rows[1:]]
        for want_value, p in zip(("1", "2"), points):
            self.assertEqual((p["mode"], p["value"], p["op"], p["protocol"]),
                             ("closed", want_value, "gather", "native"))
            self.assertGreater(int(p["sent"]), 0)
            self.assertEqual(int(p["ok"]), int(p["sent"]))
            self.assertEqual(int(p["errors"]), 0)
            self.assertGreater(float(p["throughput_rps"]), 0)
            self.assertGreater(float(p["received_bytes_per_s"]), 0)
            lat = [float(p[k]) for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
            self.assertEqual(lat, sorted(lat))
            self.assertGreater(lat[0], 0)

        with open(json_path) as f:
            reports = json.load(f)
        self.assertIsInstance(reports, list)
        self.assertEqual([r["value"] for r in reports], [1, 2])
        for r, p in zip(reports, points):
            for key in LOAD_KEYS:
                self.assertIn(key, r)
            self.assertEqual((r["sweep"], r["op"], r["protocol"]),
                             ("concurrency", "gather", "native"))
            self.assertEqual(r["sent"], int(p["sent"]))
            self.assertEqual(r["by_code"], {"OK": r["sent"]})

        # tools/plot_load.py draws both files (same sweep, so two line pairs) into a PNG.
        png = tmp_path("sweep.png")
        plot = subprocess.run([sys.executable, PLOT_LOAD, csv_path, json_path, "--label", "csv",
                               "--label", "json", "--title", "cli_test", "--out", png],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(plot.returncode, 0,
                         f"plot_load.py failed (matplotlib missing? run tools/install-deps.sh)"
                         f"\nstdout: {plot.stdout}\nstderr: {plot.stderr}")
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(data), 10000)

    def test_plot_load_help_and_bad_input(self):
        proc = subprocess.run([sys.executable, PLOT_LOAD, "--help"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for word in ("throughput", "p50", "p99", "--label", "--out"):
            self.assertIn(word, proc.stdout)
        bad = tmp_path("bad.csv")
        with open(bad, "w") as f:
            f.write("mode,value,throughput_rps,p50_us,p99_us\nclosed,1,fast,1,2\n")
        proc = subprocess.run([sys.executable, PLOT_LOAD, bad, "--out", tmp_path("bad.png")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("throughput_rps = 'fast' is not a number", proc.stderr)

    def test_rate_sweep_and_csv_to_stdout(self):
        proc = self.run_ok("load", "--target", SERVER.target, "--sweep-rate", "50,100",
                           "--duration", 0.4, "--warmup", 0, "--csv", "-", timeout=120)
        rows = list(csv.reader(proc.stdout.splitlines()))
        self.assertEqual(rows[0], SWEEP_CSV_HEADER, describe(proc))
        self.assertEqual([(r[0], r[1]) for r in rows[1:]], [("open", "50"), ("open", "100")])
        for r in rows[1:]:
            self.assertGreater(int(r[4]), 0)
            self.assertEqual(r[7], "0")

    def test_single_run_csv_is_one_row(self):
        path = tmp_path("single.csv")
        proc = self.run_ok("load", "--target", SERVER.target, "--warmup", 0, "--requests", 30,
                           "--concurrency", 3, "--csv", path, timeout=120)
        self.assertIn("QPS", proc.stdout)  # the text report stays
        rows = read_csv(path)
        self.assertEqual(rows[0], SWEEP_CSV_HEADER)
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[1][:5], ["closed", "3", "gather", "native", "30"])

    def test_sweep_usage_errors(self):
        cases = [
            (["--sweep-concurrency", "0"], r"--sweep-concurrency 0: entry 1: concurrency 0"),
            (["--sweep-concurrency", "1,,2"], r"entry 2 \(''\) is not an integer"),
            (["--sweep-concurrency", "1,x"], r"entry 2 \('x'\) is not an integer"),
            (["--sweep-concurrency", "20000"], r"not an integer in \[1, 10000\]"),
            (["--sweep-concurrency", ",".join(["1"] * 65)], "at most 64 per sweep"),
            (["--sweep-rate=-3"], r"--sweep-rate -3: entry 1: rate -3"),
            (["--sweep-rate", "10,nan"], "--sweep-rate"),
            (["--sweep-rate", "10", "--protocol", "kserve-http"], "closed loop only"),
            (["--sweep-concurrency", "1", "--csv", "-", "--json", "-"], "both write to stdout"),
            (["--compression", "gzip", "--protocol", "kserve-http"], "plain HTTP"),
        ]
        for args, pattern in cases:
            with self.subTest(args=args):
                proc = run_cli("load", "--target", SERVER.target, "--requests", 1, *args)
                self.assertExit(proc, EXIT_USAGE)
                self.assertErrorLine(proc, pattern)
        # CLI11 refuses these itself (its own message).
        for args in (["--sweep-concurrency", "1,2", "--concurrency", "4"],
                     ["--sweep-rate", "10", "--rate", "5"],
                     ["--sweep-rate", "10", "--sweep-concurrency", "1"],
                     ["--concurrency", "10001"], ["--compression", "zstd"]):
            with self.subTest(args=args):
                proc = run_cli("load", "--target", SERVER.target, "--requests", 1, *args)
                self.assertExit(proc, EXIT_USAGE)


class CompressionTest(CliCase):

    def test_gather_with_every_compression_gives_the_same_answer(self):
        params = np.tile(np.arange(64, dtype=np.float32), (512, 1))  # compressible
        np.save(tmp_path("cparams.npy"), params)
        np.save(tmp_path("cindices.npy"), np.array([511, 0, -1, 7], dtype=np.int64))
        outputs = {}
        for compression in ("none", "gzip", "deflate"):
            out = tmp_path(f"cout_{compression}.npy")
            self.run_ok("gather", "--target", SERVER.target, "--params", tmp_path("cparams.npy"),
                        "--indices", tmp_path("cindices.npy"), "--compression", compression,
                        "--out", out)
            with open(out, "rb") as f:
                outputs[compression] = f.read()
        self.assertEqual(outputs["gzip"], outputs["none"])
        self.assertEqual(outputs["deflate"], outputs["none"])
        self.assertTensorEqual(np.load(tmp_path("cout_gzip.npy")),
                               np.take(params, [511, 0, -1, 7], axis=0), exact_bits=True)

    def test_load_native_and_kserve_with_gzip(self):
        for protocol in ("native", "kserve"):
            with self.subTest(protocol=protocol):
                proc = self.run_ok("load", "--target", SERVER.target, "--warmup", 0,
                                   "--requests", 40, "--concurrency", 2, "--compression", "gzip",
                                   "--protocol", protocol, "--json", "-", timeout=120)
                r = json.loads(proc.stdout)
                self.assertEqual(r["by_code"], {"OK": 40}, describe(proc))


# --- Resident tensors: put, delete, list, --params-name ---------------------------------

class ResidentTensorsTest(CliCase):
    """Two servers of their own (a 1 MiB message limit, so uploads must be chunked)."""

    @classmethod
    def setUpClass(cls):
        cls.a = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576",
                              f"--table_dir={TMP.name}", "--table_cache_bytes=65536")
        cls.a.__enter__()
        cls.b = ServerProcess("--cpu_threads=2", "--max_message_bytes=1048576")
        cls.b.__enter__()
        cls.both = f"{cls.a.target},{cls.b.target}"

    @classmethod
    def tearDownClass(cls):
        cls.a.__exit__(None, None, None)
        cls.b.__exit__(None, None, None)

    def tearDown(self):
        for server in (self.a, self.b):
            listed = json.loads(self.run_ok("list", "--target", server.target, "--json").stdout)
            for t in listed:
                self.run_ok("delete", t["name"], "--target", server.target)

    def list_json(self, target):
        return json.loads(self.run_ok("list", "--target", target, "--json").stdout)

    def test_put_list_gather_by_name_delete(self):
        rng = np.random.default_rng(1)
        table = rng.standard_normal((50, 6)).astype(np.float32)
        np.save(tmp_path("table.npy"), table)
        indices = np.array([[3, 0], [49, -1]], dtype=np.int64)
        np.save(tmp_path("ids.npy"), indices)

        proc = self.run_ok("put", "emb", "--input", tmp_path("table.npy"), "--target",
                           self.a.target)
        self.assertIn("stored emb float32[50,6], 1200 bytes, cpu, version 1", proc.stdout)
        listed = self.list_json(self.a.target)
        self.assertEqual(len(listed), 1)
        self.assertEqual({k: listed[0][k] for k in ("target", "name", "dtype", "shape", "bytes",
                                                     "device", "version")},
                         {"target": self.a.target, "name": "emb", "dtype": "float32",
                          "shape": [50, 6], "bytes": 1200, "device": "cpu", "version": 1})
        self.assertRegex(listed[0]["created"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        table_text = self.run_ok("list", "--target", self.a.target).stdout.splitlines()
        self.assertEqual(table_text[0].split(),
                         ["NAME", "DTYPE", "SHAPE", "STORAGE", "BYTES", "DEVICE", "VERSION",
                          "CREATED", "SHARD", "SEQUENCE", "KEYS"])
        self.assertEqual(table_text[1].split()[:7], ["emb", "float32", "[50,6]", "as-is", "1200",
                                                     "cpu", "1"])

        # By name == inline, bit for bit (.npy out), for gather and gather-nd.
        for command, extra in (("gather", ["--axis", "0"]), ("gather-nd", [])):
            self.run_ok(command, "--target", self.a.target, "--params-name", "emb",
                        "--indices", tmp_path("ids.npy"), *extra, "--out",
                        tmp_path("by_name.npy"))
            self.run_ok(command, "--target", self.a.target, "--params", tmp_path("table.npy"),
                        "--indices", tmp_path("ids.npy"), *extra, "--out",
                        tmp_path("inline.npy"))
            with open(tmp_path("by_name.npy"), "rb") as f1, open(tmp_path("inline.npy"),
                                                                 "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), command)
        self.assertNpyResult(tmp_path("by_name.npy"), ref_gather_nd(table, indices))

        proc = self.run_ok("delete", "emb", "--target", self.a.target)
        self.assertIn("deleted emb float32[50,6]", proc.stdout)
        self.assertEqual(self.list_json(self.a.target), [])
        proc = run_cli("gather", "--target", self.a.target, "--params-name", "emb",
                       "--indices", tmp_path("ids.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: NOT_FOUND: ")
        proc = run_cli("delete", "emb", "--target", self.a.target)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: NOT_FOUND: ")

    def test_put_compact_tables(self):
        # --storage int8-rowwise: the server quantizes (FBGEMM's formula, the NumPy reference);
        # list shows the kind, the float32 shape and the bytes held; gathers return float32.
        rng = np.random.default_rng(24)
        table = (rng.standard_normal((40, 16)) * 3).astype(np.float32)
        np.save(tmp_path("compact.npy"), table)
        proc = self.run_ok("put", "q8", "--input", tmp_path("compact.npy"), "--storage",
                           "int8-rowwise", "--chunk-bytes", 100, "--target", self.a.target)
        self.assertIn("stored q8 float32[40,16] (int8-rowwise), 960 bytes", proc.stdout)
        listed = self.list_json(self.a.target)
        self.assertEqual({k: listed[0][k] for k in ("name", "dtype", "shape", "storage", "bytes")},
                         {"name": "q8", "dtype": "float32", "shape": [40, 16],
                          "storage": "int8-rowwise", "bytes": 960})
        np.save(tmp_path("compact_ids.npy"), np.array([[39, 0], [-1, 7]], dtype=np.int64))
        self.run_ok("gather", "--target", self.a.target, "--params-name", "q8", "--indices",
                    tmp_path("compact_ids.npy"), "--out", tmp_path("compact_out.npy"))
        want = dequantize_rowwise8(quantize_rowwise8(table))[[[39, 0], [-1, 7]]]
        self.assertEqual(np.load(tmp_path("compact_out.npy")).tobytes(), want.tobytes())
        self.run_ok("put", "f16", "--input", tmp_path("compact.npy"), "--storage", "float16",
                    "--target", self.a.target)
        self.assertEqual(self.list_json(self.a.target)[0]["bytes"], 40 * 16 * 2)
        proc = run_cli("put", "bad", "--input", tmp_path("compact.npy"), "--storage", "int4",
                       "--target", self.a.target)
        self.assertExit(proc, EXIT_USAGE)
        self.assertIn("unknown storage 'int4'; expected one of as-is, float16, int8-rowwise, "
                      "int8-rowwise-prequantized", proc.stderr)

    def test_put_a_table_on_disk(self):
        # --tier disk: the rows go to a file under the server's --table_dir, behind a row cache
        # (64 KiB here); list says so; gathers read what the table holds.
        rng = np.random.default_rng(43)
        table = rng.standard_normal((2000, 16)).astype(np.float32)
        np.save(tmp_path("on_disk.npy"), table)
        proc = self.run_ok("put", "d", "--input", tmp_path("on_disk.npy"), "--tier", "disk",
                           "--storage", "float16", "--chunk-bytes", 10000,
                           "--target", self.a.target)
        self.assertIn(f"stored d float32[2000,16] (float16), on disk (64000 bytes in "
                      f"{TMP.name}/(unnamed), a cache of 2000 rows)", proc.stdout)
        listed = self.list_json(self.a.target)[0]
        self.assertEqual((listed["tier"], listed["disk"]["file_bytes"]), ("disk", 2000 * 16 * 2))
        np.save(tmp_path("disk_ids.npy"), np.array([1999, 0, 5], dtype=np.int64))
        self.run_ok("gather", "--target", self.a.target, "--params-name", "d", "--indices",
                    tmp_path("disk_ids.npy"), "--out", tmp_path("disk_out.npy"))
        want = table[[1999, 0, 5]].astype(np.float16).astype(np.float32)
        self.assertEqual(np.load(tmp_path("disk_out.npy")).tobytes(), want.tobytes())
        # A server without --table_dir refuses the tier; an unknown tier is a usage error.
        proc = run_cli("put", "d", "--input", tmp_path("on_disk.npy"), "--tier", "disk",
                       "--target", self.b.target)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: FAILED_PRECONDITION: .*--table_dir")
        proc = run_cli("put", "d", "--input", tmp_path("on_disk.npy"), "--tier", "tape",
                       "--target", self.a.target)
        self.assertExit(proc, EXIT_USAGE)

    def test_large_json_and_string_tables_in_many_chunks(self):
        # 2 MiB of float64: twice the servers' message limit, in 64 KiB chunks.
        rng = np.random.default_rng(2)
        big = rng.standard_normal((2048, 128))
        np.save(tmp_path("big.npy"), big)
        self.run_ok("put", "big", "--input", tmp_path("big.npy"), "--chunk-bytes", 65536,
                    "--target", self.a.target)
        np.save(tmp_path("big_ids.npy"), np.array([2047, 0, 1000], dtype=np.int32))
        proc = self.run_ok("gather", "--target", self.a.target, "--params-name", "big",
                           "--indices", tmp_path("big_ids.npy"), "--out", tmp_path("big_out.npy"))
        self.assertNpyResult(tmp_path("big_out.npy"), big[[2047, 0, 1000]])

        words = {"dtype": "string", "shape": [3, 2],
                 "values": ["zéro", "", "deux" * 300, "trois", "x", "cinq"]}
        write_json("words.json", words)
        self.run_ok("put", "words", "--input", tmp_path("words.json"), "--chunk-bytes", 100,
                    "--target", self.a.target)
        write_json("word_ids.json", {"dtype": "int32", "shape": [2], "values": [2, 0]})
        proc = self.run_ok("gather", "--target", self.a.target, "--params-name", "words",
                           "--indices", tmp_path("word_ids.json"))
        obj = self.stdout_tensor(proc)
        self.assertEqual((obj["dtype"], obj["shape"]), ("string", [2, 2]))
        self.assertEqual(from_json_tensor(obj).ravel().tolist(),
                         [b"x", b"cinq", "zéro".encode(), b""])

    def test_already_exists_and_replace(self):
        np.save(tmp_path("v1.npy"), np.arange(4, dtype=np.int32))
        np.save(tmp_path("v2.npy"), np.arange(10, 16, dtype=np.int16))
        self.run_ok("put", "t", "--input", tmp_path("v1.npy"), "--target", self.a.target)
        proc = run_cli("put", "t", "--input", tmp_path("v2.npy"), "--target", self.a.target)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: ALREADY_EXISTS: ")
        proc = self.run_ok("put", "t", "--input", tmp_path("v2.npy"), "--replace",
                           "--target", self.a.target)
        self.assertIn("stored t int16[6], 12 bytes, cpu, version 2", proc.stdout)

    def test_all_targets(self):
        np.save(tmp_path("shared.npy"), np.arange(12, dtype=np.uint8).reshape(4, 3))
        proc = self.run_ok("put", "shared", "--input", tmp_path("shared.npy"), "--all-targets",
                           "--target", self.both)
        self.assertIn("(on 2 targets)", proc.stdout)
        for server in (self.a, self.b):
            self.assertEqual([t["name"] for t in self.list_json(server.target)], ["shared"])
        listed = self.list_json(self.both)
        self.assertEqual(sorted(t["target"] for t in listed), sorted([self.a.target,
                                                                      self.b.target]))
        self.assertEqual(self.run_ok("list", "--target", self.both).stdout.split()[:2],
                         ["TARGET", "NAME"])
        # Without --all-targets only the first target is reached.
        self.run_ok("delete", "shared", "--target", self.both)
        self.assertEqual(self.list_json(self.a.target), [])
        self.assertEqual(len(self.list_json(self.b.target)), 1)
        proc = run_cli("put", "shared", "--input", tmp_path("shared.npy"), "--all-targets",
                       "--target", self.both)
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, rf"^error: ALREADY_EXISTS: put shared: failed on 1 of 2 "
                                   rf"targets: {re.escape(self.b.target)}: ALREADY_EXISTS")
        self.assertIn(f"succeeded on: {self.a.target}", proc.stderr)
        self.run_ok("delete", "shared", "--all-targets", "--target", self.both)
        self.assertEqual(self.list_json(self.both), [])

    def test_usage_errors(self):
        np.save(tmp_path("ids.npy"), np.array([0], dtype=np.int32))
        # Both --params and --params-name, or neither.
        proc = run_cli("gather", "--target", self.a.target, "--params", tmp_path("ids.npy"),
                       "--params-name", "x", "--indices", tmp_path("ids.npy"))
        self.assertExit(proc, EXIT_USAGE)
        proc = run_cli("gather", "--target", self.a.target, "--indices", tmp_path("ids.npy"))
        self.assertExit(proc, EXIT_USAGE)
        self.assertErrorLine(proc, "exactly one of --params FILE and --params-name NAME")
        self.assertExit(run_cli("put", "t", "--target", self.a.target), EXIT_USAGE)
        self.assertExit(run_cli("put", "--input", tmp_path("ids.npy")), EXIT_USAGE)
        self.assertExit(run_cli("put", "t", "--input", tmp_path("ids.npy"), "--chunk-bytes", 0),
                        EXIT_USAGE)
        proc = run_cli("put", "t", "--input", tmp_path("missing.npy"), "--target", self.a.target)
        self.assertExit(proc, EXIT_IO)
        self.assertExit(run_cli("delete", "--target", self.a.target), EXIT_USAGE)

    def test_load_against_a_resident_table(self):
        np.save(tmp_path("load_table.npy"), np.zeros((37, 16), dtype=np.float32))
        self.run_ok("put", "load_table", "--input", tmp_path("load_table.npy"), "--target",
                    self.a.target)
        proc = self.run_ok("load", "--target", self.a.target, "--warmup", 0, "--requests", 200,
                           "--concurrency", 4, "--indices", 64, "--params-name", "load_table",
                           "--json", "-", timeout=120)
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        self.assertEqual(report["by_code"], {"OK": 200}, describe(proc))
        self.assertEqual(report["unexpected"], 0)
        # Only indices travel: 64 int32 (256 bytes) and the name, not the 2368-byte table.
        self.assertLess(report["bytes_sent"] / 200, 400)
        proc = run_cli("load", "--target", self.a.target, "--requests", 1, "--params-name",
                       "nope")
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: NOT_FOUND: --params-name nope")

    def test_admin_token_file(self):
        with open(tmp_path("reader_tokens"), "w") as f:
            f.write("reader\n")
        with open(tmp_path("admin_tokens"), "w") as f:
            f.write("# admins\nadmin\n")
        np.save(tmp_path("adm.npy"), np.arange(6, dtype=np.float64))
        with ServerProcess("--cpu_threads=2", f"--auth_token_file={tmp_path('reader_tokens')}",
                           f"--admin_token_file={tmp_path('admin_tokens')}") as server:
            reader = ["--target", server.target, "--auth-token-file", tmp_path("reader_tokens")]
            proc = run_cli("put", "adm", "--input", tmp_path("adm.npy"), *reader)
            self.assertExit(proc, EXIT_RPC)
            self.assertErrorLine(proc, r"^error: PERMISSION_DENIED: .*admin token")
            admin = [*reader, "--admin-token-file", tmp_path("admin_tokens")]
            self.run_ok("put", "adm", "--input", tmp_path("adm.npy"), *admin)
            listed = json.loads(self.run_ok("list", "--json", *reader).stdout)
            self.assertEqual([t["name"] for t in listed], ["adm"])
            np.save(tmp_path("adm_ids.npy"), np.array([5], dtype=np.int32))
            proc = self.run_ok("gather", "--params-name", "adm", "--indices",
                               tmp_path("adm_ids.npy"), *reader)
            self.assertEqual(self.stdout_tensor(proc)["values"], [5.0])
            # $TENSORCOMPUTE_ADMIN_TOKEN instead of the file.
            env = dict(os.environ, TENSORCOMPUTE_ADMIN_TOKEN="admin")
            proc = subprocess.run([CLI, "delete", "adm", *reader], capture_output=True,
                                  text=True, env=env, timeout=60)
            self.assertExit(proc, EXIT_OK)


# --- 6. embedding-bag -------------------------------------------------------------------

def save_tensor(name, array):
    """Writes `array` as name.npy, or for bfloat16 (which .npy cannot hold) as name.json."""
    array = np.asarray(array)
    if array.dtype.name == "bfloat16":
        return write_json(f"{name}.json", {"dtype": "bfloat16", "shape": list(array.shape),
                                           "values": array.astype(np.float64).ravel().tolist()})
    path = tmp_path(f"{name}.npy")
    np.save(path, array)
    return path


class EmbeddingBagTest(CliCase):
    """embedding-bag against the module's server: random calls checked against
    ref_embedding_bag (bit for bit for unweighted SUM and MAX, within its tight bound
    otherwise), by name, and the errors with their exit codes."""

    def embedding_bag(self, params, indices, kwargs, out=None, params_name=None):
        """Runs embedding-bag with the files and flags that stand for
        client.embedding_bag(params, indices, **kwargs)."""
        args = ["embedding-bag", "--target", SERVER.target, "--indices",
                save_tensor("eb_indices", indices), "--mode", kwargs.get("mode", "sum")]
        if params_name is None:
            args += ["--params", save_tensor("eb_params", params)]
        else:
            args += ["--params-name", params_name]
        if kwargs.get("offsets") is not None:
            args += ["--offsets", save_tensor("eb_offsets", kwargs["offsets"])]
        if kwargs.get("per_sample_weights") is not None:
            args += ["--per-sample-weights", save_tensor("eb_weights",
                                                         kwargs["per_sample_weights"])]
        if kwargs.get("include_last_offset"):
            args.append("--include-last-offset")
        if kwargs.get("padding_idx") is not None:
            args += ["--padding-idx", kwargs["padding_idx"]]
        if out is not None:
            args += ["--out", out]
        return run_cli(*args)

    def answer(self, proc, out, dtype):
        """The result: from --out's .npy, or from the JSON line on stdout in `dtype`."""
        self.assertExit(proc, EXIT_OK)
        if out is not None:
            self.assertEqual(proc.stdout, "", "stdout not empty with --out" + describe(proc))
            return np.load(out, allow_pickle=False)
        obj = self.stdout_tensor(proc)
        self.assertEqual(obj["dtype"], np.dtype(dtype).name)
        return from_json_tensor(obj).astype(dtype)  # bfloat16 comes back as float32, exactly

    def test_random_calls_match_the_numpy_loop(self):
        rng = np.random.default_rng(2325)
        n = 0
        for dtype in EB_FLOAT_DTYPES:
            for mode in EB_MODES:
                for weighted in ((False,) if mode == "max" else (False, True)):
                    for fixed_bags in (False, True):
                        params, indices, kwargs = random_bag_case(rng, dtype, mode, weighted,
                                                                  fixed_bags)
                        # .npy out on every other call (bfloat16: always JSON on stdout).
                        n += 1
                        out = tmp_path("eb_out.npy") if n % 2 and dtype != EB_FLOAT_DTYPES[1] \
                            else None
                        with self.subTest(dtype=np.dtype(dtype).name, mode=mode,
                                          weighted=weighted, fixed_bags=fixed_bags,
                                          out=out is not None):
                            proc = self.embedding_bag(params, indices, kwargs, out)
                            got = self.answer(proc, out, dtype)
                            problem = mismatch(got, *ref_embedding_bag(params, indices,
                                                                       **kwargs))
                            self.assertIsNone(problem, describe(proc))

    def test_flags_by_hand(self):
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        offsets = np.array([0, 2, 3], dtype=np.int32)
        weights = np.array([2, 1, 0.5], dtype=np.float32)
        # --include-last-offset with weights, --mode in capitals, a negative --padding-idx.
        proc = self.run_ok(
            "embedding-bag", "--target", SERVER.target, "--params", save_tensor("h_p", params),
            "--indices", save_tensor("h_i", np.array([0, 2, 3])), "--offsets",
            save_tensor("h_o", offsets), "--per-sample-weights", save_tensor("h_w", weights),
            "--include-last-offset", "--mode", "SUM")
        self.assertEqual(self.stdout_tensor(proc),
                         {"dtype": "float32", "shape": [2, 3], "values": [6, 9, 12, 4.5, 5, 5.5]})
        proc = self.run_ok(
            "embedding-bag", "--target", SERVER.target, "--params", save_tensor("h_p", params),
            "--indices", save_tensor("h_i", np.array([[0, 2], [3, -2]])), "--mode", "mean",
            "--padding-idx", -2)
        self.assertEqual(self.stdout_tensor(proc)["values"], [0, 1, 2, 9, 10, 11])

    def test_by_name_equals_inline(self):
        rng = np.random.default_rng(2326)
        table = rng.standard_normal((60, 7)).astype(np.float32)
        self.run_ok("put", "eb_cli_table", "--input", save_tensor("eb_table", table),
                    "--replace", "--target", SERVER.target)
        try:
            for mode, weighted in (("sum", False), ("mean", True), ("max", False),
                                   ("sqrtn", True)):
                _, indices, kwargs = random_bag_case(rng, np.float32, mode, weighted, True)
                indices = rng.integers(-60, 60, size=indices.shape)
                with self.subTest(mode=mode):
                    by_name = self.answer(
                        self.embedding_bag(None, indices, kwargs, tmp_path("eb_name.npy"),
                                           params_name="eb_cli_table"),
                        tmp_path("eb_name.npy"), np.float32)
                    inline = self.answer(
                        self.embedding_bag(table, indices, kwargs, tmp_path("eb_inline.npy")),
                        tmp_path("eb_inline.npy"), np.float32)
                    self.assertEqual(by_name.tobytes(), inline.tobytes())
                    self.assertIsNone(mismatch(by_name, *ref_embedding_bag(table, indices,
                                                                           **kwargs)))
        finally:
            self.run_ok("delete", "eb_cli_table", "--target", SERVER.target)
        proc = self.embedding_bag(None, [[0]], {}, params_name="eb_cli_table")
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: NOT_FOUND: .*eb_cli_table")

    def test_errors_and_exit_codes(self):
        params = np.arange(8, dtype=np.float32).reshape(4, 2)
        rpc_errors = [
            ([0, 9, 1], {"offsets": [0, 1]}, r"indices\[1\] = 9 is not in \[-4, 4\)"),
            ([0, 1, 2], {"offsets": [0, 2, 1]}, r"offsets\[2\] = 1 is less than"),
            ([[0, 1]], {"per_sample_weights": np.ones((1, 2), np.float32), "mode": "max"},
             "not supported with mode MAX"),
            ([[0]], {"padding_idx": 4}, r"padding_idx = 4 is not in \[-4, 4\)"),
            ([0, 1], {}, "rank 1 need offsets"),
        ]
        for indices, kwargs, words in rpc_errors:
            with self.subTest(words=words):
                proc = self.embedding_bag(params, np.array(indices), kwargs)
                self.assertExit(proc, EXIT_RPC)
                self.assertErrorLine(proc, "^error: INVALID_ARGUMENT: .*" + words)
                self.assertEqual(proc.stdout, "")
        p, i = save_tensor("e_p", params), save_tensor("e_i", np.array([[0]]))
        base = ["embedding-bag", "--target", SERVER.target]
        usage = [
            ([*base, "--params", p, "--indices", i, "--mode", "median"], r"--mode median"),
            ([*base, "--indices", i], "exactly one of --params FILE and --params-name NAME"),
            ([*base, "--params", p, "--indices", i, "--out", tmp_path("x.txt")], r"\.npy or"),
        ]
        for args, pattern in usage:
            with self.subTest(args=args[3:]):
                proc = run_cli(*args)
                self.assertExit(proc, EXIT_USAGE)
                self.assertErrorLine(proc, pattern)
        for args in ([*base, "--params", p], [*base, "--params", p, "--params-name", "t",
                                              "--indices", i],
                     [*base, "--params", p, "--indices", i, "--padding-idx", "one"]):
            with self.subTest(args=args[3:]):
                self.assertExit(run_cli(*args), EXIT_USAGE)
        proc = run_cli(*base, "--params", p, "--indices", i, "--offsets", tmp_path("none.npy"))
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, r"^error: --offsets .*none\.npy")


class KeyedTablesTest(CliCase):
    """Keyed tables (issue 42): put --keys, gather and embedding-bag --keys under every
    missing-key policy against a NumPy dictionary of the rows, the found mask, list, and the
    errors with their exit codes. Against the module's server."""

    I64 = np.iinfo(np.int64)

    def tearDown(self):
        for t in json.loads(self.run_ok("list", "--target", SERVER.target, "--json").stdout):
            if t["name"].startswith("k_"):
                self.run_ok("delete", t["name"], "--target", SERVER.target)

    def random_keys(self, rng, n):
        """n unique int64 keys, the extremes among them."""
        keys = {self.I64.min, self.I64.max, 0, -1}
        while len(keys) < n:
            keys.add(int(rng.integers(self.I64.min, self.I64.max, dtype=np.int64,
                                      endpoint=True)))
        keys = np.array(sorted(keys)[:n], dtype=np.int64)
        rng.shuffle(keys)
        return keys

    def absent_key(self, rng, keys):
        present = set(keys.tolist())
        while True:
            k = int(rng.integers(self.I64.min, self.I64.max, dtype=np.int64, endpoint=True))
            if k not in present:
                return k

    def request(self, rng, keys, shape, present=0.5):
        flat = [int(keys[rng.integers(len(keys))]) if rng.random() < present
                else self.absent_key(rng, keys) for _ in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.int64).reshape(shape)

    def put_table(self, rng, name, rows=40, dim=4, *flags):
        table = rng.integers(-8, 9, size=(rows, dim)).astype(np.float32)
        keys = self.random_keys(rng, rows)
        default = (rng.integers(10, 99, size=dim) + 0.5).astype(np.float32)
        np.save(tmp_path(f"{name}_rows.npy"), table)
        np.save(tmp_path(f"{name}_keys.npy"), keys)
        np.save(tmp_path(f"{name}_default.npy"), default)
        proc = self.run_ok("put", name, "--target", SERVER.target, "--input",
                           tmp_path(f"{name}_rows.npy"), "--keys", tmp_path(f"{name}_keys.npy"),
                           "--chunk-bytes", 64, *flags)
        return table, keys, default, proc

    @staticmethod
    def expected(table, keys, default, request, policy):
        row_of = {int(k): i for i, k in enumerate(keys)}
        found = np.array([int(k) in row_of for k in request.ravel()], dtype=np.bool_)
        out = np.zeros((request.size, table.shape[1]), table.dtype)
        for i, k in enumerate(request.ravel()):
            if int(k) in row_of:
                out[i] = table[row_of[int(k)]]
            elif policy == "default":
                out[i] = default
        return out.reshape(request.shape + (table.shape[1],)), found.reshape(request.shape)

    def test_put_list_and_gather_under_every_policy(self):
        rng = np.random.default_rng(4242)
        table, keys, default, proc = self.put_table(
            rng, "k_users", 40, 4, "--missing", "zero", "--default-row",
            tmp_path("k_users_default.npy"), "--capacity", 64)
        # The server describes the table by its capacity's slots (core/keyed_rows.h).
        self.assertIn("stored k_users float32[64,4], 40 keys of 64, missing ZERO, a default row",
                      proc.stdout)
        listed = [t for t in json.loads(self.run_ok("list", "--target", SERVER.target,
                                                    "--json").stdout)
                  if t["name"] == "k_users"]
        self.assertEqual(listed[0]["keyed"], {"keys": 40, "capacity": 64, "missing": "ZERO",
                                              "has_default_row": True})
        text = self.run_ok("list", "--target", SERVER.target).stdout.splitlines()
        self.assertEqual(text[0].split()[-1], "KEYS")
        self.assertEqual([l.split()[-1] for l in text if l.startswith("k_users ")], ["40/64"])

        for round_ in range(3):
            request = self.request(rng, keys, (3, 5))
            np.save(tmp_path("k_req.npy"), request)
            # No --missing: the table's policy (zero).
            for policy, flags in ((("zero", [])), ("zero", ["--missing", "zero"]),
                                  ("default", ["--missing", "default"])):
                with self.subTest(round=round_, flags=flags):
                    self.run_ok("gather", "--target", SERVER.target, "--params-name", "k_users",
                                "--keys", tmp_path("k_req.npy"), *flags, "--out",
                                tmp_path("k_out.npy"), "--found-out", tmp_path("k_found.npy"))
                    want, found = self.expected(table, keys, default, request, policy)
                    self.assertNpyResult(tmp_path("k_out.npy"), want)
                    self.assertNpyResult(tmp_path("k_found.npy"), found)
        # JSON out, present keys only, under --missing error; the same as gather by indices.
        request = self.request(rng, keys, (6,), present=1.0)
        np.save(tmp_path("k_req.npy"), request)
        proc = self.run_ok("gather", "--target", SERVER.target, "--params-name", "k_users",
                           "--keys", tmp_path("k_req.npy"), "--missing", "error")
        self.assertJsonResult(self.stdout_tensor(proc),
                              self.expected(table, keys, default, request, "error")[0])
        # A missing key under error names its position and value.
        request = np.array([keys[0], self.absent_key(rng, keys)], dtype=np.int64)
        np.save(tmp_path("k_req.npy"), request)
        proc = run_cli("gather", "--target", SERVER.target, "--params-name", "k_users",
                       "--keys", tmp_path("k_req.npy"), "--missing", "error")
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: .*keys\[1\] = " +
                             str(request[1]) + r" is not a key of table 'k_users'")

    def test_embedding_bag_by_keys_skips_missing_keys(self):
        rng = np.random.default_rng(4243)
        table, keys, default, _ = self.put_table(rng, "k_emb", 30, 5)
        for mode in ("sum", "mean", "max"):
            # Keys of rows 0..28; row 29 stands for the missing ones as a padding row.
            n = int(rng.integers(1, 16))
            rows = rng.integers(0, 29, size=n)
            missing = rng.random(n) < 0.3
            request = np.where(missing, 0, keys[rows]).astype(np.int64)
            for i in np.flatnonzero(missing):
                request[i] = self.absent_key(rng, keys)
            indices = np.where(missing, 29, rows).astype(np.int64)
            offsets = np.array(sorted({0} | set(rng.integers(0, n, size=3).tolist())),
                               dtype=np.int64)
            np.save(tmp_path("k_bag_keys.npy"), request)
            np.save(tmp_path("k_offsets.npy"), offsets)
            with self.subTest(mode=mode):
                self.run_ok("embedding-bag", "--target", SERVER.target, "--params-name", "k_emb",
                            "--keys", tmp_path("k_bag_keys.npy"), "--offsets",
                            tmp_path("k_offsets.npy"), "--mode", mode, "--missing", "skip",
                            "--out", tmp_path("k_bag.npy"), "--found-out",
                            tmp_path("k_bag_found.npy"))
                want, bound = ref_embedding_bag(table, indices, offsets, mode=mode,
                                                padding_idx=29)
                self.assertIsNone(mismatch(np.load(tmp_path("k_bag.npy")), want, bound))
                self.assertNpyResult(tmp_path("k_bag_found.npy"), ~missing)
        # The table's policy (error) without --missing.
        proc = run_cli("embedding-bag", "--target", SERVER.target, "--params-name", "k_emb",
                       "--keys", tmp_path("k_bag_keys.npy"), "--offsets",
                       tmp_path("k_offsets.npy"))
        if missing.any():
            self.assertExit(proc, EXIT_RPC)
            self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: .*is not a key of table")

    def test_update_by_keys_adds_replaces_and_deletes(self):
        rng = np.random.default_rng(4245)
        table = rng.integers(-8, 9, size=(6, 3)).astype(np.float32)
        keys = self.random_keys(rng, 6)
        np.save(tmp_path("k_upd_rows.npy"), table)
        np.save(tmp_path("k_upd_keys.npy"), keys)
        self.run_ok("put", "k_upd", "--target", SERVER.target, "--input",
                    tmp_path("k_upd_rows.npy"), "--keys", tmp_path("k_upd_keys.npy"),
                    "--capacity", 8, "--missing", "zero")
        new_key = self.absent_key(rng, keys)
        written = np.array([keys[1], new_key], np.int64)
        values = np.full((2, 3), 5.5, np.float32)
        np.save(tmp_path("k_upd_w.npy"), written)
        np.save(tmp_path("k_upd_v.npy"), values)
        np.save(tmp_path("k_upd_d.npy"), keys[2:4])
        proc = self.run_ok("update", "k_upd", "--target", SERVER.target, "--keys",
                           tmp_path("k_upd_w.npy"), "--values", tmp_path("k_upd_v.npy"),
                           "--delete-keys", tmp_path("k_upd_d.npy"))
        self.assertRegex(proc.stdout, r"^updated k_upd: 2 rows in 2 messages, sequence 2$")
        asked = np.concatenate([keys, [new_key]]).astype(np.int64)
        np.save(tmp_path("k_upd_ask.npy"), asked)
        self.run_ok("gather", "--target", SERVER.target, "--params-name", "k_upd", "--keys",
                    tmp_path("k_upd_ask.npy"), "--out", tmp_path("k_upd_out.npy"),
                    "--found-out", tmp_path("k_upd_found.npy"))
        expected = np.concatenate([table, np.zeros((1, 3), np.float32)])
        expected[1] = 5.5
        expected[2:4] = 0  # deleted: missing, zeros
        expected[6] = 5.5  # the new key
        np.testing.assert_array_equal(np.load(tmp_path("k_upd_out.npy")), expected)
        self.assertEqual(np.load(tmp_path("k_upd_found.npy")).tolist(),
                         [True, True, False, False, True, True, True])
        # Deletes alone; and the usage errors.
        self.run_ok("update", "k_upd", "--target", SERVER.target, "--delete-keys",
                    tmp_path("k_upd_w.npy"))
        listed = {t["name"]: t for t in json.loads(
            self.run_ok("list", "--target", SERVER.target, "--json").stdout)}
        self.assertEqual(listed["k_upd"]["keyed"]["keys"], 3)
        for args in (["--keys", tmp_path("k_upd_w.npy")],
                     ["--indices", tmp_path("k_upd_w.npy"), "--keys", tmp_path("k_upd_w.npy"),
                      "--values", tmp_path("k_upd_v.npy")],
                     ["--values", tmp_path("k_upd_v.npy")]):
            with self.subTest(args=args):
                self.assertExit(run_cli("update", "k_upd", "--target", SERVER.target, *args),
                                EXIT_USAGE)

    def test_errors_and_exit_codes(self):
        rng = np.random.default_rng(4244)
        table, keys, default, _ = self.put_table(rng, "k_err", 8, 2)
        np.save(tmp_path("k_req.npy"), keys[:3])
        np.save(tmp_path("k_ids.npy"), np.arange(3, dtype=np.int64))
        base = ["--target", SERVER.target]
        usage = [
            ["gather", *base, "--params-name", "k_err", "--keys", tmp_path("k_req.npy"),
             "--indices", tmp_path("k_ids.npy")],
            ["gather", *base, "--params-name", "k_err"],
            ["gather", *base, "--params", tmp_path("k_err_rows.npy"), "--keys",
             tmp_path("k_req.npy")],
            ["gather", *base, "--params-name", "k_err", "--indices", tmp_path("k_ids.npy"),
             "--missing", "zero"],
            ["gather", *base, "--params-name", "k_err", "--indices", tmp_path("k_ids.npy"),
             "--found-out", tmp_path("f.npy")],
            ["gather", *base, "--params-name", "k_err", "--keys", tmp_path("k_req.npy"),
             "--missing", "sometimes"],
            ["gather", *base, "--params-name", "k_err", "--keys", tmp_path("k_req.npy"),
             "--found-out", tmp_path("f.txt")],
            ["gather", *base, "--params-name", "k_err", "--keys", tmp_path("k_req.npy"),
             "--axis", 1],
            ["embedding-bag", *base, "--params-name", "k_err"],
            ["put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--missing", "zero"],
            ["put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--capacity", 9],
            # Sharded by key: keys that are not one per row.
            ["put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--keys",
             tmp_path("k_req.npy"), "--shards", 2, "--targets",
             f"{SERVER.target},{SERVER.target}"],
        ]
        for args in usage:
            with self.subTest(args=args):
                self.assertExit(run_cli(*args), EXIT_USAGE)
        proc = run_cli("gather", *base, "--params-name", "k_err", "--keys",
                       tmp_path("nothing.npy"))
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, r"^error: --keys ")
        proc = run_cli("put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--keys",
                       tmp_path("nothing.npy"))
        self.assertExit(proc, EXIT_IO)
        # Keys that do not fit the rows (the client's check), a duplicate (the server's).
        np.save(tmp_path("k_short.npy"), keys[:5])
        proc = run_cli("put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--keys",
                       tmp_path("k_short.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: keys: 5 keys for 8 rows")
        dup = keys.copy()
        dup[6] = dup[2]
        np.save(tmp_path("k_dup.npy"), dup)
        proc = run_cli("put", "k_x", *base, "--input", tmp_path("k_err_rows.npy"), "--keys",
                       tmp_path("k_dup.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, rf"^error: INVALID_ARGUMENT: .*keys\[6\] = {dup[2]} "
                                   r"repeats keys\[2\]")
        # default without a default row; keys on a table without keys.
        np.save(tmp_path("k_absent.npy"), np.array([self.absent_key(rng, keys)], np.int64))
        proc = run_cli("gather", *base, "--params-name", "k_err", "--keys",
                       tmp_path("k_absent.npy"), "--missing", "default")
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"no default row")
        self.run_ok("put", "k_plain", *base, "--input", tmp_path("k_err_rows.npy"))
        proc = run_cli("gather", *base, "--params-name", "k_plain", "--keys",
                       tmp_path("k_req.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: ")


class UpdateTest(CliCase):
    """`update` (UpdateRows) and `load --update-rate` against a server of their own, with the
    least message limit it takes (128 KiB), which the client's messages must respect."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu_threads=2", "--max_message_bytes=131072")
        cls.server.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def setUp(self):
        self.table = np.random.default_rng(5).standard_normal((300, 16)).astype(np.float32)
        np.save(tmp_path("u_table.npy"), self.table)
        self.run_ok("put", "emb", "--input", tmp_path("u_table.npy"), "--replace",
                    "--target", self.server.target, "--max-message-bytes", 131072)

    def sequence(self):
        listed = json.loads(self.run_ok("list", "--target", self.server.target,
                                        "--json").stdout)
        return {t["name"]: t["sequence"] for t in listed}["emb"]

    def gather_all(self):
        np.save(tmp_path("u_all.npy"), np.arange(300, dtype=np.int64))
        self.run_ok("gather", "--target", self.server.target, "--params-name", "emb",
                    "--indices", tmp_path("u_all.npy"), "--out", tmp_path("u_out.npy"),
                    "--max-message-bytes", 131072)
        return np.load(tmp_path("u_out.npy"))

    def test_update_round_trip(self):
        before = self.sequence()
        ids = np.array([7, -1, 0], dtype=np.int32)
        rows = np.full((3, 16), 2.5, dtype=np.float32)
        rows[1] = -1.0
        np.save(tmp_path("u_ids.npy"), ids)
        np.save(tmp_path("u_rows.npy"), rows)
        proc = self.run_ok("update", "emb", "--indices", tmp_path("u_ids.npy"), "--values",
                           tmp_path("u_rows.npy"), "--target", self.server.target)
        m = re.fullmatch(r"updated emb: 3 rows in 1 messages, sequence (\d+)\n", proc.stdout)
        self.assertIsNotNone(m, describe(proc))
        self.assertEqual(int(m.group(1)), before + 1)
        self.assertEqual(self.sequence(), before + 1)
        want = self.table.copy()
        want[[7, 299, 0]] = rows
        np.testing.assert_array_equal(self.gather_all(), want)

    def test_a_large_update_streams_in_many_messages(self):
        before = self.sequence()
        # 300 rows of 64 + 8 bytes in messages under the 128 KiB limit, chunked at 4 KiB: 56
        # rows a message, so 6 messages (and the sequence moves by 6).
        ids = np.arange(300, dtype=np.int64)[::-1].copy()
        rows = np.random.default_rng(6).standard_normal((300, 16)).astype(np.float32)
        np.save(tmp_path("u_ids.npy"), ids)
        np.save(tmp_path("u_rows.npy"), rows)
        proc = self.run_ok("update", "emb", "--indices", tmp_path("u_ids.npy"), "--values",
                           tmp_path("u_rows.npy"), "--chunk-bytes", 4096, "--target",
                           self.server.target, "--max-message-bytes", 131072)
        self.assertEqual(proc.stdout,
                         f"updated emb: 300 rows in 6 messages, sequence {before + 6}\n")
        np.testing.assert_array_equal(self.gather_all(), rows[::-1])

    def test_errors(self):
        np.save(tmp_path("u_ids.npy"), np.array([1, 2], dtype=np.int64))
        np.save(tmp_path("u_rows.npy"), np.zeros((3, 16), dtype=np.float32))
        base = ["update", "emb", "--target", self.server.target]
        proc = run_cli(*base, "--indices", tmp_path("u_ids.npy"), "--values",
                       tmp_path("u_rows.npy"))
        self.assertExit(proc, EXIT_USAGE)
        self.assertErrorLine(proc, "values has 3 rows but indices has 2 entries")
        before = self.sequence()
        np.save(tmp_path("u_ids.npy"), np.array([1, 300], dtype=np.int64))
        np.save(tmp_path("u_rows.npy"), np.zeros((2, 16), dtype=np.float32))
        proc = run_cli(*base, "--indices", tmp_path("u_ids.npy"), "--values",
                       tmp_path("u_rows.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: INVALID_ARGUMENT: .*300 is not in \[-300, 300\)")
        self.assertEqual(self.sequence(), before)  # a bad message changes nothing
        np.testing.assert_array_equal(self.gather_all(), self.table)
        np.save(tmp_path("u_ids.npy"), np.array([1, 2], dtype=np.int64))
        proc = run_cli("update", "nothing", "--target", self.server.target, "--indices",
                       tmp_path("u_ids.npy"), "--values", tmp_path("u_rows.npy"))
        self.assertExit(proc, EXIT_RPC)
        self.assertErrorLine(proc, r"^error: NOT_FOUND: ")
        proc = run_cli(*base, "--indices", tmp_path("u_ids.npy"), "--values",
                       tmp_path("u_missing.npy"))
        self.assertExit(proc, EXIT_IO)
        self.assertErrorLine(proc, r"^error: --values .*u_missing\.npy")

    def test_load_with_updates_reports_them(self):
        before = self.sequence()
        proc = self.run_ok("load", "--target", self.server.target, "--params-name", "emb",
                           "--warmup", 0, "--duration", 1, "--concurrency", 2,
                           "--update-rate", 2000, "--update-rows", 50, "--json", "-",
                           timeout=120)
        report = json.loads(proc.stdout)
        self.assertEqual(report["errors"], 0, report)
        updates = report["updates"]
        self.assertEqual(updates["errors"], 0, updates)
        self.assertEqual(updates["target_rows_per_s"], 2000)
        # ~1 s at 2000 rows/s in messages of 50: about 40 messages, all acknowledged.
        self.assertGreaterEqual(updates["messages_applied"], 20, updates)
        self.assertEqual(updates["rows_applied"], updates["rows_sent"])
        self.assertEqual(updates["rows_applied"], 50 * updates["messages_applied"])
        self.assertTrue(1000 <= updates["rows_per_s"] <= 2600, updates)
        self.assertEqual(self.sequence(), before + updates["messages_applied"])
        self.assertEqual(updates["sequence"], before + updates["messages_applied"])
        text = self.run_ok("load", "--target", self.server.target, "--params-name", "emb",
                           "--warmup", 0, "--duration", 0.5, "--update-rate", 1000,
                           "--update-rows", 10, timeout=120).stdout
        self.assertRegex(text, r"updates +[0-9.]+ rows/s applied \(target 1000\), \d+ rows in "
                               r"\d+ messages sent, \d+ applied, 0 stream errors")

    def test_load_update_usage_errors(self):
        for args, pattern in (
                (["--update-rate", 100], "--update-rate updates the --params-name table"),
                (["--params-name", "emb", "--update-rate", 100, "--update-rows", 301],
                 r"--update-rows: .*\[1, 300\]")):
            with self.subTest(args=args):
                proc = run_cli("load", "--target", self.server.target, "--duration", 0.2,
                               *args)
                self.assertExit(proc, EXIT_USAGE)
                self.assertErrorLine(proc, pattern)


if __name__ == "__main__":
    unittest.main()
