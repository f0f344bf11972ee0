#include "core/embedding_bag.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/embedding_bag_kernels.h"
#include "core/first_bad.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/half_float.h"
#include "core/index_math.h"
#include "core/row_space.h"
#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kMaxRank = 32;  // ranks above 2 are refused anyway; this bounds the checks

// Each parallel chunk reads at least this many params bytes.
constexpr int64_t kMinChunkBytes = int64_t{64} << 10;

bool IsFloatParams(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

absl::Status Invalid(auto&&... pieces) {
  return absl::InvalidArgumentError(absl::StrCat(pieces...));
}

// Checks offsets (rank 1, int32/int64, already ValidateTensor'd) against `num_indices` and
// returns the number of bags.
absl::StatusOr<int64_t> CheckOffsets(const TensorView& offsets, int64_t num_indices,
                                     bool include_last_offset) {
  if (!IsIndexType(offsets.dtype)) {
    return Invalid("offsets must be int32 or int64, got ", DataTypeName(offsets.dtype));
  }
  if (offsets.rank() != 1) {
    return Invalid("EmbeddingBag: offsets must have rank 1, got shape ",
                   ShapeToString(offsets.shape));
  }
  const int64_t n = offsets.shape[0];
  if (include_last_offset && n == 0) {
    return Invalid(
        "EmbeddingBag: with include_last_offset, offsets must have at least 1 entry (bags + 1 "
        "entries, the last being the end of indices), got 0");
  }
  const uint8_t* data = offsets.data.data();
  int64_t prev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = LoadIndex(data, offsets.dtype, i);
    if (i == 0 && v != 0) {
      return Invalid("offsets[0] = ", v, " must be 0 (the first bag starts at indices[0])");
    }
    if (v < prev) {
      return Invalid("offsets[", i, "] = ", v, " is less than offsets[", i - 1, "] = ", prev,
                     "; offsets must not decrease");
    }
    if (v > num_indices) {
      return Invalid("offsets[", i, "] = ", v, " is past the end of indices (", num_indices,
                     " values)");
    }
    prev = v;
  }
  if (include_last_offset && prev != num_indices) {
    return Invalid("offsets[", n - 1, "] = ", prev,
                   " is the end of the last bag (include_last_offset) and must equal the number "
                   "of indices, ",
                   num_indices);
  }
  const int64_t bags = include_last_offset ? n - 1 : n;
  if (bags == 0 && num_indices > 0) {
    return Invalid("EmbeddingBag: offsets define no bag but indices has ", num_indices,
                   " values; every index must belong to a bag");
  }
  return bags;
}

absl::Status CheckWeights(const TensorView& weights, DataType params_dtype,
                          const TensorView& indices, EmbeddingBagMode mode) {
  if (weights.shape != indices.shape) {
    return Invalid("per_sample_weights must have the shape of indices ",
                   ShapeToString(indices.shape), ", got ", ShapeToString(weights.shape));
  }
  if (weights.dtype != DataType::kFloat32 && weights.dtype != params_dtype) {
    const std::string accepted = params_dtype == DataType::kFloat32
                                     ? "float32"
                                     : absl::StrCat("float32 or ", DataTypeName(params_dtype));
    return Invalid("per_sample_weights must be ", accepted, " (the params' dtype), got ",
                   DataTypeName(weights.dtype));
  }
  if (mode == EmbeddingBagMode::kMax) {
    return Invalid(
        "EmbeddingBag: per_sample_weights are not supported with mode MAX (as in "
        "torch); use SUM, MEAN or SQRTN");
  }
  return absl::OkStatus();
}

// Checks that params are in the stored form of `encoding` (rank 2 already checked) and
// returns the logical dtype, dim and stored row bytes.
struct ParamsForm {
  DataType dtype;
  int64_t dim;
  int64_t row_bytes;
};

