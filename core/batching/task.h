// File: core/batching/task.h
//
// One request on its way through the batcher to an executor: what to compute (a validated plan,
// of a gather or of a pooled lookup, and views of its inputs and output), when it stops being
// worth computing (deadline, cancellation), and how to answer (a done callback, called exactly
// once).
//
// Ownership: the batcher owns a Task from a successful Schedule() until it hands the task to
// an executor (or drops it as expired/cancelled, calling done itself); the executor then owns
// it until it calls done. Whoever calls done must not touch the views afterwards: done is the
// signal that the memory behind them (request and response messages) may be released.
// `table` keeps a resident tensor that `params` views alive until the Task is destroyed.
//
// Thread-safety: a Task is used by one thread at a time, except `cancel`, which any thread may
// set at any time (the RPC layer's OnCancel) and which the batcher and executors poll.

#ifndef TENSORCOMPUTE_CORE_BATCHING_TASK_H_
#define TENSORCOMPUTE_CORE_BATCHING_TASK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <variant>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"

namespace tensorcompute::batching {

// What a task reads from a slow source (a table on disk's file) once resolved. The tasks of a
// batch that read the same source are fetched together, under the batch's leases and after
// their resolves: their distinct rows read once, with all their reads in flight at once
// (server/compute/disk_lookup.h).
class TaskFetch {
 public:
  virtual ~TaskFetch() = default;
  // Tasks whose fetches have the same source are fetched together.
  virtual const void* source() const = 0;
  // Fetches `group` (every one of this source, this one among them), setting statuses[i] for
  // group[i]: OK, or the error its task is answered with.
  virtual void FetchTogether(absl::Span<TaskFetch* const> group, absl::Status* statuses) = 0;
};

// Set once by whoever learns that the caller has gone away; shared by the RPC layer and the
// Task, so it outlives either.
struct CancelFlag {
  std::atomic<bool> cancelled{false};
  void Cancel() { cancelled.store(true, std::memory_order_relaxed); }
  bool IsCancelled() const { return cancelled.load(std::memory_order_relaxed); }
};

// What a task computes: a gather (core/gather_plan.h) or a pooled lookup (core/embedding_bag.h).
using TaskPlan = std::variant<core::GatherPlan, core::EmbeddingBagPlan>;

// The bytes a plan writes, and the dtype and shape of its output.
inline int64_t OutputBytes(const TaskPlan& plan) {
  return std::visit([](const auto& p) { return p.output_bytes; }, plan);
}
inline core::DataType OutputDataType(const TaskPlan& plan) {
  return std::visit([](const auto& p) { return p.dtype; }, plan);
}
inline const core::Shape& OutputShape(const TaskPlan& plan) {
  return std::visit([](const auto& p) -> const core::Shape& { return p.output_shape; }, plan);
}

struct Task {
  // What to compute: a plan made from the views below, written into `output` (which the plan
  // sized: core::ExecuteGather's or core::ExecuteEmbeddingBag's REQUIRES hold).
  TaskPlan plan;
  core::TensorView params;
  core::TensorView indices;
  // An EmbeddingBag's offsets and per-sample weights, empty when its plan has none (and for a
  // gather).
  core::TensorView offsets;
  core::TensorView weights;
  core::MutableTensorView output;

  // Set when `params` views a resident tensor (core/tensor_registry.h: params is a view of
  // table->tensor) instead of request bytes. Executors compute a batch's tasks on one table in
  // one pass, and a GPU executor gathers from the table's device copy (when it has one)
  // instead of copying params. Keeps the entry alive until the Task is destroyed.
  std::shared_ptr<const core::ResidentTensor> table;

  // Optional: makes `output` just before compute, on the executor's thread. When set, an
  // executor calls it once (replacing `output`) right before computing, so that a task that is
  // refused, dropped or cancelled never allocates its output, and the RPC thread that created
  // the task never spends time filling a large buffer.
  absl::AnyInvocable<core::MutableTensorView() &&> make_output;

  // When the answer stops being useful. A task still queued at its deadline is dropped and
  // answered DEADLINE_EXCEEDED; one whose flag is set is dropped and answered CANCELLED.
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<CancelFlag> cancel = std::make_shared<CancelFlag>();

  // Set by Batcher::Schedule (for queue-time metrics).
  absl::Time enqueue_time;

  // Optional: where the batch that computes this task writes when it began, for the caller's
  // stage timings (server/admission/call_record.h); the executor's metering
  // (server/metrics/metered_executor.h) writes it once, before compute (a batch retried on another
  // executor keeps its first start). Owned by the caller; valid until done is called, and read only
  // after it.
  absl::Time* batch_start = nullptr;

  // Optional: where the sequence of `table` (core/live_rows.h) that this task read goes, written
  // under the batch's lease (table_lease_executor.h) before compute. Owned by the caller, as
  // batch_start.
  int64_t* table_sequence = nullptr;

  // Optional: run once under the batch's read leases (table_lease_executor.h), before compute
  // and before make_output. A lookup by keys turns its keys into its table's slots here
  // (core/keyed_rows.h), filling the buffer `indices` views: until the lease is held an update
  // may move keys between slots; a lookup by keys on a table on disk then lists the rows it
  // reads (server/compute/disk_lookup.h), which `fetch` reads. An error answers the task with
  // it, and it is not computed.
  absl::AnyInvocable<absl::Status() &&> resolve;
  // The task waits on a disk (a lookup on a table on disk fetches its rows: `fetch`): its batch
  // runs off the batcher's thread (TableLeaseExecutor's offload pool).
  bool resolve_blocks = false;
  // Optional, with resolve_blocks: what it reads from its source, after `resolve` (TaskFetch).
  // Not owned; valid until done is called.
  TaskFetch* fetch = nullptr;

  // Called exactly once with the outcome: OK after `output` was written, or the error.
  absl::AnyInvocable<void(absl::Status) &&> done;

  // The plan, when it is of that kind; nullptr otherwise.
  const core::GatherPlan* gather() const { return std::get_if<core::GatherPlan>(&plan); }
  const core::EmbeddingBagPlan* bag() const { return std::get_if<core::EmbeddingBagPlan>(&plan); }

  // The bytes this task moves, what executors use to decide splitting and batching: a
  // gather's output, a pooled lookup's rows read and written (its output is 1/bag-size of
  // what it reads).
  int64_t cost_bytes() const {
    if (const core::EmbeddingBagPlan* b = bag()) return b->work_bytes;
    return std::get<core::GatherPlan>(plan).output_bytes;
  }
};

}  // namespace tensorcompute::batching

#endif  // TENSORCOMPUTE_CORE_BATCHING_TASK_H_
