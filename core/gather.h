// File: core/gather.h
//
// The public entry points of the computational core: Gather and GatherNd on the CPU.
//
//   ExecuteGather(plan, ...)  runs a validated plan (core/gather_plan.h) into an output slot
//                             the caller sized: the server's path, writing straight into a
//                             response. Index values are checked in the same pass as the copy.
//   ExecuteGatherGroup(jobs)   runs several plans as one pass over their output rows laid end
//                             to end (the batching executors' path for requests on one
//                             resident table), each job still checked and answered alone.
//   Gather(...), GatherNd(...) plan + allocate + execute, returning an owning Tensor: the
//                             convenient path for clients, tests and tools.
//
// Speed: a slice is copied with one memcpy (or typed loads/stores for one-element slices),
// with the rows of upcoming indices prefetched. Requests with at least
// ExecuteOptions::min_parallel_bytes of output are split across the ThreadPool; smaller ones
// run inline on the calling thread and never touch the pool.
//
// Thread-safety: concurrent calls are safe; each call writes only its own output.

#ifndef TENSORCOMPUTE_CORE_GATHER_H_
#define TENSORCOMPUTE_CORE_GATHER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tensorcompute::core {

struct ExecuteOptions {
  // Pool for large requests; nullptr runs everything on the calling thread. Not owned.
  ThreadPool* pool = nullptr;

  // Outputs of at least this many bytes are split across `pool`; smaller ones run inline.
  // Default 256 KiB: below it, waking a worker costs more than the copy.
  int64_t min_parallel_bytes = int64_t{256} << 10;

  // Outputs of at least this many bytes are written with non-temporal (streaming) stores,
  // which skip the cache-line read a normal store of a cold line costs; 0 disables.
  // Default 8 MiB (well beyond L2, where the read-for-ownership starts to cost).
  int64_t streaming_store_bytes = int64_t{8} << 20;
};

struct GatherOptions {
  PlanOptions plan;
  ExecuteOptions execute;
};

// Executes `plan` with `params` and `indices` (the views it was made from) into `output`.
// REQUIRES: output.dtype == plan.dtype, output.shape == plan.output_shape, and output.data is
// plan.output_bytes long (fixed-size dtypes) or output.strings has plan.output_elements
// entries (kString).
// Returns OK, or INVALID_ARGUMENT (BadIndexError) for the lowest flat position of indices that
// holds an out-of-range value, or RESOURCE_EXHAUSTED when a string output's bytes exceed
// plan.max_output_bytes. On error the output's contents are unspecified.
absl::Status ExecuteGather(const GatherPlan& plan, const TensorView& params,
                           const TensorView& indices, const MutableTensorView& output,
                           const ExecuteOptions& options = {});

// One member of ExecuteGatherGroup: a plan, the views it was made from, and its output slot.
struct GatherJob {
  const GatherPlan* plan = nullptr;  // not owned
  TensorView params;
  TensorView indices;
  MutableTensorView output;
};

// Executes every job as ExecuteGather would, but as one pass: one loop over the jobs' output
// rows laid end to end (job 0's rows, then job 1's, ...), split across options.pool when the
// outputs add up to at least min_parallel_bytes, each row copied by the same kernels into its
// own job's output. Many small requests on one table then cost one parallel loop instead of
// one call each. Streaming stores are used when the outputs add up to streaming_store_bytes.
// Returns one status per job, in order: exactly what ExecuteGather returns for that job alone
// (OK, its own bad-index INVALID_ARGUMENT, or RESOURCE_EXHAUSTED for a string output over
// its cap); a bad job leaves the others untouched.
// REQUIRES: each job satisfies ExecuteGather's REQUIRES; outputs do not overlap.
std::vector<absl::Status> ExecuteGatherGroup(absl::Span<const GatherJob> jobs,
                                             const ExecuteOptions& options = {});

// tf.gather / ONNX Gather into a new Tensor. Errors as PlanGather and ExecuteGather.
absl::StatusOr<Tensor> Gather(const TensorView& params, const TensorView& indices,
                              std::optional<int64_t> axis, int64_t batch_dims,
                              const GatherOptions& options = {});

// tf.gather_nd / ONNX GatherND into a new Tensor. Errors as PlanGatherNd and ExecuteGather.
absl::StatusOr<Tensor> GatherNd(const TensorView& params, const TensorView& indices,
                                int64_t batch_dims, const GatherOptions& options = {});

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_GATHER_H_
