// File: core/embedding_bag.h
//
// Pooled embedding lookups (EmbeddingBag) on the CPU: for each bag of indices, the rows of a
// [rows, dim] table that they name, reduced to one row by SUM, MEAN, MAX or SQRTN.
//
//   PlanEmbeddingBag(...)     validates a request (every user-visible message is written in
//                             the .cc) and sizes the output [bags, dim];
//   ExecuteEmbeddingBag(...)  runs a plan into an output slot the caller sized, checking each
//                             index value in the same pass (the server's path);
//   ExecuteEmbeddingBagGroup  runs several plans as one pass over their bags laid end to end
//                             (the batching executors' path for lookups on one resident
//                             table), each job still checked and answered alone;
//   EmbeddingBag(...)         plan + allocate + execute into a new Tensor (tests, tools).
//
// Semantics (the oracle is torch.nn.functional.embedding_bag, plus TensorFlow's "sqrtn"):
//   https://pytorch.org/docs/stable/generated/torch.nn.functional.embedding_bag.html
//   https://www.tensorflow.org/api_docs/python/tf/nn/embedding_lookup_sparse
// - params: rank 2 [rows, dim] of float16, bfloat16, float32 or float64; or a float32 table
//   stored compactly (EmbeddingBagOptions::params_encoding: float16, or 8-bit row-wise), whose
//   rows are dequantized as read (core/compact_row.h) and whose lookups return float32.
// - indices int32/int64 of rank 1 with offsets int32/int64 of rank 1: bag b is
//   indices[offsets[b] : offsets[b+1]], the last bag running to the end of indices. With
//   include_last_offset, offsets has bags + 1 entries and its last entry is the end of the last
//   bag; we require it to equal len(indices) (torch's documentation states no rule for other
//   values), so that in both forms every index belongs to exactly one bag.
//   offsets[0] must be 0 and offsets must not decrease or pass the end. Empty offsets without
//   include_last_offset mean zero bags, and then indices must be empty too.
//   Or indices of rank 2 [bags, n] and no offsets: fixed-size bags (include_last_offset must be
//   false then).
// - Index values in [-rows, -1] count from the end; others outside [-rows, rows) are
//   INVALID_ARGUMENT naming the position and value ("indices[5] = 9 is not in [-4, 4)", the
//   wording of Gather), found during execution: the lowest bad position is reported.
// - per_sample_weights (optional): the shape of indices, float32 or the params' dtype.
//   SUM = Σ wᵢxᵢ, MEAN = Σ wᵢxᵢ / Σ wᵢ, SQRTN = Σ wᵢxᵢ / √Σ wᵢ²; without weights wᵢ = 1.
//   MAX with weights is INVALID_ARGUMENT (as in torch).
// - padding_idx (optional, in [-rows, rows), negative counting from the end): index values
//   naming that row (after normalisation) are skipped and not counted.
// - An empty bag (or one of padding rows only) gives zeros in every mode.
// - Accumulation (core/embedding_bag_math.h): per output element in float32 (float64 for
//   float64 params), in the bag's index order, weighted terms with one rounding (fma), then
//   the division, then one rounding to the output dtype; a NaN result is written as the
//   positive quiet NaN (CanonicalNan), so that every device writes the same bytes. MAX keeps
//   torch's CPU rule: the first row sets the value, later rows replace it only when strictly
//   greater (so a NaN survives only as a bag's first row, and of -0 and +0 the first met
//   wins).
// Results do not depend on how bags are split across threads.
//
// Thread-safety: pure functions over caller-owned views; concurrent calls are safe, each
// writing only its own output.

#ifndef TENSORCOMPUTE_CORE_EMBEDDING_BAG_H_
#define TENSORCOMPUTE_CORE_EMBEDDING_BAG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/compact_row.h"
#include "core/dtype.h"
#include "core/embedding_bag_math.h"
#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tensorcompute::core {

// "SUM", "MEAN", "MAX", "SQRTN"; "mode(<n>)" for a value outside the enum.
std::string EmbeddingBagModeName(EmbeddingBagMode mode);

struct EmbeddingBagOptions {
  // How each bag is reduced. Default SUM.
  EmbeddingBagMode mode = EmbeddingBagMode::kSum;

