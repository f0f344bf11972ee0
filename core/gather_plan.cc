#include "core/gather_plan.h"

#include <algorithm>
#include <cstring>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

// Checks what both operations require of their two inputs.
absl::Status ValidateInputs(const TensorView& params, const TensorView& indices,
                            absl::string_view op, const PlanOptions& options) {
  TC_RETURN_IF_ERROR(ValidateTensor(params, "params", options.max_rank));
  TC_RETURN_IF_ERROR(ValidateTensor(indices, "indices", options.max_rank));
  if (!IsIndexType(indices.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices must be int32 or int64, got ", DataTypeName(indices.dtype)));
  }
  if (params.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": params must have rank >= 1, got a scalar"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatchDimsMatch(const TensorView& params, const TensorView& indices, int64_t b) {
  for (int64_t i = 0; i < b; ++i) {
    if (params.shape[i] != indices.shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch dimensions differ: params.shape[", i, "] = ", params.shape[i],
          " but indices.shape[", i, "] = ", indices.shape[i], "; the first batch_dims = ", b,
          " dimensions must be equal (params shape ", ShapeToString(params.shape),
          ", indices shape ", ShapeToString(indices.shape), ")"));
    }
  }
  return absl::OkStatus();
}

// Fills the output size fields and applies the output cap.
absl::Status FinishPlan(GatherPlan& plan, const PlanOptions& options) {
  const std::optional<int64_t> elements = CheckedNumElements(plan.output_shape);
  if (!elements && absl::c_linear_search(plan.output_shape, int64_t{0})) {
    // No elements, so "too many elements" would be wrong; refused all the same, since the
    // plan's products (GatherPlan::output_rows()) must not overflow.
    return absl::ResourceExhaustedError(absl::StrCat(
        "output shape ", ShapeToString(plan.output_shape),
        ": the product of its nonzero dimensions must fit in int64, even though a dimension is 0 "
        "(the output is empty)"));
  }
  if (!elements) {
    return absl::ResourceExhaustedError(
        absl::StrCat("output shape ", ShapeToString(plan.output_shape),
                     " has too many elements (more than 2^63); the limit is ",
                     options.max_output_bytes, " bytes (max_output_bytes)"));
  }
  plan.output_elements = *elements;
  plan.max_output_bytes = options.max_output_bytes;
  const int64_t per_element =
      plan.dtype == DataType::kString ? kStringElementOverhead : plan.element_size;
  const std::optional<int64_t> bytes = CheckedMul(*elements, per_element);
  if (!bytes || *bytes > options.max_output_bytes) {
    return OutputShapeTooLargeError(plan.output_shape, bytes, options.max_output_bytes);
  }
  plan.output_bytes = *bytes;
  return absl::OkStatus();
}

GatherPlan NewPlan(GatherOp op, const TensorView& params, const TensorView& indices) {
  GatherPlan plan;
  plan.op = op;
  plan.dtype = params.dtype;
  plan.index_dtype = indices.dtype;
  plan.element_size = static_cast<int64_t>(ElementSize(params.dtype));
  plan.indices_shape = indices.shape;
  return plan;
}

}  // namespace

absl::StatusOr<GatherPlan> PlanGather(const TensorView& params, const TensorView& indices,
                                      std::optional<int64_t> axis, int64_t batch_dims,
                                      const PlanOptions& options) {
  TC_RETURN_IF_ERROR(ValidateInputs(params, indices, "Gather", options));
  const int64_t prank = params.rank();
  const int64_t irank = indices.rank();
  if (axis && (*axis < -prank || *axis >= prank)) {
    return absl::InvalidArgumentError(absl::StrCat("axis = ", *axis, " is not in [", -prank, ", ",
                                                   prank, ") for params of rank ", prank));
  }
  if (batch_dims < -irank || batch_dims > irank) {
    return absl::InvalidArgumentError(absl::StrCat("batch_dims = ", batch_dims, " is not in [",
                                                   -irank, ", ", irank, "] for indices of rank ",
                                                   irank));
  }
  const int64_t b = batch_dims < 0 ? batch_dims + irank : batch_dims;
  if (b >= prank) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_dims = ", batch_dims, " must be less than rank(params) = ", prank));
  }
  const int64_t ax = !axis ? b : (*axis < 0 ? *axis + prank : *axis);
  if (ax < b) {
    return absl::InvalidArgumentError(absl::StrCat("axis = ", *axis, " must be >= batch_dims = ", b,
                                                   " (the batch dimensions cannot be gathered)"));
  }
  TC_RETURN_IF_ERROR(CheckBatchDimsMatch(params, indices, b));

  GatherPlan plan = NewPlan(GatherOp::kGather, params, indices);
  const Shape& ps = params.shape;
  plan.output_shape.assign(ps.begin(), ps.begin() + ax);
  plan.output_shape.insert(plan.output_shape.end(), indices.shape.begin() + b, indices.shape.end());
  plan.output_shape.insert(plan.output_shape.end(), ps.begin() + ax + 1, ps.end());
  TC_RETURN_IF_ERROR(FinishPlan(plan, options));

  plan.batch = Product(ps, 0, b);
  plan.outer = Product(ps, b, ax);
  plan.num_indices = Product(indices.shape, b, irank);
  plan.depth = 1;
  plan.rows = ps[ax];
  plan.slice = Product(ps, ax + 1, prank);
  plan.index_dims = {ps[ax]};
  plan.indexed_axis = ax;
  return plan;
}

