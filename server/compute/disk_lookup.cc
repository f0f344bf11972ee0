#include "server/compute/disk_lookup.h"

#include <algorithm>
#include <utility>
#include <variant>

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
  const int64_t staged_bytes = split.fetched_rows * StoredRowBytes(*table);
  if (staged_bytes > max_staged_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("table '", table->name, "' on disk: the lookup reads ", split.rows[0].size(),
                     " distinct rows, ", staged_bytes, " bytes staged, over the limit of ",
                     max_staged_bytes, " bytes (max_output_bytes)"));
  }
  rows_ = std::move(split.rows[0]);
  indices_ = std::move(split.indices);
  core::Shape staged_shape = table->tensor.shape();
  staged_shape[0] = split.fetched_rows;
  TC_ASSIGN_OR_RETURN(staged_, core::Tensor::Allocate(table->tensor.dtype(), staged_shape));
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

absl::Status DiskLookup::Fetch() {
  // The staged rows come first in the staging table; a padding row, if any, after them stays
  // as allocated (a padding row is never read).
  return table_->disk->Fetch(rows_, staged_.mutable_bytes().data(), &stats_);
}

}  // namespace tensorcompute::server