absl::StatusOr<ParamsForm> CheckParamsForm(const TensorView& params, TableEncoding encoding,
                                           absl::string_view op) {
  const int64_t columns = params.shape[1];
  switch (encoding) {
    case TableEncoding::kNone:
      if (!IsFloatParams(params.dtype)) {
        return Invalid(op, ": params must be float16, bfloat16, float32 or float64, got ",
                       DataTypeName(params.dtype));
      }
      return ParamsForm{params.dtype, columns,
                        columns * static_cast<int64_t>(ElementSize(params.dtype))};
    case TableEncoding::kFloat16:
      if (params.dtype != DataType::kFloat16) {
        return Invalid(op, ": a float16-encoded table's params must be float16, got ",
                       DataTypeName(params.dtype));
      }
      return ParamsForm{DataType::kFloat32, columns, columns * 2};
    case TableEncoding::kRowwise8:
      if (params.dtype != DataType::kUint8 || columns <= kRowwise8Trailer) {
        return Invalid(op,
                       ": an 8-bit row-wise table's params must be uint8 [rows, dim + 8] with "
                       "dim >= 1, got ",
                       DataTypeName(params.dtype), " ", ShapeToString(params.shape));
      }
      return ParamsForm{DataType::kFloat32, columns - kRowwise8Trailer, columns};
  }
  return Invalid(op, ": unknown table encoding ", static_cast<int>(encoding));
}

// A plan's fields that follow from params (in `form`) and indices.
EmbeddingBagPlan PlanFor(const TensorView& params, const ParamsForm& form, TableEncoding encoding,
                         const TensorView& indices) {
  EmbeddingBagPlan plan;
  plan.dtype = form.dtype;
  plan.encoding = encoding;
  plan.index_dtype = indices.dtype;
  plan.element_size = static_cast<int64_t>(ElementSize(form.dtype));
  plan.row_bytes = form.row_bytes;
  plan.rows = params.shape[0];
  plan.dim = form.dim;
  plan.num_indices = Product(indices.shape, 0, indices.shape.size());
  plan.indices_shape = indices.shape;
  return plan;
}

// Sizes the output of `plan` (bags and output_shape set): output_bytes, or RESOURCE_EXHAUSTED
// past `max_output_bytes`; and work_bytes, the bytes of the rows read plus those written,
// saturating at INT64_MAX.
absl::Status SizeOutput(EmbeddingBagPlan& plan, int64_t max_output_bytes) {
  const std::optional<int64_t> elements = CheckedMul(plan.bags, plan.dim);
  const std::optional<int64_t> bytes =
      elements ? CheckedMul(*elements, plan.element_size) : std::nullopt;
  if (!bytes || *bytes > max_output_bytes) {
    return OutputShapeTooLargeError(plan.output_shape, bytes, max_output_bytes);
  }
  plan.output_bytes = *bytes;
  const std::optional<int64_t> read = CheckedMul(plan.num_indices, plan.row_bytes);
  int64_t work = 0;
  if (!read || __builtin_add_overflow(*read, *bytes, &work)) {
    work = std::numeric_limits<int64_t>::max();
  }
  plan.work_bytes = work;
  return absl::OkStatus();
}

}  // namespace

std::string EmbeddingBagModeName(EmbeddingBagMode mode) {
  switch (mode) {
    case EmbeddingBagMode::kSum:
      return "SUM";
    case EmbeddingBagMode::kMean:
      return "MEAN";
    case EmbeddingBagMode::kMax:
      return "MAX";
    case EmbeddingBagMode::kSqrtn:
      return "SQRTN";
  }
  return absl::StrCat("mode(", static_cast<int32_t>(mode), ")");
}

