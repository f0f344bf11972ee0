#include "core/batching/table_lease_executor.h"

#include <memory>
#include <utility>
#include <vector>

#include "core/live_rows.h"

namespace tensorcompute::batching {

void TableLeaseExecutor::Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  std::vector<std::shared_ptr<core::LiveRows>> gates;
  for (const std::unique_ptr<Task>& task : batch) {
    if (task->table != nullptr) gates.push_back(task->table->live);
  }
  if (gates.empty()) return inner_->Run(std::move(batch), std::move(batch_done));
  auto leases = std::make_unique<core::TableLeases>();
  leases->Acquire(std::move(gates));
  for (const std::unique_ptr<Task>& task : batch) {
    if (task->table_sequence != nullptr && task->table != nullptr && task->table->live != nullptr) {
      *task->table_sequence = task->table->live->sequence();
    }
  }
  inner_->Run(std::move(batch),
              [leases = std::move(leases), batch_done = std::move(batch_done)]() mutable {
                leases->Release();
                std::move(batch_done)();
              });
}

}  // namespace tensorcompute::batching