  // offsets has bags + 1 entries, the last being len(indices). Default false.
  bool include_last_offset = false;

  // A row to skip, in [-rows, rows); unset means none.
  std::optional<int64_t> padding_idx;

  // Largest output accepted, in bytes; larger is RESOURCE_EXHAUSTED. Default 1 GiB.
  int64_t max_output_bytes = int64_t{1} << 30;

  // How params hold a float32 table (core/compact_row.h): kNone, params are the table as it
  // is; kFloat16, float16 [rows, dim]; kRowwise8, uint8 [rows, dim + 8]. A compact table's
  // lookups return float32, its rows read through core/compact_row.h. Default kNone.
  TableEncoding params_encoding = TableEncoding::kNone;
};

// A validated request.
struct EmbeddingBagPlan {
  EmbeddingBagMode mode = EmbeddingBagMode::kSum;
  DataType dtype = DataType::kUnspecified;        // the output's (and logical params') dtype
  TableEncoding encoding = TableEncoding::kNone;  // how params store their rows
  bool unpooled = false;  // every bag is one row, copied as read (PlanUnpooledGather)
  DataType index_dtype = DataType::kUnspecified;    // kInt32 or kInt64
  DataType offsets_dtype = DataType::kUnspecified;  // kInt32/kInt64; kUnspecified: fixed bags
  DataType weights_dtype = DataType::kUnspecified;  // kUnspecified: no weights
  int64_t element_size = 0;                         // bytes of one output element
  int64_t row_bytes = 0;                            // bytes of one stored params row

  int64_t rows = 0;          // params.shape[0]
  int64_t dim = 0;           // elements per row (params.shape[1], less 8 for kRowwise8)
  int64_t bags = 0;          // output rows
  int64_t num_indices = 0;   // index values in all
  int64_t bag_size = 0;      // fixed bags: indices.shape[1]; with offsets: unused (0)
  int64_t padding_row = -1;  // normalised padding_idx; -1 for none

  Shape output_shape;  // [bags, dim]; unpooled: indices.shape + [dim]
  int64_t output_bytes = 0;
  // The bytes of the rows read plus those written, at most INT64_MAX: what a request costs,
  // by which execution splits it across a pool.
  int64_t work_bytes = 0;
  Shape indices_shape;  // for error messages

  bool weighted() const { return weights_dtype != DataType::kUnspecified; }
  bool fixed_bags() const { return offsets_dtype == DataType::kUnspecified; }
};

// Validates an EmbeddingBag request. `offsets` and `per_sample_weights` are nullptr when
// absent. Reads the offsets (their order is checked here) but no index value.
// Returns the plan, or INVALID_ARGUMENT for, checked in this order: a malformed tensor
// (ValidateTensor; named "params", "indices", "offsets", "per_sample_weights"); a mode outside
// the enum; params not of rank 2 or not a float dtype; indices not int32/int64; indices of
// rank other than 1 and 2; rank 1 without offsets; rank 2 with offsets or with
// include_last_offset; offsets not int32/int64 or not of rank 1; with include_last_offset, no
// offsets entry; offsets[0] != 0; a decreasing offset; an offset past the end of indices;
// with include_last_offset, a last offset other than len(indices); zero bags but some
// indices; weights of another shape than indices or of a dtype other than float32 and the
// params'; weights with MAX; padding_idx outside [-rows, rows).
// Or RESOURCE_EXHAUSTED when the output exceeds options.max_output_bytes.
absl::StatusOr<EmbeddingBagPlan> PlanEmbeddingBag(const TensorView& params,
                                                  const TensorView& indices,
                                                  const TensorView* offsets,
                                                  const TensorView* per_sample_weights,
                                                  const EmbeddingBagOptions& options = {});

