// File: core/table_growth.h
//
// Keyed tables that grow (issue 42): when an UpdateRows message by keys adds more keys than its
// table has free slots (KeyedRows::PlanUpsert's short_slots), ApplyRowUpdate (core/live_rows.h)
// copies the table into a larger one, publishes that in its place, and applies the message to
// it. A growth from capacity C, for a message short of S slots:
//
//   - The new capacity C' is max(2C, C + S), at most kMaxKeyedCapacity, and less if that is
//     what max_resident_bytes leaves room for, but never below C + S: else the message is
//     RESOURCE_EXHAUSTED, naming the budget, and nothing changes.
//   - Memory: the new table's stored rows and its key index bound (KeyIndexBytes(C')) are
//     reserved beside the old table's, which stays held while it is copied and until its last
//     lookup in flight is done; then it is freed and leaves the count.
//   - The copy (all of it outside the table's write gate: lookups go on reading the old table,
//     only the table's other updates wait, on its update lock): the C slots' rows as stored,
//     whatever the storage kind (bytes copied, never encoded again); slots [C, C') and the
//     zero row, now at C', zeros; the default row moved to C' + 1; the key index copied with
//     room for C' keys (KeyedRows::Grown). A GPU table's grown rows are copied to its device
//     as an upload is (TableGrowth::place), before anything is published.
//   - Publishing (TensorRegistry::PutGrown) swaps the name's entry atomically: lookups that
//     found the old table finish on it, later ones find the new one. The name, version,
//     statistics, keyed policy and sequence carry over: a growth changes no key and no row, so
//     it is not counted as a change (the message that caused it is, once applied). The old
//     table is retired as grown (LiveRows::Fate::kGrown), pointing at the new one, so an update
//     holding it applies to the new one.
//
// Thread-safety: GrowKeyedTable may be called from any thread, by the table's update only.

#ifndef TENSORCOMPUTE_CORE_TABLE_GROWTH_H_
#define TENSORCOMPUTE_CORE_TABLE_GROWTH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

#include "core/keyed_rows.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"

namespace tensorcompute::core {

// What growing keyed tables needs from the server.
struct TableGrowth {
  // Where grown tables are published, and whose max_resident_bytes they are counted against.
  // Not owned; required.
  TensorRegistry* registry = nullptr;
  // Copies a grown table's stored rows to the device its table lives on (`device`, e.g.
  // "gpu:0"), as PutTensor places an upload, and returns the copy. Empty: a table on a GPU
  // does not grow (FAILED_PRECONDITION).
  std::function<absl::StatusOr<DeviceCopy>(const std::string& device, const Tensor& tensor)> place;
  // Copies large tables with every core; null: on the update's thread. Not owned.
  ThreadPool* pool = nullptr;
};

// The capacity a table of `capacity` slots short of `short_slots` slots asks to grow to:
// max(2 * capacity, capacity + short_slots), at most kMaxKeyedCapacity.
int64_t GrownCapacity(int64_t capacity, int64_t short_slots);

// What a keyed table of `capacity` slots with rows of `row_bytes` stored bytes counts against
// max_resident_bytes: its rows, hidden rows included, and its key index bound. nullopt past
// int64.
std::optional<int64_t> KeyedTableBytes(int64_t capacity, int64_t row_bytes);

// Grows keyed `table` for `plan` (PlanUpsert's, short_slots() > 0) as the file comment says,
// publishes it, and returns it. Errors, each leaving `table` and the registry as they were:
//   RESOURCE_EXHAUSTED when C + S slots do not fit in max_resident_bytes beside the table:
//     "table 'T' is full: the message adds 3 keys and 1 slots of its capacity 8 are free, and
//     growing it to 10 slots needs 560 bytes beside its 480 while it is copied, but 900 of
//     max_resident_bytes = 1000 are in use; delete a tensor or raise --max_resident_bytes";
//     or when C + S is above kMaxKeyedCapacity;
//   FAILED_PRECONDITION for a GPU table without growth.place; the placement's errors (e.g.
//     RESOURCE_EXHAUSTED when the device has no room), prefixed with the table's words;
//   RetiredError's, when the table was replaced or deleted meanwhile.
// REQUIRES: table.live->update_lock() held; table.keyed set; growth.registry holds `table`.
absl::StatusOr<std::shared_ptr<const ResidentTensor>> GrowKeyedTable(const ResidentTensor& table,
                                                                     const KeyedRows::Upsert& plan,
                                                                     const TableGrowth& growth);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_TABLE_GROWTH_H_
