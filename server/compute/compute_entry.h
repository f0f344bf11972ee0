// File: server/compute/compute_entry.h
//
// The one compute entry of every front end, knowing no protocol. A front end (the native gRPC
// service, KServe over gRPC, KServe over HTTP) admits its call (server/admission/call_gate.h),
// decodes its wire format into a ComputeRequest (a validated plan, views of the tensors, the
// deadline, a cancel flag, and where to write the output) and Submits it:
//
//   Submit   the output's bytes join the request's reservation in the in-flight budget
//            (server/admission/byte_budget.h; no room: UNAVAILABLE, ByteBudget::NeedsError), the
//            request becomes a batching::Task, and Batcher::Schedule takes it (queue full:
//            UNAVAILABLE) -> an executor computes it -> `done` answers.
//            A request on one shard of a table goes to the shard router instead
//            (shard_router.h), which splits it by shard and submits its own part here.
//            A request on a table on disk is staged first (disk_lookup.h): its index values
//            are checked, the distinct rows it reads listed and charged to the budget with
//            the output, and its batch fetches them under the read lease, off the batcher's
//            thread; the record gets its cache hits and misses. A lookup by keys on it is
//            staged under the lease too, once its keys are resolved to slots.
//            The request's CallRecord, when it has one, gets the times of its stages.
//
// It never blocks and never takes a lock that compute holds. Small requests that find the
// server idle are computed on the calling thread before Submit returns (the CPU executor's
// inline_task_bytes); everything else is computed on the executors' threads.
//
// Thread-safety: every method may be called from any thread; the state is the batcher
// (thread-safe), the budget (thread-safe) and the metrics (atomics).

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_

#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

#include "core/batching/batcher.h"
#include "core/batching/task.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "server/admission/byte_budget.h"
#include "server/admission/call_record.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

class KeyedLookup;

// One decoded request: what batching::Task needs, before it is one.
struct ComputeRequest {
  // A plan made from the views below with ComputeEntry::plan_options() (a gather) or
  // embedding_bag_options() (a pooled lookup).
  batching::TaskPlan plan;
  core::TensorView params;
  core::TensorView indices;
  // A pooled lookup's offsets and per-sample weights, when its plan has them.
  core::TensorView offsets;
  core::TensorView weights;
  // The resident tensor that `params` views, when it is one: held until the task is destroyed,
  // so that a delete or replace meanwhile does not disturb this gather.
  std::shared_ptr<const core::ResidentTensor> table;
  // When the answer stops being useful, and the flag a front end sets when its caller has gone
  // away (null: never set).
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<batching::CancelFlag> cancel;
  // Where the output goes: called once, on the executor's thread, just before compute, so that
  // a refused or dropped request allocates nothing (batching::Task::make_output).
  absl::AnyInvocable<core::MutableTensorView() &&> make_output;
  // A lookup by keys (server/compute/keyed_lookup.h): turns its keys into `indices` under the
  // batch's read lease (batching::Task::resolve); null otherwise.
  absl::AnyInvocable<absl::Status() &&> resolve;
  // `resolve` waits on a disk (batching::Task::resolve_blocks); set by Submit for a table on
  // disk.
  bool resolve_blocks = false;
  // A lookup by keys: its keys and policy, by which a table sharded by key routes it
  // (shard_router.h), and where its found mask goes (one byte a key; null: not asked), which
  // `resolve` fills when it is not routed. Not owned; both outlive `done`'s call. A front end
  // that sets `resolve` sets `keyed` too.
  const KeyedLookup* keyed = nullptr;
  uint8_t* found = nullptr;
  // A shard router's sub-call (server/compute/shard_router.h): served from this server's rows only.
  bool from_router = false;
  // The table sequence the caller needs (min_sequence; 0: any). Checked on this server's table
  // by the front end; a router passes it on to its sub-calls, so that each shard checks its own.
  int64_t min_sequence = 0;
  // The front end's account of the call (server/admission/call_record.h), or null: Submit stamps
  // `submitted`, has the batch stamp `batch_start` and its done stamp `computed`, and sets `model`
  // to the table's statistics, or else `builtin`'s. It must outlive `done`'s call.
  CallRecord* record = nullptr;
  BuiltinModel builtin = BuiltinModel::kGather;
};

class ShardRouter;

class ComputeEntry {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // Not owned; each must outlive the service. `registry` may be null (no resident tensors).
  ComputeEntry(batching::Batcher* batcher, ByteBudget* budget, Metrics* metrics,
               const core::TensorRegistry* registry, const core::PlanOptions& plan_options);

  ComputeEntry(const ComputeEntry&) = delete;
  ComputeEntry& operator=(const ComputeEntry&) = delete;

  // Computes `request`. `reservation` holds what the request already holds of the budget (its
  // message): it grows by the output's bytes, and the caller keeps it until the answer has
  // been sent. `done` is called exactly once, from any thread (possibly before Submit
  // returns): OK once the output is written; UNAVAILABLE when the budget has no room for the
  // output or the batcher's queue is full; DEADLINE_EXCEEDED or CANCELLED when the request
  // expires or is cancelled before it runs; an executor's error. The views, and the storage
  // make_output writes to, must stay valid until `done` is called.
  // REQUIRES: request.make_output is set, or the plan's output_bytes is 0.
  void Submit(ComputeRequest request, ByteBudget::Reservation* reservation, Done done);

  // A request whose table is a shard of a table (core/shard_spec.h) goes to the router
  // instead (shard_router.h), which charges the budget and calls SubmitCharged for its parts.
  // Not owned; set before the first request, and outlives the service.
  void set_router(ShardRouter* router) { router_ = router; }

  // The pool a lookup by keys splits a long request's keys over (keyed_lookup.h); null: one
  // thread. Not owned; set before the first request.
  void set_key_pool(core::ThreadPool* pool) { key_pool_ = pool; }
  core::ThreadPool* key_pool() const { return key_pool_; }

  // Submit's path for a table on disk (disk_lookup.h).
  void SubmitOnDisk(ComputeRequest request, ByteBudget::Reservation* reservation, Done done);

  // Submit, for a request whose output the caller has already charged to the budget, and
  // whose table is used as the plan says (no routing): a shard router's parts.
  // `fetch` (not owned; valid until done is called): what the task reads from a table on disk
  // with its batch's other lookups of it (batching::Task::fetch).
  void SubmitCharged(ComputeRequest request, Done done, batching::TaskFetch* fetch = nullptr);

  // A submitted request's cancel flag was set: a queued one is answered CANCELLED now.
  void NoticeCancel();

  // What front ends decode with: the plan limits, the resident tensors (null without them)
  // and the budget their calls are read under.
  const core::PlanOptions& plan_options() const { return plan_options_; }
  // The same limits for a pooled lookup's plan (its mode and options left at their defaults).
  core::EmbeddingBagOptions embedding_bag_options() const {
    core::EmbeddingBagOptions options;
    options.max_output_bytes = plan_options_.max_output_bytes;
    return options;
  }
  const core::TensorRegistry* registry() const { return registry_; }
  ByteBudget& budget() { return *budget_; }
  // How requests are batched (ModelConfig reports it).
  const batching::BatcherOptions& batching() const { return batcher_->options(); }

 private:
  batching::Batcher* const batcher_;
  ByteBudget* const budget_;
  Metrics* const metrics_;
  const core::TensorRegistry* const registry_;
  const core::PlanOptions plan_options_;
  ShardRouter* router_ = nullptr;
  core::ThreadPool* key_pool_ = nullptr;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
