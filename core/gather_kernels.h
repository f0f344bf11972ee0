// File: core/gather_kernels.h
//
// The CPU copy loops behind ExecuteGather (core/gather.h), over a range of output rows of a
// GatherPlan's [batch, outer, num_indices] row space. They dispatch on element size (1, 2, 4,
// 8, 16 bytes; strings separately), never on dtype, and report only positions: the lowest
// flat position of `indices` holding an out-of-range value. BadIndexError() (gather_plan.h)
// writes the words.
//
// Thread-safety: calls on disjoint row ranges of the same output may run concurrently.
// REQUIRES of every function: `plan` was made from `params` and `indices`; `output` matches
// the plan (see ExecuteGather); 0 <= begin <= end <= the stated range.

#ifndef TENSORCOMPUTE_CORE_GATHER_KERNELS_H_
#define TENSORCOMPUTE_CORE_GATHER_KERNELS_H_

#include <cstdint>

#include "core/gather_plan.h"
#include "core/tensor.h"

namespace tensorcompute::core {

// Copies output rows [begin, end) (of plan.output_rows()), checking each index value read.
// With `streaming`, full 16-byte-aligned slices are written with non-temporal stores (the
// caller issues no fence; GatherRows does before returning).
// Returns -1 if every index met was in range, else the flat position in `indices` of the first
// bad value met (rows before it are written, rows after it are not).
// REQUIRES: plan.slice > 0 (nothing to copy otherwise: use CheckIndexTuples).
int64_t GatherRows(const GatherPlan& plan, const TensorView& params, const TensorView& indices,
                   const MutableTensorView& output, int64_t begin, int64_t end, bool streaming);

// Checks index tuples [begin, end) (of plan.batch * plan.num_indices) without copying.
// Returns -1 or the lowest flat position in `indices` holding an out-of-range value.
int64_t CheckIndexTuples(const GatherPlan& plan, const TensorView& indices, int64_t begin,
                         int64_t end);

// For a kString plan: adds up the bytes of the strings that output rows [begin, end) will
// copy. Returns -1 and stores the sum in *bytes, or returns the first bad position as
// CheckIndexTuples does (for the tuples these rows use).
int64_t StringRowBytes(const GatherPlan& plan, const TensorView& params, const TensorView& indices,
                       int64_t begin, int64_t end, int64_t* bytes);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_GATHER_KERNELS_H_