// A Gather of axis 0 (tf.gather(params, indices), batch_dims 0) on a table stored with
// `encoding` (core/compact_row.h), planned as a lookup of one-row bags, unpooled (FBGEMM's
// PoolingMode::NONE): output indices.shape + [dim] in float32, each row exactly as its stored
// values read (no arithmetic besides the dequantization; -0 and NaNs as stored), bad indices
// reported as Gather reports them. Executed by ExecuteEmbeddingBag and the batching
// executors' lookup paths like any plan. Returns the plan, or INVALID_ARGUMENT for: a
// malformed tensor; params not in `encoding`'s stored form; indices not int32/int64 or of
// rank above options.max_rank; an axis other than 0 (or -2) or a batch_dims other than 0,
// both of whose messages say that compact tables are gathered by whole rows; or
// RESOURCE_EXHAUSTED past options.max_output_bytes.
absl::StatusOr<EmbeddingBagPlan> PlanUnpooledGather(const TensorView& params,
                                                    TableEncoding encoding,
                                                    const TensorView& indices,
                                                    std::optional<int64_t> axis, int64_t batch_dims,
                                                    const PlanOptions& options = {});

// Requests that read at least this many params bytes are split across the pool.
inline constexpr int64_t kEmbeddingBagMinParallelBytes = int64_t{256} << 10;

// Executes `plan` with the views it was made from into `output`, splitting the bags across
// `pool` (nullptr: the calling thread only) when the rows read add up to min_parallel_bytes.
// The kernels are core/embedding_bag_kernels.h's (the same bytes on every CPU); an output as
// large as the gather's streaming threshold (ExecuteOptions, core/gather.h) is written with
// non-temporal stores where the vector kernel runs.
// Returns OK, or INVALID_ARGUMENT for the lowest flat position of indices holding an
// out-of-range value (output contents then unspecified).
// REQUIRES: output.dtype == plan.dtype, output.shape == plan.output_shape, output.data is
// plan.output_bytes long; offsets/per_sample_weights non-null exactly as in the plan.
absl::Status ExecuteEmbeddingBag(const EmbeddingBagPlan& plan, const TensorView& params,
                                 const TensorView& indices, const TensorView* offsets,
                                 const TensorView* per_sample_weights,
                                 const MutableTensorView& output, ThreadPool* pool = nullptr,
                                 int64_t min_parallel_bytes = kEmbeddingBagMinParallelBytes);

// One member of ExecuteEmbeddingBagGroup: a plan, the views it was made from (`offsets` and
// `per_sample_weights` are read only when the plan has them), and its output slot.
struct EmbeddingBagJob {
  const EmbeddingBagPlan* plan = nullptr;  // not owned
  TensorView params;
  TensorView indices;
  TensorView offsets;
  TensorView per_sample_weights;
  MutableTensorView output;
};

// Executes every job as ExecuteEmbeddingBag would, but as one pass: one loop over the jobs'
// bags laid end to end (job 0's bags, then job 1's, ...), split across `pool` when their work
// (EmbeddingBagPlan::work_bytes) adds up to min_parallel_bytes, each bag reduced by the same
// kernels into its own job's output. Many small lookups on one table then cost one parallel
// loop instead of one call each. Non-temporal stores are used when the outputs add up to the
// gather's streaming threshold.
// Returns one status per job, in order: exactly what ExecuteEmbeddingBag returns for that job
// alone (OK, or its own bad-index INVALID_ARGUMENT); a bad job leaves the others untouched.
// REQUIRES: each job satisfies ExecuteEmbeddingBag's REQUIRES; outputs do not overlap.
std::vector<absl::Status> ExecuteEmbeddingBagGroup(
    absl::Span<const EmbeddingBagJob> jobs, ThreadPool* pool = nullptr,
    int64_t min_parallel_bytes = kEmbeddingBagMinParallelBytes);

// The INVALID_ARGUMENT that ExecuteEmbeddingBag returns for the out-of-range value at flat
// position `position` of `indices` ("indices[1,0] = -11 is not in [-10, 10)", Gather's words:
// core::BadIndexError), so that a device that computed the position itself (the CUDA
// executor) answers with the CPU's exact text.
// REQUIRES: `indices` is the view `plan` was made from; 0 <= position < plan.num_indices.
absl::Status EmbeddingBagBadIndexError(const EmbeddingBagPlan& plan, const TensorView& indices,
                                       int64_t position);

// Plan + allocate + execute. Errors as PlanEmbeddingBag and ExecuteEmbeddingBag.
absl::StatusOr<Tensor> EmbeddingBag(const TensorView& params, const TensorView& indices,
                                    const TensorView* offsets, const TensorView* per_sample_weights,
                                    const EmbeddingBagOptions& options = {},
                                    ThreadPool* pool = nullptr);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_EMBEDDING_BAG_H_
