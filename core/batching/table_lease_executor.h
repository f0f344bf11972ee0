// File: core/batching/table_lease_executor.h
//
// Live tables (core/live_rows.h): the executor the batcher runs batches on, wrapped so that a
// batch holds a read lease on every resident table its tasks read, from before the inner
// executor starts it until its batch_done, whatever that executor is (the CPU pool, the CUDA
// slots, the CPU fallback of a GPU batch). A row update waits for those leases to go and holds
// newer batches back while it writes, so no task ever reads a row half written, or half of
// one update's rows.
//
// Each task's `table_sequence` (when set) gets its table's sequence under the lease: the
// updates its answer reflects, exactly. Then each task's `resolve` (when set) runs, under the
// lease too: a lookup by keys turns its keys into rows there; a task it fails is answered with
// that error and not passed on (a batch left with none is done at once).
//
// Then the tasks' fetches (Task::fetch), grouped by source: each group fetched at once
// (TaskFetch::FetchTogether), so that the batch's lookups on a table on disk read their
// distinct rows together; a task whose fetch fails is answered with its error and left out.
//
// A resolve that waits on a disk (a lookup on a table on disk fetching its rows, Task::
// resolve_blocks) must not hold up the batcher's thread, which calls Run: a batch with one
// runs on the `offload` pool instead (one of its threads a batch; the batcher's
// max_inflight_batches bounds how many run at once), everything else as before.
//
// A task's done runs with its batch's leases held: it must not wait for a lease itself (no
// path does: a shard router's pooling task, the one task submitted from a done, reads no
// table).
//
// Thread-safety: as Executor.

#ifndef TENSORCOMPUTE_CORE_BATCHING_TABLE_LEASE_EXECUTOR_H_
#define TENSORCOMPUTE_CORE_BATCHING_TABLE_LEASE_EXECUTOR_H_

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"

#include "core/batching/executor.h"
#include "core/thread_pool.h"

namespace tensorcompute::batching {

class TableLeaseExecutor final : public Executor {
 public:
  // `inner` and `offload` are not owned and must outlive this; `offload` may be null (every
  // batch runs on the caller's thread).
  explicit TableLeaseExecutor(Executor* inner, core::ThreadPool* offload = nullptr)
      : inner_(inner), offload_(offload) {}

  void Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) override;
  absl::string_view name() const override { return inner_->name(); }

 private:
  void RunHere(Batch batch, absl::AnyInvocable<void() &&> batch_done);
  // Runs the batch's fetches by source, leaving out the tasks they fail (answered).
  static void FetchTogether(Batch* batch);

  Executor* const inner_;
  core::ThreadPool* const offload_;
};

}  // namespace tensorcompute::batching

#endif  // TENSORCOMPUTE_CORE_BATCHING_TABLE_LEASE_EXECUTOR_H_
