// File: core/batching/cpu_executor.h
//
// The CPU implementation of Executor: runs each batch on core's ThreadPool. Small tasks run
// side by side (each on one pool thread, several tasks per pool job so that waking a thread
// pays off); a large task is split across the pool by core::ExecuteGather (or
// core::ExecuteEmbeddingBag, for a pooled lookup) itself. Sizes are Task::cost_bytes(). A task that
// is cancelled or past its deadline when its turn comes is answered without being computed.
//
// Resident tables: the executor (not the batcher, which stays blind to what tasks compute)
// groups a batch's small tasks (cost_bytes() <= group_task_bytes) by Task::table and kind. Two
// or more small gathers on one table run as one pool job and one pass,
// core::ExecuteGatherGroup: one loop over the concatenated rows of all their indices, split
// across the pool by rows when the outputs add up to execute.min_parallel_bytes, each row
// copied into its own task's output. Two or more small pooled lookups on one table likewise
// run as core::ExecuteEmbeddingBagGroup: one loop over all their bags, split when their work
// adds up to execute.min_parallel_bytes. Any plans of a kind on the table merge (the rows and
// bags keep their own plans), so no compatibility test is needed. Per-task
// semantics are kept: each task is checked with CheckStillWanted, its make_output called
// before the pass, its bad index (the same words as ExecuteGather's) fails only itself, and
// done is called once. Tasks with no table, alone on theirs, or larger than group_task_bytes
// (which gain nothing from sharing a loop, and are answered sooner on their own) take the
// per-task path.
//
// Thread-safety: Run may be called concurrently; the pool is shared, not owned.

#ifndef TENSORCOMPUTE_CORE_BATCHING_CPU_EXECUTOR_H_
#define TENSORCOMPUTE_CORE_BATCHING_CPU_EXECUTOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "core/batching/executor.h"
#include "core/gather.h"
#include "core/thread_pool.h"

namespace tensorcompute::batching {

struct CpuExecutorOptions {
  // Passed to core::ExecuteGather for every task (its pool field is replaced by the
  // executor's pool): the split threshold and streaming stores.
  core::ExecuteOptions execute;

  // Tasks whose outputs add up to less than this run together as one pool job. Default 64 KiB.
  int64_t small_job_bytes = int64_t{64} << 10;

  // A batch of one task whose output is at most this many bytes is computed on the thread
  // that calls Run (the batcher's fast path: the RPC's own thread, with the queue empty and a
  // slot free) instead of being handed to the pool: the hand-off to a pool thread and the
  // answer sent from there cost more than a copy of up to about a MiB (figures in
  // docs/performance.md, "Inline compute up to 1 MiB").
  // It runs on that thread alone (no pool split). Such a Run returns after the task's done.
  // Default 0: never (the server sets 1 MiB).
  int64_t inline_task_bytes = 0;

  // Tasks on a resident table costing up to this many bytes (Task::cost_bytes(): a gather's
  // output, a pooled lookup's rows read and written) are grouped (see above); larger ones run
  // on their own. Default 64 KiB.
  int64_t group_task_bytes = int64_t{64} << 10;
};

class CpuExecutor : public Executor {
 public:
  // `pool` is not owned and must outlive the executor. REQUIRES: pool->size() >= 1.
  CpuExecutor(core::ThreadPool* pool, const CpuExecutorOptions& options = {});

  void Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) override;
  absl::string_view name() const override { return "cpu"; }

 private:
  core::ThreadPool* const pool_;
  const CpuExecutorOptions options_;
};

// OK if `task` is still worth computing at `now`; else CANCELLED if its cancel flag is set, or
// DEADLINE_EXCEEDED if its deadline is <= now. The one wording of both for every executor.
absl::Status CheckStillWanted(const Task& task, absl::Time now);

// Computes `task` into task.output with options (pool, min_parallel_bytes, streaming stores):
// core::ExecuteGather's or core::ExecuteEmbeddingBag's status.
absl::Status ComputeOnCpu(const Task& task, const core::ExecuteOptions& options);

// Computes one task and calls its done: CANCELLED or DEADLINE_EXCEEDED (without computing,
// and without calling make_output) if it is cancelled or past its deadline at `now`, else
// make_output (when set) and ComputeOnCpu's status.
// Shared by executors.
void RunTaskOnCpu(Task& task, const core::ExecuteOptions& options, absl::Time now);

}  // namespace tensorcompute::batching

#endif  // TENSORCOMPUTE_CORE_BATCHING_CPU_EXECUTOR_H_
