#include "server/metrics/metered_executor.h"

#include <utility>

#include "absl/time/clock.h"

namespace tensorcompute::server {

void MeteredExecutor::Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  const absl::Time start = absl::Now();
  batches_.fetch_add(1, std::memory_order_relaxed);
  // A task whose batch_start is already set went through an executor before this one (the GPU
  // executor handing part of a batch to its metered CPU fallback): its first start is kept.
  for (const std::unique_ptr<batching::Task>& task : batch) {
    if (task->batch_start != nullptr && *task->batch_start == absl::InfinitePast()) {
      *task->batch_start = start;
    }
  }
  // Counted when the batch is done, not when Run returns: the inner executor usually returns at
  // once and computes on its own threads.
  inner_->Run(std::move(batch), [this, start, done = std::move(batch_done)]() mutable {
    busy_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start), std::memory_order_relaxed);
    std::move(done)();
  });
}

}  // namespace tensorcompute::server
