#include "core/key_split.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "core/key_index.h"
#include "core/shape.h"

namespace tensorcompute::core {

KeySplit SplitKeys(absl::Span<const int64_t> keys, int32_t count) {
  KeySplit split;
  split.keys.resize(static_cast<size_t>(count));
  split.row_of.resize(keys.size());
  // Each distinct key once: its shard, and its place in that shard's list.
  struct Place {
    int32_t shard;
    int64_t index;
  };
  absl::flat_hash_map<int64_t, Place> seen;
  seen.reserve(keys.size());
  std::vector<Place> places(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, added] = seen.try_emplace(keys[i], Place{0, 0});
    if (added) {
      const int32_t shard = static_cast<int32_t>(KeyShard(keys[i], count));
      std::vector<int64_t>& list = split.keys[static_cast<size_t>(shard)];
      it->second = Place{shard, static_cast<int64_t>(list.size())};
      list.push_back(keys[i]);
    }
    places[i] = it->second;
  }
  split.first_row.resize(static_cast<size_t>(count));
  for (int32_t s = 0; s < count; ++s) {
    split.first_row[static_cast<size_t>(s)] = split.fetched_rows;
    split.fetched_rows += static_cast<int64_t>(split.keys[static_cast<size_t>(s)].size());
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    split.row_of[i] = split.first_row[static_cast<size_t>(places[i].shard)] + places[i].index;
  }
  return split;
}

KeyUpdateSplit SplitKeyUpdate(absl::Span<const int64_t> keys, absl::Span<const int64_t> delete_keys,
                              int32_t count) {
  KeyUpdateSplit split;
  split.positions.resize(static_cast<size_t>(count));
  split.delete_keys.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < keys.size(); ++i) {
    split.positions[static_cast<size_t>(KeyShard(keys[i], count))].push_back(
        static_cast<int64_t>(i));
  }
  for (int64_t key : delete_keys) {
    split.delete_keys[static_cast<size_t>(KeyShard(key, count))].push_back(key);
  }
  return split;
}

int64_t ForeignKey(absl::Span<const int64_t> keys, const ShardSpec& spec) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (KeyShard(keys[i], spec.count) != spec.index) return static_cast<int64_t>(i);
  }
  return -1;
}

absl::Status CheckShardKind(absl::string_view name, const ShardSpec& spec, bool keyed) {
  if (spec.by_key && !keyed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name,
        "': a table sharded by key (shard.by_key) is a keyed table; put it with keys"));
  }
  if (!spec.by_key && keyed) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name,
                     "': a keyed table is not sharded by row ranges: keyed tables are sharded "
                     "by key (shard.by_key)"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeysOfShard(absl::string_view name, absl::Span<const int64_t> keys,
                              const ShardSpec& spec) {
  const int64_t i = ForeignKey(keys, spec);
  if (i < 0) return absl::OkStatus();
  const int64_t key = keys[static_cast<size_t>(i)];
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "': keys[", i, "] = ", key, " belongs to shard ",
                   KeyShard(key, spec.count), " of ", spec.count, ", not ", spec.index,
                   " (shards of a keyed table hold the keys k with KeyShard(k, ", spec.count,
                   ") == their index)"));
}

absl::Status MissingKeyError(absl::string_view table, absl::Span<const int64_t> shape,
                             int64_t position, int64_t key) {
  return absl::InvalidArgumentError(absl::StrCat("keys", FlatPositionToString(position, shape),
                                                 " = ", key, " is not a key of table '", table,
                                                 "'"));
}

absl::Status ForeignKeyError(absl::string_view name, const ShardSpec& spec, absl::string_view what,
                             absl::Span<const int64_t> shape, int64_t position, int64_t key,
                             absl::string_view reason) {
  return absl::FailedPreconditionError(
      absl::StrCat("tensor '", name, "' here is shard ", spec.index, " of ", spec.count,
                   " (sharded by key); ", what, FlatPositionToString(position, shape), " = ", key,
                   " is shard ", KeyShard(key, spec.count), "'s, and ", reason));
}

}  // namespace tensorcompute::core
