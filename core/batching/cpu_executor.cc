#include "core/batching/cpu_executor.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

// Counts one task of the batch as answered; the last one calls batch_done.
void TaskFinished(BatchState& state) {
  if (state.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::move(state.batch_done)();
  }
}

// Runs `job`'s tasks one after another on the calling (pool) thread. Each task is destroyed
// right after its done, so batch_done finds every task gone.
void RunJob(Batch job, const core::ExecuteOptions& options, BatchState& state) {
  for (std::unique_ptr<Task>& task : job) {
    RunTaskOnCpu(*task, options, absl::Now());
    task.reset();
    TaskFinished(state);
  }
}

// One pass over the live tasks of a group, all gathers or all pooled lookups on one table:
// their statuses, in order.
std::vector<absl::Status> ComputeGroup(const Batch& live, const core::ExecuteOptions& options) {
  if (live.front()->bag() != nullptr) {
    std::vector<core::EmbeddingBagJob> jobs;
    jobs.reserve(live.size());
    for (const std::unique_ptr<Task>& task : live) {
      jobs.push_back(
          {task->bag(), task->params, task->indices, task->offsets, task->weights, task->output});
    }
    return core::ExecuteEmbeddingBagGroup(jobs, options.pool, options.min_parallel_bytes);
  }
  std::vector<core::GatherJob> jobs;
  jobs.reserve(live.size());
  for (const std::unique_ptr<Task>& task : live) {
    jobs.push_back({task->gather(), task->params, task->indices, task->output});
  }
  return core::ExecuteGatherGroup(jobs, options);
}

// Runs tasks of one kind on one table as one pass (core::ExecuteGatherGroup or
// core::ExecuteEmbeddingBagGroup): the wanted ones get their outputs made, then one loop over
// all their rows or bags, split across the pool when large; each task is then answered with
// its own status.
void RunGroup(Batch group, const core::ExecuteOptions& options, BatchState& state) {
  const absl::Time now = absl::Now();
  Batch live;
  for (std::unique_ptr<Task>& task : group) {
    absl::Status wanted = CheckStillWanted(*task, now);
    if (wanted.ok()) {
      live.push_back(std::move(task));
      continue;
    }
    std::move(task->done)(std::move(wanted));
    task.reset();
    TaskFinished(state);
  }
  if (live.empty()) return;
  for (std::unique_ptr<Task>& task : live) {
    if (task->make_output) task->output = std::move(task->make_output)();
  }
  std::vector<absl::Status> statuses = ComputeGroup(live, options);
  for (size_t i = 0; i < live.size(); ++i) {
    std::move(live[i]->done)(std::move(statuses[i]));
    live[i].reset();
    TaskFinished(state);
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
  if (batch.size() == 1 && batch.front()->cost_bytes() <= options_.inline_task_bytes) {
    core::ExecuteOptions here = options_.execute;
    here.pool = nullptr;
    RunJob(std::move(batch), here, *state);
    return;
  }
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

  // Small tasks of one kind (gathers, or pooled lookups) on the same resident table (two or
  // more) become one group job: one pass over all their rows or bags. The rest keep the
  // per-task path below, in batch order: a large task gains nothing from sharing a loop, and on
  // its own it is answered as soon as it is done instead of when the whole group is
  // (measured: 4096 lookups of 256 B, 64 clients, grouped 0.58x).
  Batch rest;
  std::vector<Batch> groups;
  absl::flat_hash_map<std::pair<const core::ResidentTensor*, bool>, size_t> group_of;
  for (std::unique_ptr<Task>& task : batch) {
    if (task->table == nullptr || task->cost_bytes() > options_.group_task_bytes) {
      rest.push_back(std::move(task));
      continue;
    }
    const std::pair<const core::ResidentTensor*, bool> key(task->table.get(),
                                                           task->bag() != nullptr);
    auto [it, inserted] = group_of.try_emplace(key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(std::move(task));
  }
  for (Batch& group : groups) {
    if (group.size() == 1) {
      rest.push_back(std::move(group.front()));
      continue;
    }
    pool_->Schedule([group = std::move(group), split, state]() mutable {
      RunGroup(std::move(group), split, *state);
    });
  }

  Batch small;
  int64_t small_bytes = 0;
  for (std::unique_ptr<Task>& task : rest) {
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

absl::Status ComputeOnCpu(const Task& task, const core::ExecuteOptions& options) {
  if (const core::EmbeddingBagPlan* bag = task.bag()) {
    return core::ExecuteEmbeddingBag(*bag, task.params, task.indices,
                                     bag->fixed_bags() ? nullptr : &task.offsets,
                                     bag->weighted() ? &task.weights : nullptr, task.output,
                                     options.pool, options.min_parallel_bytes);
  }
  return core::ExecuteGather(*task.gather(), task.params, task.indices, task.output, options);
}

void RunTaskOnCpu(Task& task, const core::ExecuteOptions& options, absl::Time now) {
  absl::Status status = CheckStillWanted(task, now);
  if (status.ok()) {
    if (task.make_output) task.output = std::move(task.make_output)();
    status = ComputeOnCpu(task, options);
  }
  std::move(task.done)(std::move(status));
}

}  // namespace tensorcompute::batching