absl::StatusOr<EmbeddingBagPlan> PlanEmbeddingBag(const TensorView& params,
                                                  const TensorView& indices,
                                                  const TensorView* offsets,
                                                  const TensorView* per_sample_weights,
                                                  const EmbeddingBagOptions& options) {
  TC_RETURN_IF_ERROR(ValidateTensor(params, "params", kMaxRank));
  TC_RETURN_IF_ERROR(ValidateTensor(indices, "indices", kMaxRank));
  if (offsets != nullptr) TC_RETURN_IF_ERROR(ValidateTensor(*offsets, "offsets", kMaxRank));
  if (per_sample_weights != nullptr) {
    TC_RETURN_IF_ERROR(ValidateTensor(*per_sample_weights, "per_sample_weights", kMaxRank));
  }
  const auto mode_value = static_cast<int32_t>(options.mode);
  if (mode_value < 0 || mode_value > 3) {
    return Invalid("EmbeddingBag: unknown mode ", mode_value,
                   "; expected SUM (0), MEAN (1), MAX (2) or SQRTN (3)");
  }
  if (params.rank() != 2) {
    return Invalid("EmbeddingBag: params must have rank 2 [rows, dim], got shape ",
                   ShapeToString(params.shape));
  }
  TC_ASSIGN_OR_RETURN(const ParamsForm form,
                      CheckParamsForm(params, options.params_encoding, "EmbeddingBag"));
  if (!IsIndexType(indices.dtype)) {
    return Invalid("indices must be int32 or int64, got ", DataTypeName(indices.dtype));
  }
  if (indices.rank() != 1 && indices.rank() != 2) {
    return Invalid(
        "EmbeddingBag: indices must have rank 1 (with offsets) or rank 2 [bags, n] (fixed-size "
        "bags, without offsets), got shape ",
        ShapeToString(indices.shape));
  }
  EmbeddingBagPlan plan = PlanFor(params, form, options.params_encoding, indices);
  plan.mode = options.mode;
  if (indices.rank() == 2) {
    if (offsets != nullptr) {
      return Invalid(
          "EmbeddingBag: offsets must be absent when indices has rank 2 [bags, n] (fixed-size "
          "bags), got offsets of shape ",
          ShapeToString(offsets->shape));
    }
    if (options.include_last_offset) {
      return Invalid(
          "EmbeddingBag: include_last_offset applies only to offsets, not to indices of rank 2 "
          "[bags, n]");
    }
    plan.bags = indices.shape[0];
    plan.bag_size = indices.shape[1];
  } else {
    if (offsets == nullptr) {
      return Invalid(
          "EmbeddingBag: indices of rank 1 need offsets (bag b is indices[offsets[b] : "
          "offsets[b+1]]); or pass indices of rank 2 [bags, n] for fixed-size bags");
    }
    TC_ASSIGN_OR_RETURN(plan.bags,
                        CheckOffsets(*offsets, plan.num_indices, options.include_last_offset));
    plan.offsets_dtype = offsets->dtype;
  }
  if (per_sample_weights != nullptr) {
    TC_RETURN_IF_ERROR(CheckWeights(*per_sample_weights, form.dtype, indices, options.mode));
    plan.weights_dtype = per_sample_weights->dtype;
  }
  if (options.padding_idx) {
    const int64_t p = *options.padding_idx;
    if (!NormalizeIndex(p, plan.rows, &plan.padding_row)) {
      return Invalid("padding_idx = ", p, " is not in [", -plan.rows, ", ", plan.rows,
                     ") for params with ", plan.rows, " rows");
    }
  }
  plan.output_shape = {plan.bags, plan.dim};
  TC_RETURN_IF_ERROR(SizeOutput(plan, options.max_output_bytes));
  return plan;
}

absl::StatusOr<EmbeddingBagPlan> PlanUnpooledGather(const TensorView& params,
                                                    TableEncoding encoding,
                                                    const TensorView& indices,
                                                    std::optional<int64_t> axis, int64_t batch_dims,
                                                    const PlanOptions& options) {
  TC_RETURN_IF_ERROR(ValidateTensor(params, "params", kMaxRank));
  TC_RETURN_IF_ERROR(ValidateTensor(indices, "indices", options.max_rank));
  if (params.rank() != 2) {
    return Invalid("Gather: a compact table's params must have rank 2 [rows, dim], got shape ",
                   ShapeToString(params.shape));
  }
  TC_ASSIGN_OR_RETURN(const ParamsForm form, CheckParamsForm(params, encoding, "Gather"));
  if (!IsIndexType(indices.dtype)) {
    return Invalid("indices must be int32 or int64, got ", DataTypeName(indices.dtype));
  }
  if (batch_dims != 0) {
    return Invalid("Gather on a compact table reads whole rows: batch_dims must be 0, got ",
                   batch_dims);
  }
  if (axis && *axis != 0 && *axis != -2) {
    return Invalid("Gather on a compact table reads whole rows: axis must be 0 (or -2), got axis ",
                   *axis);
  }
  EmbeddingBagPlan plan = PlanFor(params, form, encoding, indices);
  plan.mode = EmbeddingBagMode::kSum;
  plan.unpooled = true;
  plan.bags = plan.num_indices;
  plan.bag_size = 1;
  plan.output_shape = indices.shape;
  plan.output_shape.push_back(plan.dim);
  TC_RETURN_IF_ERROR(SizeOutput(plan, options.max_output_bytes));
  return plan;
}

