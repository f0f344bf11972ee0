// File: core/compact_row.h
//
// How a compact table's row is read back as float32 (core/table_storage.h stores them): small
// TC_HOST_DEVICE readers that the CPU kernels (core/embedding_bag_kernels.cc) and the CUDA
// kernel (core/cuda/bag_unit.h) share, so both dequantize with the same operations.
//
//   TableEncoding::kNone      params are stored as their own dtype (no conversion).
//   TableEncoding::kFloat16   a float32 table stored as IEEE float16 [rows, dim]: element d is
//                             HalfToFloat(stored[d]), exact.
//   TableEncoding::kRowwise8  FBGEMM's fused 8-bit row-wise layout, uint8 [rows, dim + 8]:
//                             `dim` codes, then the row's float32 scale and float32 bias
//                             (little-endian). Element d is code[d] * scale + bias, the product
//                             and the sum each rounded to float32 (never a fused multiply-add:
//                             the build passes -ffp-contract=off, nvcc --fmad=false), so anyone
//                             with the formula reproduces the bits. The layout and the
//                             quantization formula are FBGEMM's reference ones
//                             (FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef in
//   https://github.com/pytorch/FBGEMM/blob/main/src/QuantUtils.cc).
//
// Pure functions; thread-safe.

#ifndef TENSORCOMPUTE_CORE_COMPACT_ROW_H_
#define TENSORCOMPUTE_CORE_COMPACT_ROW_H_

#include <cstdint>
#include <cstring>

#include "core/half_float.h"
#include "core/host_device.h"

namespace tensorcompute::core {

// What the bytes of a table's rows hold (see the file comment). The numbers are stable.
enum class TableEncoding : uint8_t { kNone = 0, kFloat16 = 1, kRowwise8 = 2 };

// The bytes after a kRowwise8 row's codes: its float32 scale, then its float32 bias.
inline constexpr int64_t kRowwise8Trailer = 8;

// Bytes of one stored row of `dim` logical elements of `encoding` (kNone: `element_size` each).
TC_HOST_DEVICE inline int64_t StoredRowBytes(TableEncoding encoding, int64_t dim,
                                             int64_t element_size) {
  switch (encoding) {
    case TableEncoding::kFloat16:
      return dim * 2;
    case TableEncoding::kRowwise8:
      return dim + kRowwise8Trailer;
    case TableEncoding::kNone:
      break;
  }
  return dim * element_size;
}

// One dequantized element: code * scale, rounded, + bias, rounded.
TC_HOST_DEVICE inline float DequantizeRowwise8(uint8_t code, float scale, float bias) {
  const float scaled = static_cast<float>(code) * scale;
  return scaled + bias;
}

// A kRowwise8 row: the scale and bias are read once, then each element by its code.
struct Rowwise8Row {
  using Acc = float;
  const uint8_t* codes;
  float scale;
  float bias;
  TC_HOST_DEVICE Rowwise8Row(const uint8_t* row, int64_t dim) : codes(row) {
    std::memcpy(&scale, row + dim, 4);
    std::memcpy(&bias, row + dim + 4, 4);
  }
  TC_HOST_DEVICE float operator[](int64_t d) const {
    return DequantizeRowwise8(codes[d], scale, bias);
  }
};

// A row of elements stored as `Elem` (embedding_bag_math.h's Float16Elem, BFloat16Elem,
// NativeElem<T>), read as Elem::Acc.
template <typename Elem>
struct PlainRow {
  using Acc = typename Elem::Acc;
  const uint8_t* p;
  TC_HOST_DEVICE PlainRow(const uint8_t* row, int64_t /*dim*/) : p(row) {}
  TC_HOST_DEVICE Acc operator[](int64_t d) const { return Elem::Load(p + d * Elem::kSize); }
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_COMPACT_ROW_H_
