// File: core/index_math.h
//
// The index arithmetic of Gather and GatherNd as small inline functions that compile for the
// host and, under nvcc, for the device (TC_HOST_DEVICE), so the CUDA kernels use exactly the
// arithmetic that the CPU kernels use and that the CPU unit tests check.
//
// Every gather is reduced to one form (see GatherPlan):
//   params  [batch, outer, rows, slice]   rows = product of the indexed dimensions
//   indices [batch, num_indices, depth]   depth = 1 for Gather, index depth for GatherNd
//   output  [batch, outer, num_indices, slice]
// An output row r (0 <= r < batch*outer*num_indices) copies `slice` elements from block
// (b, o) of params (DecomposeOutputRow), at the row its index tuple names (NormalizeIndex and
// AccumulateRow over the tuple's components; ParamsSliceOffset). Pure functions; thread-safe.

#ifndef TENSORCOMPUTE_CORE_INDEX_MATH_H_
#define TENSORCOMPUTE_CORE_INDEX_MATH_H_

#include <cstdint>

#include "core/host_device.h"

namespace tensorcompute::core {

// Maps an index value v in [-dim, dim) to [0, dim) (negative values count from the end, as
// ONNX does) and stores it in *out. Returns false, leaving *out unchanged, when v is outside
// [-dim, dim): never reads or wraps further. Safe for every int64 v and dim >= 0.
TC_HOST_DEVICE inline bool NormalizeIndex(int64_t v, int64_t dim, int64_t* out) {
  // v + dim cannot overflow: dim >= 0 and the addition only happens when v < 0.
  const int64_t w = v < 0 ? v + dim : v;
  if (w < 0 || w >= dim) return false;
  *out = w;
  return true;
}

// Where output row r comes from and which index tuple it uses.
struct RowSource {
  int64_t block;  // b * outer + o: which [rows, slice] block of params
  int64_t tuple;  // b * num_indices + n: which index tuple of indices
};

// Decomposes output row r of the [batch, outer, num_indices] row space.
// REQUIRES: outer >= 1, num_indices >= 1, 0 <= r < batch * outer * num_indices.
TC_HOST_DEVICE inline RowSource DecomposeOutputRow(int64_t r, int64_t outer, int64_t num_indices) {
  const int64_t n = r % num_indices;
  const int64_t bo = r / num_indices;  // b * outer + o
  const int64_t b = bo / outer;
  return RowSource{bo, b * num_indices + n};
}

// Flat element offset in params of the first element of row `row` of block `block`.
TC_HOST_DEVICE inline int64_t ParamsSliceOffset(int64_t block, int64_t rows, int64_t row,
                                                int64_t slice) {
  return (block * rows + row) * slice;
}

// Folds one normalised index component into a row number: row * dim + component.
// Applied for each of the `depth` components in order, starting from row = 0, it gives the
// row-major row of a GatherNd tuple within its block (and the index itself for depth 1).
TC_HOST_DEVICE inline int64_t AccumulateRow(int64_t row, int64_t dim, int64_t component) {
  return row * dim + component;
}

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_INDEX_MATH_H_
