#include "core/shard_split.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tensorcompute::core {
namespace {

// The index value at flat position `k` of int32 or int64 `indices`.
int64_t IndexAt(const TensorView& indices, int64_t k) {
  if (indices.dtype == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, indices.data.data() + k * 4, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, indices.data.data() + k * 8, 8);
  return v;
}

// `v` in [-size, size) as a row in [0, size), or -1 when outside.
int64_t Normalize(int64_t v, int64_t size) {
  if (v < -size || v >= size) return -1;
  return v < 0 ? v + size : v;
}

// The split of `n` tuples of `depth` values whose components have sizes `dims`; `bad` makes
// the error for a flat position.
template <typename BadError>
absl::StatusOr<RowSplit> Split(const TensorView& indices, int64_t n, int64_t depth,
                               absl::Span<const int64_t> dims, int32_t count, BadError bad) {
  const int64_t total = dims[0];
  RowSplit split;
  split.depth = depth;
  split.values.resize(static_cast<size_t>(count));
  split.shard_of_row.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t first = t * depth;
    // Every component is checked here, so that the lowest bad position is the one reported.
    for (int64_t k = 0; k < depth; ++k) {
      if (Normalize(IndexAt(indices, first + k), dims[k]) < 0) return bad(first + k);
    }
    const int64_t row = Normalize(IndexAt(indices, first), total);
    const int32_t shard = ShardOfRow(total, count, row);
    split.shard_of_row[static_cast<size_t>(t)] = shard;
    std::vector<int64_t>& part = split.values[static_cast<size_t>(shard)];
    part.push_back(row);
    for (int64_t k = 1; k < depth; ++k) part.push_back(IndexAt(indices, first + k));
  }
  return split;
}

}  // namespace

absl::StatusOr<RowSplit> SplitRows(const GatherPlan& plan, const TensorView& indices,
                                   int32_t count) {
  return Split(indices, plan.num_indices, plan.depth, plan.index_dims, count,
               [&](int64_t position) { return BadIndexError(plan, indices, position); });
}

absl::StatusOr<RowSplit> SplitRows(const EmbeddingBagPlan& plan, const TensorView& indices,
                                   int32_t count) {
  const int64_t dims[1] = {plan.rows};
  return Split(indices, plan.num_indices, 1, dims, count, [&](int64_t position) {
    return EmbeddingBagBadIndexError(plan, indices, position);
  });
}

namespace {

// The distinct rows of `n` index values (rows of a table of `total`, padding_row's uses left
// out), per shard, and the values renumbered into them; `bad` makes the error for a flat
// position.
template <typename BadError>
absl::StatusOr<BagRowSplit> SplitDistinct(const TensorView& indices, int64_t n, int64_t total,
                                          int64_t padding_row, int32_t count, BadError bad) {
  BagRowSplit split;
  split.rows.resize(static_cast<size_t>(count));
  split.indices.resize(static_cast<size_t>(n));
  // First pass: the distinct rows, each numbered within its shard's part; the renumbering
  // waits for the parts' sizes.
  absl::flat_hash_map<int64_t, int64_t> slot_in_shard;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = Normalize(IndexAt(indices, k), total);
    if (row < 0) return bad(k);
    split.indices[static_cast<size_t>(k)] = row;
    if (row == padding_row) continue;
    auto [it, inserted] = slot_in_shard.try_emplace(row, 0);
    if (inserted) {
      std::vector<int64_t>& part = split.rows[static_cast<size_t>(ShardOfRow(total, count, row))];
      it->second = static_cast<int64_t>(part.size());
      part.push_back(row);
    }
  }
  std::vector<int64_t> base(static_cast<size_t>(count) + 1, 0);
  for (int32_t s = 0; s < count; ++s) {
    base[static_cast<size_t>(s) + 1] =
        base[static_cast<size_t>(s)] +
        static_cast<int64_t>(split.rows[static_cast<size_t>(s)].size());
  }
  split.fetched_rows = base.back();
  if (padding_row >= 0) split.padding_slot = split.fetched_rows++;
  for (int64_t& v : split.indices) {
    v = v == padding_row
            ? split.padding_slot
            : base[static_cast<size_t>(ShardOfRow(total, count, v))] + slot_in_shard[v];
  }
  return split;
}

}  // namespace

absl::StatusOr<BagRowSplit> SplitBagRows(const EmbeddingBagPlan& plan, const TensorView& indices,
                                         int32_t count) {
  return SplitDistinct(
      indices, plan.num_indices, plan.rows, plan.padding_row, count,
      [&](int64_t position) { return EmbeddingBagBadIndexError(plan, indices, position); });
}

absl::StatusOr<BagRowSplit> SplitBagRows(const GatherPlan& plan, const TensorView& indices,
                                         int32_t count) {
  return SplitDistinct(indices, plan.num_indices, plan.index_dims[0], -1, count,
                       [&](int64_t position) { return BadIndexError(plan, indices, position); });
}

EmbeddingBagPlan PlanOnStagedRows(const EmbeddingBagPlan& plan, const BagRowSplit& split) {
  EmbeddingBagPlan out = plan;
  out.rows = split.fetched_rows;
  out.index_dtype = DataType::kInt64;
  out.padding_row = split.padding_slot;
  return out;
}

EmbeddingBagPlan PlanOnFetchedRows(const EmbeddingBagPlan& plan, const BagRowSplit& split) {
  // The staged plan, on rows that came back as the output's dtype (dequantized by the shards).
  EmbeddingBagPlan out = PlanOnStagedRows(plan, split);
  out.encoding = TableEncoding::kNone;
  out.row_bytes = plan.dim * plan.element_size;
  return out;
}

GatherPlan PlanOnStagedRows(const GatherPlan& plan, const BagRowSplit& split) {
  GatherPlan out = plan;
  out.rows = split.fetched_rows;
  out.index_dims[0] = split.fetched_rows;
  out.index_dtype = DataType::kInt64;
  return out;
}

}  // namespace tensorcompute::core
