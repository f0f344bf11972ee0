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
