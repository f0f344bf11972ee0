"""NumPy references of the compact storage kinds (tensorcompute.proto, TableStorage), in
float32 as the server computes them, for the end-to-end tests.

quantize_rowwise8 is FBGEMM's reference formula for its fused 8-bit row-wise layout
(FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef, https://github.com/pytorch/FBGEMM, file
src/QuantUtils.cc): per row bias = min, scale = (max - min) / 255,
code = rint((x - bias) * (255 / (max - min + 1e-8))), each row's codes followed by its float32
scale and bias. dequantize_rowwise8 reads code * scale + bias, the product and the sum each
rounded to float32 (NumPy never fuses them).
"""

import numpy as np

F32 = np.float32


def quantize_rowwise8(table):
    """uint8 [rows, dim + 8] from a float32 [rows, dim] table of finite values."""
    table = np.ascontiguousarray(table, dtype=F32)
    rows, dim = table.shape
    # The first minimum and maximum in row order (argmin/argmax return the first), so that of
    # -0 and +0 the one met first is the bias, as std::min_element gives.
    lo = table[np.arange(rows), np.argmin(table, axis=1)] if dim else np.zeros(rows, F32)
    hi = table[np.arange(rows), np.argmax(table, axis=1)] if dim else np.zeros(rows, F32)
    width = (hi - lo).astype(F32)
    scale = (width / F32(255)).astype(F32)
    inverse = (F32(255) / (width + F32(1e-8))).astype(F32)
    scaled = ((table - lo[:, None]).astype(F32) * inverse[:, None]).astype(F32)
    codes = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)  # rint: ties to even, as lrintf
    trailer = np.stack([scale, lo], axis=1).astype("<f4").view(np.uint8)
    return np.concatenate([codes, trailer], axis=1)


def dequantize_rowwise8(fused):
    """The float32 [rows, dim] table that fused rows mean."""
    fused = np.ascontiguousarray(fused, dtype=np.uint8)
    trailer = np.ascontiguousarray(fused[:, -8:]).view("<f4").astype(F32)
    scale, bias = trailer[:, 0:1], trailer[:, 1:2]
    product = (fused[:, :-8].astype(F32) * scale).astype(F32)
    return (product + bias).astype(F32)


def float16_meaning(table):
    """The float32 table that FLOAT16 storage holds: each value rounded to float16 (nearest
    even) and back, exactly."""
    return np.asarray(table, dtype=F32).astype(np.float16).astype(F32)


def float16_overflows(table):
    """Whether a finite value of `table` would become an infinity in float16."""
    table = np.asarray(table, dtype=F32)
    with np.errstate(over="ignore"):
        return bool((np.isinf(table.astype(np.float16)) & np.isfinite(table)).any())


def random_compact_table(rng, rows, dim):
    """A float32 [rows, dim] table with what the kinds must get right: constant rows, zeros of
    both signs, float32's extremes (one sign per row, so a row's width stays finite), tiny and
    wide spreads. Returns (table, rows within float16's range)."""
    table = np.empty((rows, dim), F32)
    for r in range(rows):
        kind = rng.integers(0, 8)
        if kind == 0:
            row = np.full(dim, rng.standard_normal() * 100, F32)
        elif kind == 1:
            row = np.where(rng.random(dim) < 0.5, F32(-0.0), F32(0.0)).astype(F32)
        elif kind == 2:
            row = np.where(rng.random(dim) < 0.3, np.finfo(F32).max,
                           rng.random(dim) * 1000).astype(F32)
        elif kind == 3:
            row = np.where(rng.random(dim) < 0.3, -np.finfo(F32).max,
                           -rng.random(dim) * 1000).astype(F32)
        elif kind == 4:
            row = (rng.standard_normal(dim) * 1e-6).astype(F32)
        else:
            row = (rng.standard_normal(dim) * 10).astype(F32)
        table[r] = row
    return table
