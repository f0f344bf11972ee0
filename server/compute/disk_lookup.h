// File: server/compute/disk_lookup.h
//
// A lookup on a table on disk (core/disk_rows.h, issue 43), for every front end (ComputeEntry
// makes one for each request on such a table, after the front end planned it):
//
//   - The front end plans the request on the table's plan_view(), its whole rows as if they were
//     in memory (table_plans.h says which lookups a table on disk serves), so its shapes, output
//     size and errors are those of the table held in memory.
//   - Prepare checks the index values against the whole table, with the words and positions of
//     the table in memory (core::SplitBagRows), lists the distinct rows the lookup reads (in
//     first-use order), and makes the plan again on a staging table of just those rows, in
//     their stored form (core::PlanOnStagedRows), with the indices renumbered into it. So the
//     answer is, byte for byte, the one the table in memory gives.
//   - The fetch, under the batch's read lease (batching::Task::fetch, so that no row update
//     runs meanwhile), fills the staging table from the row cache and the file, together with
//     the batch's other lookups on the table (FetchTogether: their distinct rows read once, all
//     in flight at once): UNAVAILABLE naming the table when the disk fails
//     (core::DiskRows::FetchTo), never other bytes.
//   - A lookup by keys (keyed_lookup.h) has its slots only under the lease, once its keys are
//     resolved: PrepareKeyed makes its plan on a staging table of as many rows as it may read
//     (at most one per key, the table's rows, and what max_staged_bytes holds), and Stage,
//     under the lease after the keys' resolution, lists its distinct slots and renumbers them
//     before the fetch. An EmbeddingBag's padding slot (MISSING_SKIP's zero slot) becomes the
//     staging table's padding row.
//
// Memory: the staging table, the renumbered indices and the distinct rows' map, at most
// StagingBytes(), which the caller charges to the request's budget reservation before Prepare
// allocates them. The staging table itself is bounded like an output: Prepare refuses one over
// `max_staged_bytes` (the server's --max_output_bytes), RESOURCE_EXHAUSTED.
//
// Thread-safety: one request's, used by one thread at a time; FetchTogether runs on an
// executor's, for its whole group.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_DISK_LOOKUP_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_DISK_LOOKUP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

#include "core/batching/task.h"
#include "core/disk_rows.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"

namespace tensorcompute::server {

class DiskLookup final : public batching::TaskFetch {
 public:
  // The most bytes Prepare may allocate for `plan` on `table`: a staged row for every index
  // value (at most every row of the table, and one more for a padding row), and for each index
  // value its renumbered index and an entry of the distinct rows' map (kBytesPerIndex).
  // REQUIRES: table.disk != nullptr.
  static constexpr int64_t kBytesPerIndex = 40;
  static int64_t StagingBytes(const core::ResidentTensor& table, const batching::TaskPlan& plan);

  // Stages `plan` (made on table->plan_view() from `indices`): afterwards plan(), params() and
  // indices() are what to compute. The request's bad-index INVALID_ARGUMENT; RESOURCE_EXHAUSTED
  // when its distinct rows take more than `max_staged_bytes` ("table 'T' on disk: the lookup
  // reads 70000 distinct rows, 17920000 bytes staged, over the limit of 16777216 bytes
  // (max_output_bytes)"). REQUIRES: table->disk != nullptr; `table` outlives this.
  absl::Status Prepare(const core::ResidentTensor* table, const batching::TaskPlan& plan,
                       const core::TensorView& indices, int64_t max_staged_bytes);

  // Stages `plan`, made on table->keyed_view() with `slots` (KeyedLookup::slots(), filled
  // later by KeyedLookup::Resolve) for indices. REQUIRES: as Prepare's; `slots` outlives this.
  absl::Status PrepareKeyed(const core::ResidentTensor* table, const batching::TaskPlan& plan,
                            const core::TensorView& slots, int64_t max_staged_bytes);
  // After the slots are resolved: lists the distinct ones and renumbers the indices.
  // RESOURCE_EXHAUSTED (Prepare's words) when they do not fit the staging table.
  absl::Status Stage();

  batching::TaskPlan& plan() { return plan_; }
  core::TensorView params() const;
  core::TensorView indices() const;

  // Fills the staging tables of `group` (DiskLookups of this table, each prepared, and staged
  // for keys, under a batch's read lease) at once: their distinct rows fetched together
  // (core::DiskRows::FetchTo), each read once, then copied to the lookups that share it. A
  // failed fetch fails every one of them.
  const void* source() const override { return table_->disk.get(); }
  void FetchTogether(absl::Span<batching::TaskFetch* const> group, absl::Status* statuses) override;
  // What the fetch did for this lookup: its distinct rows that came from the cache, and those
  // read from the file (for it, or for another lookup of its batch that reads it too).
  const core::DiskRows::FetchStats& stats() const { return stats_; }

 private:
  absl::Status TooManyRows(int64_t distinct) const;

  const core::ResidentTensor* table_ = nullptr;
  int64_t max_staged_bytes_ = 0;
  // A lookup by keys: its slots (filled under the lease), the padding slot of the plan they
  // index (-1: none), and the staging table's rows for distinct slots.
  core::TensorView slots_;
  int64_t slot_padding_ = -1;
  int64_t staged_padding_ = -1;
  int64_t staging_rows_ = 0;
  batching::TaskPlan plan_;
  std::vector<int64_t> rows_;     // the distinct rows to fetch, in first-use order
  std::vector<int64_t> indices_;  // the request's indices renumbered into the staging table
  core::Shape indices_shape_;
  core::Tensor staged_;  // the stored rows, then a padding row when the plan has one
  core::DiskRows::FetchStats stats_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_DISK_LOOKUP_H_
