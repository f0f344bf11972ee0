// File: core/batching/executor.h
//
// The seam between the batcher and the hardware: an Executor runs batches of Tasks. The CPU
// executor (cpu_executor.h) and the CUDA executor (core/cuda/cuda_executor.h) implement it;
// tests use fakes. The batcher never knows which one it has.
//
// Thread-safety: Run may be called from any thread, including concurrently with itself.

#ifndef TENSORCOMPUTE_CORE_BATCHING_EXECUTOR_H_
#define TENSORCOMPUTE_CORE_BATCHING_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"

#include "core/batching/task.h"

namespace tensorcompute::batching {

using Batch = std::vector<std::unique_ptr<Task>>;

class Executor {
 public:
  virtual ~Executor() = default;

  // Takes ownership of `batch` (non-empty) and computes every task in it, calling each task's
  // `done` exactly once, from any thread, possibly before Run returns; then calls
  // `batch_done` exactly once, after the last task's `done` returned. Run must not block for
  // the duration of the compute: it hands the work to its own threads (or device) and returns
  // (a copy cheaper than the hand-off itself may be done in place: CpuExecutorOptions::
  // inline_task_bytes).
  // A task cancelled or past its deadline by the time it would start may be answered
  // CANCELLED / DEADLINE_EXCEEDED without being computed.
  virtual void Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) = 0;

  // A short name for logs and metrics: "cpu", "cuda:0".
  virtual absl::string_view name() const = 0;
};

}  // namespace tensorcompute::batching

#endif  // TENSORCOMPUTE_CORE_BATCHING_EXECUTOR_H_
