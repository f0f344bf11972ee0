// File: server/metrics/metered_executor.h
//
// The time batches spend on each executor ("cpu", "cuda:0"), for the metrics: a wrapper that
// the batcher (and the GPU executor, for its CPU fallback) is given instead of the executor.
//
// Thread-safety: Run may be called from any thread; the readers are atomic.

#ifndef TENSORCOMPUTE_SERVER_METERED_EXECUTOR_H_
#define TENSORCOMPUTE_SERVER_METERED_EXECUTOR_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/batching/executor.h"

namespace tensorcompute::server {

// An Executor that passes every batch to `inner` and counts, for metrics, the batches it ran
// and their time on it: from Run to batch_done, summed over batches (so with batches running
// side by side it grows faster than the clock; divide by the executor's slots for a
// utilisation). It also stamps each task's batch_start (batching::Task) with the batch's
// start, unless an executor before it did. `inner` is not owned and must outlive this.
class MeteredExecutor final : public batching::Executor {
 public:
  explicit MeteredExecutor(batching::Executor* inner) : inner_(inner) {}

  void Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) override;
  absl::string_view name() const override { return inner_->name(); }

  int64_t batches() const { return batches_.load(std::memory_order_relaxed); }
  absl::Duration busy() const {
    return absl::Nanoseconds(busy_ns_.load(std::memory_order_relaxed));
  }

 private:
  batching::Executor* const inner_;
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> busy_ns_{0};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_METERED_EXECUTOR_H_
