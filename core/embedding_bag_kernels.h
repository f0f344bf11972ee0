// File: core/embedding_bag_kernels.h
//
// The CPU reduction loops behind ExecuteEmbeddingBag (core/embedding_bag.h), over a range of
// the bags of a validated plan. Two kernels write the same bytes for every input:
//   - the generic kernel, for any dtype and dim: a bag's accumulator row in memory, each
//     element computed with embedding_bag_math.h's functions;
//   - the vector kernel (core/embedding_bag_simd.h), on a CPU with AVX2, FMA and F16C, for rows
//     whose accumulator is a whole number of 32-byte vectors: up to 8 of them (256 bytes) held
//     in registers while the bag's rows are read, a row that is wider being reduced in
//     several such passes. Each lane runs the same IEEE operations in the same order, so the
//     bytes do not change with the kernel.
// Both report only positions: the flat position in indices of the first out-of-range value
// met; EmbeddingBagBadIndexError (embedding_bag.h) writes the words.
//
// Thread-safety: calls on disjoint bag ranges of one output may run concurrently.
// REQUIRES of every function: `plan` was made (PlanEmbeddingBag) from the views in `views`;
// the output holds plan.output_bytes; 0 <= begin <= end <= plan.bags.

#ifndef TENSORCOMPUTE_CORE_EMBEDDING_BAG_KERNELS_H_
#define TENSORCOMPUTE_CORE_EMBEDDING_BAG_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/embedding_bag.h"
#include "core/embedding_bag_math.h"

namespace tensorcompute::core {

// The raw bytes of one request's views.
struct BagViews {
  const uint8_t* params = nullptr;
  const uint8_t* indices = nullptr;
  const uint8_t* offsets = nullptr;  // null for fixed bags
  int64_t num_offsets = 0;
  const uint8_t* weights = nullptr;  // null when unweighted
  uint8_t* output = nullptr;
};

// Which kernel ReduceBags runs: the fastest one that serves the plan on this CPU, or the
// generic one (tests compare the two).
enum class BagKernel { kBest, kGeneric };

// Reduces bags [begin, end) into their output rows. With `streaming`, the vector kernel writes
// with non-temporal stores (and fences before returning); it is only honoured when the output
// is 32-byte aligned.
// Returns -1 if every index met was in range, else the flat position of the first bad value
// met (bags before its bag are written; its own bag and later ones are not).
int64_t ReduceBags(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin, int64_t end,
                   bool streaming, BagKernel kernel = BagKernel::kBest);

// --- shared by the kernels' .cc files ---

// Views may point anywhere (request bytes), so every value is loaded with memcpy, which the
// compiler turns into a plain load.
inline int64_t LoadIndex(const uint8_t* data, DataType dtype, int64_t i) {
  if (dtype == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, data + i * sizeof(v), sizeof(v));
    return v;
  }
  int64_t v;
  std::memcpy(&v, data + i * sizeof(v), sizeof(v));
  return v;
}

// Bag b's index positions [first, last).
inline BagSpan BagRange(const EmbeddingBagPlan& plan, const BagViews& v, int64_t b) {
  return BagBounds(b, v.offsets == nullptr, plan.bag_size, v.num_offsets, plan.num_indices,
                   [&](int64_t i) { return LoadIndex(v.offsets, plan.offsets_dtype, i); });
}

// How far ahead (in index positions) rows are prefetched: the distances and the L2 hint of
// the gather kernels' small slices (core/gather_kernels.cc, docs/performance.md "Small rows"),
// since random rows are bound by how many misses are in flight; long rows are sequential reads
// that the hardware prefetcher already follows.
inline int64_t RowPrefetchDistance(int64_t row_bytes) {
  if (row_bytes <= 0) return 0;
  if (row_bytes <= 64) return 32;
  if (row_bytes <= 256) return 16;
  if (row_bytes <= 4096) return 4;
  return 0;
}

inline void PrefetchRow(const uint8_t* p, int64_t bytes) {
  const int64_t n = std::min<int64_t>(bytes, 2048);
  for (int64_t off = 0; off < n; off += 64) __builtin_prefetch(p + off, 0, 2);
  __builtin_prefetch(p + n - 1, 0, 2);
}

// How a bag's rows go into the accumulator: kWeighted (fma with the row's weight), kMax, or
// kPlain (a sum, for SUM, MEAN and SQRTN without weights).
enum class Reduce { kPlain, kWeighted, kMax };

inline Reduce ReduceOf(const EmbeddingBagPlan& plan) {
  if (plan.weighted()) return Reduce::kWeighted;
  return plan.mode == EmbeddingBagMode::kMax ? Reduce::kMax : Reduce::kPlain;
}

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_EMBEDDING_BAG_KERNELS_H_
