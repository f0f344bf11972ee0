// File: tests/testing/reference_gather.h
//
// The slow twin of core's Gather and GatherNd (STYLE.md section 14): written straight from the
// published definitions (https://www.tensorflow.org/api_docs/python/tf/gather,
// https://www.tensorflow.org/api_docs/python/tf/gather_nd,
// https://onnx.ai/onnx/operators/onnx__Gather.html and
// https://onnx.ai/onnx/operators/onnx__GatherND.html, opset 13), one output element at a time. For
// every output multi-index it computes the params multi-index and copies that element: bytes by
// ElementSize() for fixed-size types, strings by value. It deliberately shares nothing with core's
// GatherPlan or index_math.h, so a mistake there cannot hide in both.
//
// It is meant for valid requests (plus out-of-range index values) and validates little else;
// callers pass shapes that satisfy the operators' rules.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_TESTS_TESTING_REFERENCE_GATHER_H_
#define TENSORCOMPUTE_TESTS_TESTING_REFERENCE_GATHER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#include "core/shape.h"
#include "core/tensor.h"
#include "tests/testing/random_tensor.h"

namespace tensorcompute::testing {

// output[p_0..p_{axis-1}, i_b..i_{q-1}, p_{axis+1}..] =
//   params[p_0..p_{axis-1}, indices[p_0..p_{b-1}, i_b..i_{q-1}], p_{axis+1}..]
// Negative batch_dims counts from rank(indices), negative axis from rank(params); an unset
// axis means batch_dims. Returns the output, or INVALID_ARGUMENT naming the lowest flat
// position of indices whose value is outside [-s, s), as
// "indices[i,j] = v is not in [-s, s)" ("indices = v ..." for scalar indices).
// REQUIRES: a valid request apart from index values.
absl::StatusOr<core::Tensor> ReferenceGather(const core::TensorView& params,
                                             const core::TensorView& indices,
                                             std::optional<int64_t> axis, int64_t batch_dims);

// output[b_0..b_{B-1}, i_B..i_{q-2}, t..] =
//   params[b_0..b_{B-1}, indices[b_0..b_{B-1}, i_B..i_{q-2}, 0..depth-1], t..]
// with depth = indices.shape[-1]. Errors as ReferenceGather.
// REQUIRES: a valid request apart from index values; batch_dims >= 0.
absl::StatusOr<core::Tensor> ReferenceGatherNd(const core::TensorView& params,
                                               const core::TensorView& indices, int64_t batch_dims);

// The value at row-major flat position `position` of an int32 or int64 tensor, as int64.
int64_t ReadIndexValue(const core::TensorView& indices, int64_t position);

// The out-of-range message exactly as the operators must word it:
// "indices[1,0] = 7 is not in [-3, 3)", or "indices = 7 is not in [-3, 3)" for a scalar.
std::string ExpectedBadIndexMessage(const core::Shape& indices_shape, int64_t position,
                                    int64_t value, int64_t dim);

// Runs `request` (see random_tensor.h) through ReferenceGather or ReferenceGatherNd.
absl::StatusOr<core::Tensor> RunReference(const GatherRequest& request);

// Success if `actual` (core's answer) agrees with `expected` (the reference's): identical
// tensors (IdenticalTensors), or both INVALID_ARGUMENT with the same message. Where the
// indexed dimension has size 0 (reference message "... is not in [-0, 0)"), core may word the
// rest differently, but must start with the same "indices[i,j] = v is ".
::testing::AssertionResult AgreesWithReference(const absl::StatusOr<core::Tensor>& actual,
                                               const absl::StatusOr<core::Tensor>& expected);

// A short text form of a tensor for failure messages: dtype, shape and up to 64 values
// (integers and bools as numbers, floats as their bit patterns in hex, strings quoted).
std::string TensorDebugString(const core::TensorView& t);

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_REFERENCE_GATHER_H_
