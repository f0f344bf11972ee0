// File: core/shard_split.h
//
// A lookup on a table sharded by rows (core/shard_spec.h) is split by the shard owning each row it
// reads, computed by the owners, and assembled in the original order; these pure functions do the
// splitting.
//
//   SplitRows      Gather of axis 0, GatherNd (each tuple routed by its first component) and
//                  the unpooled gather of a compact table: every output row comes from one
//                  shard; each shard's part keeps the output's order.
//   SplitBagRows   a pooled lookup: the distinct rows it reads, fetched once each, and the
//                  request's indices renumbered into them, so that the same plan pooled over
//                  the fetched rows gives the unsharded answer bit for bit. (With one shard:
//                  the rows a lookup on a table on disk stages, for any Gather of axis 0 too.)
//
// Index values are checked here, against the whole table, with the words and the position
// that the unsharded request gets (BadIndexError, EmbeddingBagBadIndexError): a bad index is
// refused before any part is sent.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_SHARD_SPLIT_H_
#define TENSORCOMPUTE_CORE_SHARD_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/shard_spec.h"
#include "core/tensor.h"

namespace tensorcompute::core {

// A lookup's output rows split by owning shard.
struct RowSplit {
  // Per shard: its part's index values, first component normalized to [0, R) (other
  // components as sent), `depth` per output row, in output order.
  std::vector<std::vector<int64_t>> values;
  // Per output row: the shard it comes from. Rows of one shard come in the order of its part.
  std::vector<int32_t> shard_of_row;
  int64_t depth = 1;
};

// Splits a Gather of axis 0 or a GatherNd without batch dimensions planned on the whole table
// (plan.indexed_axis == 0, plan.batch == 1), or an unpooled lookup (plan.unpooled). Returns
// the split, or the request's bad-index INVALID_ARGUMENT.
// REQUIRES: `indices` is the view the plan was made from; count >= 1; a GatherPlan's
// index_dims[0] and an EmbeddingBagPlan's rows are the whole table's rows.
absl::StatusOr<RowSplit> SplitRows(const GatherPlan& plan, const TensorView& indices,
                                   int32_t count);
absl::StatusOr<RowSplit> SplitRows(const EmbeddingBagPlan& plan, const TensorView& indices,
                                   int32_t count);

// A pooled lookup's rows: fetched, then pooled locally.
struct BagRowSplit {
  // Per shard: the distinct rows to fetch from it (normalized, in first-use order).
  std::vector<std::vector<int64_t>> rows;
  // The fetched rows laid out as one table: shard 0's rows, then shard 1's, ..., then, when
  // the plan has a padding row, one zero row at `padding_slot` (else -1). `fetched_rows` in
  // all.
  int64_t fetched_rows = 0;
  int64_t padding_slot = -1;
  // The request's indices renumbered into that table (int64, in the indices' order): the
  // padding row's uses name padding_slot.
  std::vector<int64_t> indices;
};

// REQUIRES: `plan` planned on the whole table, from `indices`.
absl::StatusOr<BagRowSplit> SplitBagRows(const EmbeddingBagPlan& plan, const TensorView& indices,
                                         int32_t count);
// The same for a Gather of axis 0 (plan.indexed_axis == 0, plan.batch == 1, plan.depth == 1),
// which has no padding row: a table on disk stages the distinct rows a Gather reads
// (server/compute/disk_lookup.h). REQUIRES: as above.
absl::StatusOr<BagRowSplit> SplitBagRows(const GatherPlan& plan, const TensorView& indices,
                                         int32_t count);

// `plan`, planned on the whole table, made to pool the fetched rows of `split` instead: a
// float table of split.fetched_rows rows in the plan's output dtype (encoding none), indices
// int64 (split.indices), its padding row renumbered. Offsets and weights are unchanged.
EmbeddingBagPlan PlanOnFetchedRows(const EmbeddingBagPlan& plan, const BagRowSplit& split);

// `plan`, planned on the whole table, made to read the rows of `split` (count 1) staged as they
// are stored (a table on disk's: dtype, encoding and row bytes unchanged, split.fetched_rows
// rows, indices int64 (split.indices), the padding row renumbered). For a Gather,
// REQUIRES: as SplitBagRows's.
EmbeddingBagPlan PlanOnStagedRows(const EmbeddingBagPlan& plan, const BagRowSplit& split);
GatherPlan PlanOnStagedRows(const GatherPlan& plan, const BagRowSplit& split);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_SHARD_SPLIT_H_