absl::StatusOr<GatherPlan> PlanGatherNd(const TensorView& params, const TensorView& indices,
                                        int64_t batch_dims, const PlanOptions& options) {
  TC_RETURN_IF_ERROR(ValidateInputs(params, indices, "GatherNd", options));
  const int64_t prank = params.rank();
  const int64_t irank = indices.rank();
  if (irank == 0) {
    return absl::InvalidArgumentError(
        "GatherNd: indices must have rank >= 1 (its last dimension is the index depth), got "
        "a scalar");
  }
  const int64_t max_b = std::min(prank, irank);
  if (batch_dims < 0 || batch_dims >= max_b) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_dims = ", batch_dims, " is not in [0, ", max_b, ") for params of rank ", prank,
        " and indices of rank ", irank, " (batch_dims < min(rank(params), rank(indices)))"));
  }
  const int64_t b = batch_dims;
  TC_RETURN_IF_ERROR(CheckBatchDimsMatch(params, indices, b));
  const int64_t depth = indices.shape[irank - 1];
  if (depth < 1 || depth > prank - b) {
    return absl::InvalidArgumentError(
        absl::StrCat("index depth indices.shape[-1] = ", depth, " is not in [1, ", prank - b,
                     "] (rank(params) - batch_dims = ", prank, " - ", b, "); indices shape ",
                     ShapeToString(indices.shape), ", params shape ", ShapeToString(params.shape)));
  }

  GatherPlan plan = NewPlan(GatherOp::kGatherNd, params, indices);
  const Shape& ps = params.shape;
  plan.output_shape.assign(indices.shape.begin(), indices.shape.end() - 1);
  plan.output_shape.insert(plan.output_shape.end(), ps.begin() + b + depth, ps.end());
  TC_RETURN_IF_ERROR(FinishPlan(plan, options));

  plan.batch = Product(ps, 0, b);
  plan.outer = 1;
  plan.num_indices = Product(indices.shape, b, irank - 1);
  plan.depth = depth;
  plan.rows = Product(ps, b, b + depth);
  plan.slice = Product(ps, b + depth, prank);
  plan.index_dims.assign(ps.begin() + b, ps.begin() + b + depth);
  plan.indexed_axis = b;
  return plan;
}

absl::Status BadIndexError(const GatherPlan& plan, const TensorView& indices, int64_t position) {
  int64_t value;
  if (plan.index_dtype == DataType::kInt32) {
    int32_t v32;
    std::memcpy(&v32, indices.data.data() + position * sizeof(int32_t), sizeof(v32));
    value = v32;
  } else {
    std::memcpy(&value, indices.data.data() + position * sizeof(int64_t), sizeof(value));
  }
  const int64_t k = position % plan.depth;
  const int64_t dim = plan.index_dims[k];
  const std::string where =
      absl::StrCat("indices", FlatPositionToString(position, plan.indices_shape), " = ", value);
  if (dim == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is out of range: params dimension ",
                                                   plan.indexed_axis + k,
                                                   " has size 0, so no index is valid"));
  }
  return absl::InvalidArgumentError(absl::StrCat(where, " is not in [", -dim, ", ", dim, ")"));
}

absl::Status OutputShapeTooLargeError(const Shape& shape, std::optional<int64_t> bytes,
                                      int64_t max_bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("output of shape ", ShapeToString(shape), " needs ",
                   bytes ? absl::StrCat(*bytes) : std::string("more than 2^63"),
                   " bytes, over the limit of ", max_bytes, " bytes (max_output_bytes)"));
}

absl::Status OutputTooLargeError(int64_t bytes, int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat("output needs ", bytes,
                                                   " bytes, over the limit of ", max_bytes,
                                                   " bytes (max_output_bytes)"));
}

}  // namespace tensorcompute::core
