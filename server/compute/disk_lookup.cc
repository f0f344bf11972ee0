#include "server/compute/disk_lookup.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#include "core/shard_split.h"
#include "core/status_macros.h"

namespace tensorcompute::server {
namespace {

// The bytes of one stored row of `table` (its tensor's dtype and dimensions after the first).
int64_t StoredRowBytes(const core::ResidentTensor& table) {
  int64_t bytes = core::ElementSize(table.tensor.dtype());
  const core::Shape& shape = table.tensor.shape();
  for (size_t d = 1; d < shape.size(); ++d) bytes *= shape[d];
  return bytes;
}

int64_t IndexValues(const batching::TaskPlan& plan) {
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&plan)) return bag->num_indices;
  return std::get<core::GatherPlan>(plan).num_index_values();
}

}  // namespace

int64_t DiskLookup::StagingBytes(const core::ResidentTensor& table,
                                 const batching::TaskPlan& plan) {
  const int64_t values = IndexValues(plan);
  const int64_t rows = std::min(values, table.disk->rows()) + 1;
  return rows * StoredRowBytes(table) + values * kBytesPerIndex;
}

absl::Status DiskLookup::Prepare(const core::ResidentTensor* table, const batching::TaskPlan& plan,
                                 const core::TensorView& indices, int64_t max_staged_bytes) {
  table_ = table;
  indices_shape_ = indices.shape;
  core::BagRowSplit split;
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&plan)) {
    TC_ASSIGN_OR_RETURN(split, core::SplitBagRows(*bag, indices, 1));
    plan_ = core::PlanOnStagedRows(*bag, split);
  } else {
    const auto& gather = std::get<core::GatherPlan>(plan);
    TC_ASSIGN_OR_RETURN(split, core::SplitBagRows(gather, indices, 1));
    plan_ = core::PlanOnStagedRows(gather, split);
  }
  max_staged_bytes_ = max_staged_bytes;
  staged_padding_ = split.padding_slot;
  if (split.fetched_rows * StoredRowBytes(*table) > max_staged_bytes) {
    return TooManyRows(static_cast<int64_t>(split.rows[0].size()));
  }
  rows_ = std::move(split.rows[0]);
  indices_ = std::move(split.indices);
  core::Shape staged_shape = table->tensor.shape();
  staged_shape[0] = split.fetched_rows;
  TC_ASSIGN_OR_RETURN(staged_, core::Tensor::Allocate(table->tensor.dtype(), staged_shape));
  return absl::OkStatus();
}

absl::Status DiskLookup::TooManyRows(int64_t distinct) const {
  const int64_t rows = distinct + (staged_padding_ >= 0 ? 1 : 0);
  return absl::ResourceExhaustedError(absl::StrCat(
      "table '", table_->name, "' on disk: the lookup reads ", distinct, " distinct rows, ",
      rows * StoredRowBytes(*table_), " bytes staged, over the limit of ", max_staged_bytes_,
      " bytes (max_output_bytes)"));
}

absl::Status DiskLookup::PrepareKeyed(const core::ResidentTensor* table,
                                      const batching::TaskPlan& plan, const core::TensorView& slots,
                                      int64_t max_staged_bytes) {
  table_ = table;
  max_staged_bytes_ = max_staged_bytes;
  slots_ = slots;
  indices_shape_ = slots.shape;
  const int64_t row_bytes = std::max<int64_t>(1, StoredRowBytes(*table));
  const int64_t values = IndexValues(plan);
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&plan))
    slot_padding_ = bag->padding_row;
  const int64_t padding = slot_padding_ >= 0 ? 1 : 0;
  // Rows for the distinct slots: no more than the keys, the table's rows, or the limit holds.
  staging_rows_ = std::min(
      {values, table->disk->rows(), std::max<int64_t>(0, max_staged_bytes / row_bytes - padding)});
  core::BagRowSplit layout;
  layout.fetched_rows = staging_rows_ + padding;
  layout.padding_slot = padding ? staging_rows_ : -1;
  staged_padding_ = layout.padding_slot;
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&plan)) {
    plan_ = core::PlanOnStagedRows(*bag, layout);
  } else {
    plan_ = core::PlanOnStagedRows(std::get<core::GatherPlan>(plan), layout);
  }
  indices_.resize(static_cast<size_t>(values));
  core::Shape staged_shape = table->tensor.shape();
  staged_shape[0] = layout.fetched_rows;
  TC_ASSIGN_OR_RETURN(staged_, core::Tensor::Allocate(table->tensor.dtype(), staged_shape));
  return absl::OkStatus();
}

