#include "core/batching/table_lease_executor.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/live_rows.h"

namespace tensorcompute::batching {

void TableLeaseExecutor::Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  if (offload_ != nullptr &&
      std::any_of(batch.begin(), batch.end(),
                  [](const std::unique_ptr<Task>& task) { return task->resolve_blocks; })) {
    offload_->Schedule(
        [this, batch = std::move(batch), batch_done = std::move(batch_done)]() mutable {
          RunHere(std::move(batch), std::move(batch_done));
        });
    return;
  }
  RunHere(std::move(batch), std::move(batch_done));
}

void TableLeaseExecutor::FetchTogether(Batch* batch) {
  // The fetches by source, in the batch's order; a task whose fetch fails is answered and left
  // out.
  std::vector<const void*> sources;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < batch->size(); ++i) {
    TaskFetch* fetch = (*batch)[i]->fetch;
    if (fetch == nullptr) continue;
    const auto it = std::find(sources.begin(), sources.end(), fetch->source());
    const size_t group = static_cast<size_t>(it - sources.begin());
    if (it == sources.end()) {
      sources.push_back(fetch->source());
      members.emplace_back();
    }
    members[group].push_back(i);
  }
  if (sources.empty()) return;
  std::vector<bool> failed(batch->size(), false);
  for (const std::vector<size_t>& group : members) {
    std::vector<TaskFetch*> fetches;
    for (size_t i : group) fetches.push_back((*batch)[i]->fetch);
    std::vector<absl::Status> statuses(fetches.size());
    fetches[0]->FetchTogether(fetches, statuses.data());
    for (size_t j = 0; j < group.size(); ++j) {
      if (statuses[j].ok()) continue;
      std::move((*batch)[group[j]]->done)(std::move(statuses[j]));
      failed[group[j]] = true;
    }
  }
  Batch kept;
  kept.reserve(batch->size());
  for (size_t i = 0; i < batch->size(); ++i) {
    if (!failed[i]) kept.push_back(std::move((*batch)[i]));
  }
  *batch = std::move(kept);
}

void TableLeaseExecutor::RunHere(Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  std::vector<std::shared_ptr<core::LiveRows>> gates;
  bool resolves = false;
  for (const std::unique_ptr<Task>& task : batch) {
    if (task->table != nullptr) gates.push_back(task->table->live);
    resolves = resolves || static_cast<bool>(task->resolve);
  }
  if (gates.empty() && !resolves) return inner_->Run(std::move(batch), std::move(batch_done));
  auto leases = std::make_unique<core::TableLeases>();
  leases->Acquire(std::move(gates));
  for (const std::unique_ptr<Task>& task : batch) {
    if (task->table_sequence != nullptr && task->table != nullptr && task->table->live != nullptr) {
      *task->table_sequence = task->table->live->sequence();
    }
  }
  // Keys become slots now that no update can move them; a task whose keys fail is answered
  // here and left out.
  Batch kept;
  kept.reserve(batch.size());
  for (std::unique_ptr<Task>& task : batch) {
    if (task->resolve) {
      absl::Status resolved = std::move(task->resolve)();
      task->resolve = nullptr;
      if (!resolved.ok()) {
        std::move(task->done)(std::move(resolved));
        continue;
      }
    }
    kept.push_back(std::move(task));
  }
  FetchTogether(&kept);
  if (kept.empty()) {
    leases->Release();
    return std::move(batch_done)();
  }
  inner_->Run(std::move(kept),
              [leases = std::move(leases), batch_done = std::move(batch_done)]() mutable {
                leases->Release();
                std::move(batch_done)();
              });
}

}  // namespace tensorcompute::batching
