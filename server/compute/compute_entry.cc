#include "server/compute/compute_entry.h"

#include <utility>

#include "absl/status/status.h"

#include "server/compute/disk_lookup.h"
#include "server/compute/shard_router.h"

namespace tensorcompute::server {

ComputeEntry::ComputeEntry(batching::Batcher* batcher, ByteBudget* budget, Metrics* metrics,
                           const core::TensorRegistry* registry,
                           const core::PlanOptions& plan_options)
    : batcher_(batcher),
      budget_(budget),
      metrics_(metrics),
      registry_(registry),
      plan_options_(plan_options) {}

void ComputeEntry::Submit(ComputeRequest request, ByteBudget::Reservation* reservation, Done done) {
  if (CallRecord* record = request.record; record != nullptr) {
    record->submitted = absl::Now();
    // Set before any path can answer, so that a refusal too joins the model's statistics.
    record->model = request.table != nullptr && request.table->stats != nullptr
                        ? request.table->stats
                        : metrics_->model_stats(request.builtin);
    // At least what the answer reflects; the batch that computes it writes the exact one.
    if (request.table != nullptr && request.table->live != nullptr) {
      record->table_sequence = request.table->live->sequence();
    }
    // `done` is wrapped before routing, so routed requests are stamped too.
    done = [record, done = std::move(done)](absl::Status status) mutable {
      record->computed = absl::Now();
      std::move(done)(std::move(status));
    };
  }
  // Routed before the output is charged: the router charges the output and its parts together.
  if (request.table != nullptr && request.table->shard.has_value()) {
    if (router_ == nullptr) {
      return std::move(done)(absl::FailedPreconditionError(
          "tensor '" + request.table->name + "' is a shard, and this server routes no lookups"));
    }
    return router_->Route(std::move(request), reservation, std::move(done));
  }
  if (request.table != nullptr && request.table->disk != nullptr) {
    return SubmitOnDisk(std::move(request), reservation, std::move(done));
  }
  // The memory this request holds until its answer is sent: its message, and its output.
  const int64_t output_bytes = batching::OutputBytes(request.plan);
  if (absl::Status grown = reservation->Grow(output_bytes); !grown.ok()) {
    return std::move(done)(std::move(grown));
  }
  SubmitCharged(std::move(request), std::move(done));
}

void ComputeEntry::SubmitOnDisk(ComputeRequest request, ByteBudget::Reservation* reservation,
                                Done done) {
  // Its message, its output and its staged rows, charged before the rows are allocated.
  const int64_t bytes =
      batching::OutputBytes(request.plan) + DiskLookup::StagingBytes(*request.table, request.plan);
  if (absl::Status grown = reservation->Grow(bytes); !grown.ok()) {
    return std::move(done)(std::move(grown));
  }
  auto lookup = std::make_unique<DiskLookup>();
  // A lookup by keys (the front end's resolve turns them into slots) is staged once they are.
  absl::AnyInvocable<absl::Status()&&> keys = std::move(request.resolve);
  if (absl::Status prepared =
          keys ? lookup->PrepareKeyed(request.table.get(), request.plan, request.indices,
                                      plan_options_.max_output_bytes)
               : lookup->Prepare(request.table.get(), request.plan, request.indices,
                                 plan_options_.max_output_bytes);
      !prepared.ok()) {
    return std::move(done)(std::move(prepared));
  }
  request.plan = std::move(lookup->plan());
  request.params = lookup->params();
  request.indices = lookup->indices();
  if (keys) {
    request.resolve = [lookup = lookup.get(), keys = std::move(keys)]() mutable {
      if (absl::Status resolved = std::move(keys)(); !resolved.ok()) return resolved;
      return lookup->Stage();
    };
  }
  // Its rows are fetched with its batch's other lookups of the table (TaskFetch), off the
  // batcher's thread.
  request.resolve_blocks = true;
  batching::TaskFetch* fetch = lookup.get();
  // The staged rows live until the answer is given (the task's views read them until then);
  // the record gets what the fetch found.
  done = [lookup = std::move(lookup), record = request.record,
          done = std::move(done)](absl::Status status) mutable {
    if (record != nullptr) {
      record->disk_hits = lookup->stats().hits;
      record->disk_misses = lookup->stats().misses;
    }
    std::move(done)(std::move(status));
  };
  SubmitCharged(std::move(request), std::move(done), fetch);
}

void ComputeEntry::NoticeCancel() {
  batcher_->NoticeCancel();
  if (router_ != nullptr) router_->NoticeCancel();
}

void ComputeEntry::SubmitCharged(ComputeRequest request, Done done, batching::TaskFetch* fetch) {
  auto task = std::make_unique<batching::Task>();
  task->plan = std::move(request.plan);
  task->params = std::move(request.params);
  task->indices = std::move(request.indices);
  task->offsets = std::move(request.offsets);
  task->weights = std::move(request.weights);
  task->table = std::move(request.table);
  task->deadline = request.deadline;
  if (request.cancel != nullptr) task->cancel = std::move(request.cancel);
  task->make_output = std::move(request.make_output);
  task->resolve = std::move(request.resolve);
  task->resolve_blocks = request.resolve_blocks;
  task->fetch = fetch;
  // The executor stamps the record directly; the record outlives `done` (compute_entry.h).
  if (request.record != nullptr) {
    task->batch_start = &request.record->batch_start;
    task->table_sequence = &request.record->table_sequence;
  }
  task->done = std::move(done);
  // Schedule takes the task only on OK (batcher.h); on a refusal `task` is still ours, and its
  // done answers.
  absl::Status scheduled = batcher_->Schedule(task);
  if (!scheduled.ok()) std::move(task->done)(std::move(scheduled));  // the task stayed with us
}

}  // namespace tensorcompute::server