absl::Status DiskLookup::Stage() {
  const auto* slots = reinterpret_cast<const int64_t*>(slots_.data.data());
  absl::flat_hash_map<int64_t, int64_t> position;
  position.reserve(std::min<size_t>(indices_.size(), static_cast<size_t>(staging_rows_)));
  rows_.clear();
  for (size_t i = 0; i < indices_.size(); ++i) {
    const int64_t slot = slots[i];
    if (slot == slot_padding_) {
      indices_[i] = staged_padding_;
      continue;
    }
    auto [it, added] = position.try_emplace(slot, static_cast<int64_t>(rows_.size()));
    if (added) rows_.push_back(slot);
    indices_[i] = it->second;
  }
  if (static_cast<int64_t>(rows_.size()) > staging_rows_) {
    return TooManyRows(static_cast<int64_t>(rows_.size()));
  }
  return absl::OkStatus();
}

core::TensorView DiskLookup::params() const { return staged_.view(); }

core::TensorView DiskLookup::indices() const {
  core::TensorView view;
  view.dtype = core::DataType::kInt64;
  view.shape = indices_shape_;
  view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(indices_.data()),
                                        indices_.size() * sizeof(int64_t));
  return view;
}

void DiskLookup::FetchTogether(absl::Span<batching::TaskFetch* const> group,
                               absl::Status* statuses) {
  const core::DiskRows& disk = *table_->disk;
  const int64_t row_bytes = disk.row_bytes();
  // The group's distinct rows, each fetched to the first lookup that reads it; the others'
  // copies of it made after.
  absl::flat_hash_map<int64_t, size_t> fetched;  // row -> its index in rows, to
  std::vector<int64_t> rows;
  std::vector<uint8_t*> to;
  struct Copy {
    uint8_t* to;
    size_t from;
  };
  std::vector<Copy> copies;
  for (batching::TaskFetch* member : group) {
    auto* lookup = static_cast<DiskLookup*>(member);
    uint8_t* staged = lookup->staged_.mutable_bytes().data();
    for (size_t i = 0; i < lookup->rows_.size(); ++i) {
      uint8_t* row = staged + static_cast<int64_t>(i) * row_bytes;
      auto [it, added] = fetched.try_emplace(lookup->rows_[i], rows.size());
      if (added) {
        rows.push_back(lookup->rows_[i]);
        to.push_back(row);
      } else {
        copies.push_back({row, it->second});
      }
    }
  }
  std::vector<uint8_t> missed(rows.size());
  const absl::Status status = disk.FetchTo(rows, to.data(), nullptr, nullptr, missed.data());
  for (size_t g = 0; g < group.size(); ++g) statuses[g] = status;
  if (!status.ok()) return;
  for (const Copy& copy : copies) {
    std::memcpy(copy.to, to[copy.from], static_cast<size_t>(row_bytes));
  }
  for (batching::TaskFetch* member : group) {
    auto* lookup = static_cast<DiskLookup*>(member);
    for (int64_t row : lookup->rows_) {
      const bool read = missed[fetched.find(row)->second] != 0;
      ++(read ? lookup->stats_.misses : lookup->stats_.hits);
    }
  }
}

}  // namespace tensorcompute::server
