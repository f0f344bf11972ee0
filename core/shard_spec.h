// File: core/shard_spec.h
//
// Row-range sharding (issue 25): a table of R rows split over N shards, shard i holding rows
// [i * ceil(R/N), min(R, (i + 1) * ceil(R/N))) (the last shards may hold fewer rows, or none).
// Each shard is a resident tensor that knows which rows of which table it holds.
// A keyed table (core/keyed_rows.h) is sharded by key instead (by_key, core/key_split.h): shard
// i holds the keys k with KeyShard(k, N) == i, whatever their number.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_SHARD_SPEC_H_
#define TENSORCOMPUTE_CORE_SHARD_SPEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorcompute::core {

// The most shards a table may have.
inline constexpr int32_t kMaxShards = 4096;

// Which rows of which table a shard holds.
struct ShardSpec {
  int32_t index = 0;       // this shard, in [0, count)
  int32_t count = 1;       // shards of the table
  int64_t total_rows = 0;  // R, the whole table's rows (by_key: its keys, informational, or 0)
  // A keyed table's shard by key: it holds the keys k with KeyShard(k, count) == index, and
  // its rows are its own (no row range).
  bool by_key = false;
};

// Rows [begin, end) of a table.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t row) const { return row >= begin && row < end; }
};

// ceil(total_rows / count); at least 1.
int64_t RowsPerShard(int64_t total_rows, int32_t count);
// The rows shard `index` of `count` holds.
RowRange ShardRows(int64_t total_rows, int32_t count, int32_t index);
inline RowRange ShardRows(const ShardSpec& spec) {
  return ShardRows(spec.total_rows, spec.count, spec.index);
}
// The shard holding `row`. REQUIRES: 0 <= row < total_rows.
int32_t ShardOfRow(int64_t total_rows, int32_t count, int64_t row);

// Checks a shard's description against the rows it holds: INVALID_ARGUMENT, naming `name`,
// for a count outside [1, kMaxShards], an index outside [0, count), a negative total, or
// (a shard by row range) `rows_held` other than ShardRows(spec).size().
absl::Status ValidateShardSpec(absl::string_view name, const ShardSpec& spec, int64_t rows_held);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_SHARD_SPEC_H_
