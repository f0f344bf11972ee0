// File: core/embedding_bag_simd.h
//
// EmbeddingBag's vector kernel (see core/embedding_bag_kernels.h, which chooses it): on an
// x86-64 CPU with AVX2, FMA and F16C, a bag's accumulator is held in 32-byte registers (8
// float lanes for float16, bfloat16 and float32 params, 4 double lanes for float64) while its
// rows are read, up to 8 registers (256 bytes) at a time; a wider row is reduced in passes of
// that many registers, each pass reading the bag's rows again (from cache after the first).
// Accumulating in memory, as the generic kernel does, makes each row a chain of loads and
// stores that holds the misses in flight back: this is what lets a pooled lookup read random
// rows at least as fast as a gather copies them (docs/performance.md, "Pooled lookups").
//
// Each lane runs embedding_bag_math.h's operations in the same order (an add; one fma for a
// weighted term, built with -ffp-contract=off so that no other multiply-add is fused; MAX's
// strict compare; one division by the same divisor; CanonicalNan; one rounding to the stored
// type), so the bytes are the generic kernel's.
//
// Thread-safety: as core/embedding_bag_kernels.h.

#ifndef TENSORCOMPUTE_CORE_EMBEDDING_BAG_SIMD_H_
#define TENSORCOMPUTE_CORE_EMBEDDING_BAG_SIMD_H_

#include <cstdint>

#include "core/embedding_bag.h"
#include "core/embedding_bag_kernels.h"

namespace tensorcompute::core {

// Whether this CPU and `plan` can use the vector kernel (any encoding, pooled or unpooled):
// AVX2, FMA and F16C present; dim > 0
// a multiple of the lanes (8, or 4 for float64); the accumulator row at most
// kMaxVectorAccumulatorBytes.
bool BagVectorKernelServes(const EmbeddingBagPlan& plan);

// Beyond this many accumulator bytes per row (dim x 4, or x 8 for float64), the generic
// kernel's one pass over each row is as fast as the vector kernel's many (measured with
// embedding_bag_bench's BM_EmbeddingBagKernel, float32, bags of 32: the vector kernel 2.2x
// the generic at dim 64, 1.2x at 512, 1.1x at 1024, 0.96x at 2048).
inline constexpr int64_t kMaxVectorAccumulatorBytes = 4096;

// ReduceBags with the vector kernel (same contract).
// REQUIRES: BagVectorKernelServes(plan).
int64_t ReduceBagsVector(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin,
                         int64_t end, bool streaming);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_EMBEDDING_BAG_SIMD_H_
