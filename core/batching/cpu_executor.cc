#include "core/batching/cpu_executor.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"

namespace tensorcompute::batching {
namespace {

// What the jobs of one batch share: the count of tasks not yet answered, and who to tell when
// it reaches zero.
struct BatchState {
  explicit BatchState(int64_t tasks, absl::AnyInvocable<void() &&> done)
      : remaining(tasks), batch_done(std::move(done)) {}
  std::atomic<int64_t> remaining;
  absl::AnyInvocable<void() &&> batch_done;
};

// Runs `job`'s tasks one after another on the calling (pool) thread. Each task is destroyed
// right after its done, so batch_done finds every task gone.
void RunJob(Batch job, const core::ExecuteOptions& options, BatchState& state) {
  for (std::unique_ptr<Task>& task : job) {
    RunTaskOnCpu(*task, options, absl::Now());
    task.reset();
    if (state.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::move(state.batch_done)();
    }
  }
}

}  // namespace

CpuExecutor::CpuExecutor(core::ThreadPool* pool, const CpuExecutorOptions& options)
    : pool_(pool), options_(options) {}

void CpuExecutor::Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  if (batch.empty()) {
    std::move(batch_done)();
    return;
  }
  auto state =
      std::make_shared<BatchState>(static_cast<int64_t>(batch.size()), std::move(batch_done));
  // A large task gets a job of its own and may split across the pool (ParallelFor is safe on
  // a worker). Small ones are packed, in batch order, into jobs of about small_job_bytes: one
  // pool thread then copies several outputs per wake-up, and the jobs still run side by side.
  core::ExecuteOptions split = options_.execute;
  split.pool = pool_;
  core::ExecuteOptions whole = options_.execute;
  whole.pool = nullptr;
  auto schedule = [&](Batch job, const core::ExecuteOptions& options) {
    pool_->Schedule([job = std::move(job), options, state]() mutable {
      RunJob(std::move(job), options, *state);
    });
  };

  Batch small;
  int64_t small_bytes = 0;
  for (std::unique_ptr<Task>& task : batch) {
    const int64_t cost = task->cost_bytes();
    if (cost >= options_.execute.min_parallel_bytes) {
      Batch job;
      job.push_back(std::move(task));
      schedule(std::move(job), split);
      continue;
    }
    if (!small.empty() && small_bytes + cost > options_.small_job_bytes) {
      schedule(std::move(small), whole);
      small = Batch();
      small_bytes = 0;
    }
    small_bytes += cost;
    small.push_back(std::move(task));
  }
  if (!small.empty()) schedule(std::move(small), whole);
}

absl::Status CheckStillWanted(const Task& task, absl::Time now) {
  if (task.cancel != nullptr && task.cancel->IsCancelled()) {
    return absl::CancelledError("request cancelled by the client");
  }
  if (now >= task.deadline) {
    return absl::DeadlineExceededError("deadline exceeded before compute started");
  }
  return absl::OkStatus();
}

void RunTaskOnCpu(Task& task, const core::ExecuteOptions& options, absl::Time now) {
  absl::Status status = CheckStillWanted(task, now);
  if (status.ok()) {
    if (task.make_output) task.output = std::move(task.make_output)();
    status = core::ExecuteGather(task.plan, task.params, task.indices, task.output, options);
  }
  std::move(task.done)(std::move(status));
}

}  // namespace tensorcompute::batching
