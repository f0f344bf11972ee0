// File: core/shape.h
//
// Shapes are small vectors of int64 dimensions (row-major; empty = scalar). This file has the
// overflow-checked arithmetic on them and their text form as error messages print it.
// Pure functions; thread-safe.

#ifndef TENSORCOMPUTE_CORE_SHAPE_H_
#define TENSORCOMPUTE_CORE_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace tensorcompute::core {

// A tensor shape. Inline storage covers ranks up to 8 without a heap allocation.
using Shape = absl::InlinedVector<int64_t, 8>;

// Returns a * b, or nullopt if it overflows int64. REQUIRES: a >= 0, b >= 0.
std::optional<int64_t> CheckedMul(int64_t a, int64_t b);

// Returns the product of `dims` (1 for a scalar), or nullopt if a dimension is negative or
// the product of the nonzero dimensions overflows int64. (Zero dimensions count as 1 for the
// overflow test, so that every sub-range of an accepted shape has a product that fits:
// [0, 2^62, 4] is rejected although it has no elements.)
std::optional<int64_t> CheckedNumElements(absl::Span<const int64_t> dims);

// Returns the product of dims[begin, end) without checks.
// REQUIRES: CheckedNumElements(dims) succeeded, so no sub-range product overflows.
int64_t Product(absl::Span<const int64_t> dims, size_t begin, size_t end);

// "[2,3,4]"; "[]" for a scalar.
std::string ShapeToString(absl::Span<const int64_t> dims);

// The multi-index of row-major flat position `flat` within `dims`, as "[1,0]"
// ("" for a scalar, so that "indices" + result reads "indices").
// REQUIRES: 0 <= flat < product(dims), or dims empty.
std::string FlatPositionToString(int64_t flat, absl::Span<const int64_t> dims);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_SHAPE_H_