namespace {

BagViews ViewsOf(const EmbeddingBagPlan& plan, const TensorView& params, const TensorView& indices,
                 const TensorView* offsets, const TensorView* per_sample_weights,
                 const MutableTensorView& output) {
  BagViews views;
  views.params = params.data.data();
  views.indices = indices.data.data();
  if (!plan.fixed_bags()) {
    views.offsets = offsets->data.data();
    views.num_offsets = offsets->shape[0];
  }
  if (plan.weighted()) views.weights = per_sample_weights->data.data();
  views.output = output.data.data();
  return views;
}

// Outputs as large as the gather's streaming threshold skip the cache the same way.
bool Streaming(int64_t output_bytes) {
  return output_bytes >= ExecuteOptions{}.streaming_store_bytes;
}

// Runs fn(begin, end) over bags [0, bags) costing `work` bytes, split across `pool` in chunks
// of about kMinChunkBytes of work when the work reaches min_parallel_bytes.
template <typename Fn>
void ForBags(int64_t bags, int64_t work, ThreadPool* pool, int64_t min_parallel_bytes, Fn&& fn) {
  if (pool != nullptr && pool->size() > 0 && work >= min_parallel_bytes && bags > 1) {
    pool->ParallelFor(bags, GroupMinChunk(bags, work, kMinChunkBytes), fn);
  } else if (bags > 0) {
    fn(0, bags);
  }
}

}  // namespace

absl::Status ExecuteEmbeddingBag(const EmbeddingBagPlan& plan, const TensorView& params,
                                 const TensorView& indices, const TensorView* offsets,
                                 const TensorView* per_sample_weights,
                                 const MutableTensorView& output, ThreadPool* pool,
                                 int64_t min_parallel_bytes) {
  const BagViews views = ViewsOf(plan, params, indices, offsets, per_sample_weights, output);
  const bool streaming = Streaming(plan.output_bytes);
  FirstBad bad;
  ForBags(plan.bags, plan.work_bytes, pool, min_parallel_bytes, [&](int64_t begin, int64_t end) {
    bad.Report(ReduceBags(plan, views, begin, end, streaming));
  });
  if (!bad.found()) return absl::OkStatus();
  return EmbeddingBagBadIndexError(plan, indices, bad.position());
}

std::vector<absl::Status> ExecuteEmbeddingBagGroup(absl::Span<const EmbeddingBagJob> jobs,
                                                   ThreadPool* pool, int64_t min_parallel_bytes) {
  std::vector<BagViews> views(jobs.size());
  RowSpace bags;
  int64_t work = 0, output_bytes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const EmbeddingBagJob& job = jobs[j];
    views[j] = ViewsOf(*job.plan, job.params, job.indices, &job.offsets, &job.per_sample_weights,
                       job.output);
    bags.Add(j, job.plan->bags);
    work = std::min(work, std::numeric_limits<int64_t>::max() - job.plan->work_bytes) +
           job.plan->work_bytes;  // saturates at INT64_MAX, as work_bytes does
    output_bytes += job.plan->output_bytes;
  }
  const bool streaming = Streaming(output_bytes);
  std::vector<FirstBad> bad(jobs.size());
  ForBags(bags.total(), work, pool, min_parallel_bytes, [&](int64_t begin, int64_t end) {
    bags.ForEachPiece(begin, end, [&](size_t j, int64_t b, int64_t e) {
      bad[j].Report(ReduceBags(*jobs[j].plan, views[j], b, e, streaming));
    });
  });
  std::vector<absl::Status> statuses(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (bad[j].found()) {
      statuses[j] = EmbeddingBagBadIndexError(*jobs[j].plan, jobs[j].indices, bad[j].position());
    }
  }
  return statuses;
}

absl::Status EmbeddingBagBadIndexError(const EmbeddingBagPlan& plan, const TensorView& indices,
                                       int64_t position) {
  // The words are Gather's (gather_plan.h's BadIndexError), for a rank-1 gather of axis 0.
  GatherPlan words;
  words.index_dtype = plan.index_dtype;
  words.depth = 1;
  words.index_dims = {plan.rows};
  words.indexed_axis = 0;
  words.indices_shape = plan.indices_shape;
  return BadIndexError(words, indices, position);
}

absl::StatusOr<Tensor> EmbeddingBag(const TensorView& params, const TensorView& indices,
                                    const TensorView* offsets, const TensorView* per_sample_weights,
                                    const EmbeddingBagOptions& options, ThreadPool* pool) {
  TC_ASSIGN_OR_RETURN(EmbeddingBagPlan plan,
                      PlanEmbeddingBag(params, indices, offsets, per_sample_weights, options));
  TC_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(plan.dtype, plan.output_shape));
  TC_RETURN_IF_ERROR(ExecuteEmbeddingBag(plan, params, indices, offsets, per_sample_weights,
                                         out.mutable_view(), pool));
  return out;
}

}  // namespace tensorcompute::core
