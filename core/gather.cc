#include "core/gather.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/first_bad.h"
#include "core/gather_kernels.h"
#include "core/row_space.h"
#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

// Each parallel chunk copies at least this many bytes (or checks this many index values), so
// a chunk's work dwarfs the cost of handing it to a thread.
constexpr int64_t kMinChunkBytes = int64_t{64} << 10;
constexpr int64_t kMinChunkTuples = int64_t{16} << 10;

// Runs fn(begin, end) over [0, n), split across the pool when `parallel`.
template <typename Fn>
void ForRange(const ExecuteOptions& options, bool parallel, int64_t n, int64_t min_chunk, Fn&& fn) {
  if (parallel && options.pool != nullptr && options.pool->size() > 0) {
    options.pool->ParallelFor(n, min_chunk, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

// Index values are read as int32/int64 arrays; request bytes are normally aligned (protobuf
// strings are heap-allocated), but a view may point anywhere. Misaligned indices are copied
// once into an aligned buffer rather than read with undefined behaviour.
TensorView AlignedIndices(const TensorView& indices, std::unique_ptr<int64_t[]>& storage) {
  const size_t align = ElementSize(indices.dtype);
  if (align == 0 || reinterpret_cast<uintptr_t>(indices.data.data()) % align == 0) {
    return indices;
  }
  storage.reset(new int64_t[indices.data.size() / sizeof(int64_t) + 1]);
  std::memcpy(storage.get(), indices.data.data(), indices.data.size());
  TensorView v = indices;
  v.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(storage.get()),
                                     indices.data.size());
  return v;
}

absl::Status ExecuteStrings(const GatherPlan& plan, const TensorView& params,
                            const TensorView& indices, const MutableTensorView& output,
                            const ExecuteOptions& options) {
  // Two passes: the string bytes are known only after reading the indices, and the output
  // cap must hold before any string is copied.
  const int64_t rows = plan.output_rows();
  const bool parallel = plan.output_bytes >= options.min_parallel_bytes;
  const int64_t min_chunk =
      std::max<int64_t>(1, kMinChunkTuples / std::max<int64_t>(1, plan.slice));
  FirstBad bad;
  std::atomic<int64_t> total{0};
  ForRange(options, parallel, rows, min_chunk, [&](int64_t begin, int64_t end) {
    int64_t bytes = 0;
    bad.Report(StringRowBytes(plan, params, indices, begin, end, &bytes));
    total.fetch_add(bytes, std::memory_order_relaxed);
  });
  if (bad.found()) return BadIndexError(plan, indices, bad.position());
  const int64_t needed = total.load() + plan.output_bytes;  // characters + per-string overhead
  if (needed > plan.max_output_bytes) return OutputTooLargeError(needed, plan.max_output_bytes);
  ForRange(options, parallel, rows, min_chunk, [&](int64_t begin, int64_t end) {
    GatherRows(plan, params, indices, output, begin, end, /*streaming=*/false);
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status ExecuteGather(const GatherPlan& plan, const TensorView& params,
                           const TensorView& raw_indices, const MutableTensorView& output,
                           const ExecuteOptions& options) {
  std::unique_ptr<int64_t[]> aligned_storage;
  const TensorView indices = AlignedIndices(raw_indices, aligned_storage);
  const int64_t tuples = plan.batch * plan.num_indices;
  if (tuples == 0) return absl::OkStatus();

  // Nothing to copy (an empty outer range or empty slices), but every index is still checked:
  // an out-of-range index is an error whatever the output's size.
  if (plan.output_rows() == 0 || plan.slice == 0) {
    FirstBad bad;
    ForRange(options, tuples * plan.depth >= (options.min_parallel_bytes >> 3), tuples,
             kMinChunkTuples,
             [&](int64_t b, int64_t e) { bad.Report(CheckIndexTuples(plan, indices, b, e)); });
    return bad.found() ? BadIndexError(plan, indices, bad.position()) : absl::OkStatus();
  }
  if (plan.dtype == DataType::kString) {
    return ExecuteStrings(plan, params, indices, output, options);
  }

  const int64_t slice_bytes = plan.slice_bytes();
  const bool parallel = plan.output_bytes >= options.min_parallel_bytes;
  const bool streaming =
      options.streaming_store_bytes > 0 && plan.output_bytes >= options.streaming_store_bytes;
  const int64_t min_chunk = std::max<int64_t>(1, kMinChunkBytes / slice_bytes);
  FirstBad bad;
  ForRange(options, parallel, plan.output_rows(), min_chunk, [&](int64_t begin, int64_t end) {
    bad.Report(GatherRows(plan, params, indices, output, begin, end, streaming));
  });
  if (bad.found()) return BadIndexError(plan, indices, bad.position());
  return absl::OkStatus();
}

namespace {

// The string members of a group: ExecuteStrings' two passes (sizes and checks, then copies),
// each one loop over all members' rows.
void ExecuteStringGroup(absl::Span<const GatherJob> jobs, absl::Span<const TensorView> indices,
                        const RowSpace& space, int64_t estimate_bytes,
                        const ExecuteOptions& options, std::vector<absl::Status>& statuses) {
  const bool parallel = estimate_bytes >= options.min_parallel_bytes;
  const int64_t min_chunk = GroupMinChunk(space.total(), estimate_bytes, kMinChunkTuples);
  std::vector<FirstBad> bad(jobs.size());
  std::vector<std::atomic<int64_t>> bytes(jobs.size());
  ForRange(options, parallel, space.total(), min_chunk, [&](int64_t begin, int64_t end) {
    space.ForEachPiece(begin, end, [&](size_t j, int64_t b, int64_t e) {
      int64_t n = 0;
      bad[j].Report(StringRowBytes(*jobs[j].plan, jobs[j].params, indices[j], b, e, &n));
      bytes[j].fetch_add(n, std::memory_order_relaxed);
    });
  });
  RowSpace copy;
  space.ForEachPiece(0, space.total(), [&](size_t j, int64_t, int64_t rows) {
    const GatherPlan& plan = *jobs[j].plan;
    const int64_t needed = bytes[j].load() + plan.output_bytes;
    if (bad[j].found()) {
      statuses[j] = BadIndexError(plan, indices[j], bad[j].position());
    } else if (needed > plan.max_output_bytes) {
      statuses[j] = OutputTooLargeError(needed, plan.max_output_bytes);
    } else {
      copy.Add(j, rows);
    }
  });
  ForRange(options, parallel, copy.total(), min_chunk, [&](int64_t begin, int64_t end) {
    copy.ForEachPiece(begin, end, [&](size_t j, int64_t b, int64_t e) {
      GatherRows(*jobs[j].plan, jobs[j].params, indices[j], jobs[j].output, b, e, false);
    });
  });
}

}  // namespace

std::vector<absl::Status> ExecuteGatherGroup(absl::Span<const GatherJob> jobs,
                                             const ExecuteOptions& options) {
  std::vector<absl::Status> statuses(jobs.size());
  std::vector<std::unique_ptr<int64_t[]>> aligned_storage(jobs.size());
  std::vector<TensorView> indices(jobs.size());
  RowSpace fixed, strings;
  int64_t fixed_bytes = 0, string_bytes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const GatherPlan& plan = *jobs[j].plan;
    indices[j] = AlignedIndices(jobs[j].indices, aligned_storage[j]);
    if (plan.batch * plan.num_indices == 0) continue;
    if (plan.output_rows() == 0 || plan.slice == 0) {
      // Only index checks, no rows to share a loop with: ExecuteGather's own path.
      statuses[j] = ExecuteGather(plan, jobs[j].params, indices[j], jobs[j].output, options);
    } else if (plan.dtype == DataType::kString) {
      strings.Add(j, plan.output_rows());
      string_bytes += plan.output_bytes;
    } else {
      fixed.Add(j, plan.output_rows());
      fixed_bytes += plan.output_bytes;
    }
  }
  if (!strings.empty()) {
    ExecuteStringGroup(jobs, indices, strings, string_bytes, options, statuses);
  }
  if (fixed.empty()) return statuses;

  const bool parallel = fixed_bytes >= options.min_parallel_bytes;
  const bool streaming =
      options.streaming_store_bytes > 0 && fixed_bytes >= options.streaming_store_bytes;
  std::vector<FirstBad> bad(jobs.size());
  ForRange(
      options, parallel, fixed.total(), GroupMinChunk(fixed.total(), fixed_bytes, kMinChunkBytes),
      [&](int64_t begin, int64_t end) {
        fixed.ForEachPiece(begin, end, [&](size_t j, int64_t b, int64_t e) {
          const GatherJob& job = jobs[j];
          bad[j].Report(GatherRows(*job.plan, job.params, indices[j], job.output, b, e, streaming));
        });
      });
  fixed.ForEachPiece(0, fixed.total(), [&](size_t j, int64_t, int64_t) {
    if (bad[j].found()) statuses[j] = BadIndexError(*jobs[j].plan, indices[j], bad[j].position());
  });
  return statuses;
}

namespace {

absl::StatusOr<Tensor> Run(const GatherPlan& plan, const TensorView& params,
                           const TensorView& indices, const ExecuteOptions& options) {
  TC_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(plan.dtype, plan.output_shape));
  TC_RETURN_IF_ERROR(ExecuteGather(plan, params, indices, out.mutable_view(), options));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Gather(const TensorView& params, const TensorView& indices,
                              std::optional<int64_t> axis, int64_t batch_dims,
                              const GatherOptions& options) {
  TC_ASSIGN_OR_RETURN(GatherPlan plan, PlanGather(params, indices, axis, batch_dims, options.plan));
  return Run(plan, params, indices, options.execute);
}

absl::StatusOr<Tensor> GatherNd(const TensorView& params, const TensorView& indices,
                                int64_t batch_dims, const GatherOptions& options) {
  TC_ASSIGN_OR_RETURN(GatherPlan plan, PlanGatherNd(params, indices, batch_dims, options.plan));
  return Run(plan, params, indices, options.execute);
}

}  // namespace tensorcompute::core
