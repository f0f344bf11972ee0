// File: core/gather_plan.h
//
// Validation of a Gather or GatherNd request and its reduction to the one form that every
// kernel (CPU or CUDA) executes. All user-visible error text of the gather operations is
// written in this file's .cc: the kernels report only positions, and BadIndexError() turns a
// position into words, so the CPU and the GPU say exactly the same thing.
//
// Semantics implemented, as documented at
//   https://www.tensorflow.org/api_docs/python/tf/gather
//   https://www.tensorflow.org/api_docs/python/tf/gather_nd
//   https://onnx.ai/onnx/operators/onnx__Gather.html
//   https://onnx.ai/onnx/operators/onnx__GatherND.html
//   Gather   = tf.gather(params, indices, axis, batch_dims) = ONNX Gather-13 when
//              batch_dims == 0. Negative axis counts from params' rank; negative batch_dims
//              from indices' rank; an unset axis means batch_dims. Output shape
//              params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis+1:].
//   GatherNd = tf.gather_nd(params, indices, batch_dims) = ONNX GatherND-13. The last
//              dimension of indices is the index depth, 1 <= depth <= rank(params) - b.
//              Output shape indices.shape[:-1] + params.shape[b + depth:].
//   Index values in [-s, -1] count from the end of a dimension of size s; any value outside
//   [-s, s) is INVALID_ARGUMENT (found by the kernels, in the same pass as the copy).
// Thread-safety: pure functions over caller-owned views.

#ifndef TENSORCOMPUTE_CORE_GATHER_PLAN_H_
#define TENSORCOMPUTE_CORE_GATHER_PLAN_H_

#include <cstdint>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::core {

enum class GatherOp { kGather, kGatherNd };

struct PlanOptions {
  // Largest output accepted, in bytes (for strings: the string bytes plus
  // kStringElementOverhead per element). Larger requests fail with RESOURCE_EXHAUSTED
  // before anything is allocated. Default 1 GiB.
  int64_t max_output_bytes = int64_t{1} << 30;

  // Highest rank accepted for params and indices; higher ranks are INVALID_ARGUMENT.
  // Default 32 (TensorFlow's kernels are tested to 8 or so; ONNX sets no limit).
  int64_t max_rank = 32;
};

// What one output string costs against max_output_bytes besides its characters.
inline constexpr int64_t kStringElementOverhead = 32;

// A validated request in the [batch, outer, rows, slice] form of core/index_math.h.
struct GatherPlan {
  GatherOp op = GatherOp::kGather;
  DataType dtype = DataType::kUnspecified;        // params' and the output's dtype
  DataType index_dtype = DataType::kUnspecified;  // kInt32 or kInt64
  int64_t element_size = 0;                       // bytes; 0 for strings

  Shape output_shape;
  int64_t output_elements = 0;
  // Bytes of output data; for strings, output_elements * kStringElementOverhead (the string
  // bytes are known only once the indices are read; ExecuteGather checks them).
  int64_t output_bytes = 0;
  int64_t max_output_bytes = 0;  // PlanOptions::max_output_bytes, for string execution

  int64_t batch = 1;        // product of the batch dimensions
  int64_t outer = 1;        // Gather: product of params dims [batch_dims, axis); GatherNd: 1
  int64_t num_indices = 0;  // index tuples per batch
  int64_t depth = 1;        // components per index tuple (1 for Gather)
  int64_t rows = 1;         // product of the indexed params dimensions
  int64_t slice = 1;        // elements per gathered slice (product of the trailing dims)
  absl::InlinedVector<int64_t, 4> index_dims;  // sizes of the `depth` indexed dimensions
  int64_t indexed_axis = 0;  // params dimension of the first index component (axis, or b)

  Shape indices_shape;  // kept for error messages

  // Output rows: batch * outer * num_indices. Index values: batch * num_indices * depth.
  int64_t output_rows() const { return batch * outer * num_indices; }
  int64_t num_index_values() const { return batch * num_indices * depth; }
  int64_t slice_bytes() const { return slice * element_size; }
};

// Validates a Gather request and plans it. `axis` unset means batch_dims (after
// normalisation). Returns the plan, or:
//   INVALID_ARGUMENT for a malformed tensor (ValidateTensor), non-integer indices, a scalar
//     params, axis outside [-rank(params), rank(params)), batch_dims outside
//     [-rank(indices), rank(indices)], batch_dims >= rank(params) or > axis, batch dimensions
//     that differ between params and indices;
//   RESOURCE_EXHAUSTED when the output would exceed options.max_output_bytes.
// Index values are not read here.
absl::StatusOr<GatherPlan> PlanGather(const TensorView& params, const TensorView& indices,
                                      std::optional<int64_t> axis, int64_t batch_dims,
                                      const PlanOptions& options = {});

// Validates a GatherNd request and plans it. Returns the plan, or:
//   INVALID_ARGUMENT for a malformed tensor, non-integer indices, a scalar params or
//     indices, batch_dims outside [0, min(rank(params), rank(indices))), batch dimensions
//     that differ, an index depth (indices.shape[-1]) outside [1, rank(params) - batch_dims];
//   RESOURCE_EXHAUSTED when the output would exceed options.max_output_bytes.
absl::StatusOr<GatherPlan> PlanGatherNd(const TensorView& params, const TensorView& indices,
                                        int64_t batch_dims, const PlanOptions& options = {});

// The INVALID_ARGUMENT for the bad index value at flat position `position` of `indices`
// (as the kernels report it), e.g. "indices[1,0] = 7 is not in [-3, 3)".
// REQUIRES: `plan` was made from `indices`; 0 <= position < plan.num_index_values().
absl::Status BadIndexError(const GatherPlan& plan, const TensorView& indices, int64_t position);

// The RESOURCE_EXHAUSTED for an output of `bytes` over the cap `max_bytes`.
absl::Status OutputTooLargeError(int64_t bytes, int64_t max_bytes);

// The RESOURCE_EXHAUSTED for a planned output of `shape` that needs `bytes` (nullopt: more
// than 2^63) over the cap `max_bytes`: "output of shape [..] needs N bytes, over the limit of
// M bytes (max_output_bytes)".
absl::Status OutputShapeTooLargeError(const Shape& shape, std::optional<int64_t> bytes,
                                      int64_t max_bytes);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_GATHER_PLAN_H_
