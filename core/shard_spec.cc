#include "core/shard_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tensorcompute::core {

int64_t RowsPerShard(int64_t total_rows, int32_t count) {
  const int64_t per = total_rows / count + (total_rows % count != 0 ? 1 : 0);
  return per > 0 ? per : 1;
}

RowRange ShardRows(int64_t total_rows, int32_t count, int32_t index) {
  const int64_t per = RowsPerShard(total_rows, count);
  // index * per may pass total_rows (trailing empty shards); never overflows: per <= total.
  const int64_t begin = std::min<int64_t>(total_rows, index * per);
  const int64_t end = std::min<int64_t>(total_rows, begin + per);
  return {begin, end};
}

int32_t ShardOfRow(int64_t total_rows, int32_t count, int64_t row) {
  return static_cast<int32_t>(row / RowsPerShard(total_rows, count));
}

absl::Status ValidateShardSpec(absl::string_view name, const ShardSpec& spec, int64_t rows_held) {
  if (spec.count < 1 || spec.count > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': shard count ", spec.count,
                                                   " is not in [1, ", kMaxShards, "]"));
  }
  if (spec.index < 0 || spec.index >= spec.count) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': shard index ", spec.index,
                                                   " is not in [0, ", spec.count, ")"));
  }
  if (spec.total_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': total rows ", spec.total_rows, " is negative"));
  }
  if (spec.by_key) return absl::OkStatus();  // any number of keys
  const RowRange range = ShardRows(spec);
  if (rows_held != range.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': shard ", spec.index, " of ", spec.count,
                     " of a table of ", spec.total_rows, " rows holds rows [", range.begin, ", ",
                     range.end, "), ", range.size(), " rows, but ", rows_held, " were given"));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::core
