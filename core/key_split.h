// File: core/key_split.h
//
// Keyed tables sharded by key (issue 42): shard `index` of `count` holds the keys k with
// KeyShard(k, count) == index (core/key_index.h spells the hash out, so a trainer can compute a
// key's owner itself). These pure functions split a request's keys by owner and word the errors
// of a key on the wrong shard.
//
//   SplitKeys        a lookup by keys: the distinct keys each shard is asked for, and for each
//                    of the request's positions the place of its key's row among the rows
//                    fetched (shard 0's keys, then shard 1's, ...), so that the request's own
//                    missing-keys policy, found mask and pooling are applied once all are back,
//                    with the request's positions.
//   SplitKeyUpdate   an UpdateRows message by keys: its keys (with their rows) and delete_keys
//                    by shard.
//   CheckKeysOfShard a put of one shard: every key must be the shard's.
//   ForeignKey       the first key of a request that another shard holds.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_KEY_SPLIT_H_
#define TENSORCOMPUTE_CORE_KEY_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "core/shard_spec.h"

namespace tensorcompute::core {

// A lookup's keys split by owning shard.
struct KeySplit {
  // Per shard: the distinct keys to fetch from it, in first-use order.
  std::vector<std::vector<int64_t>> keys;
  // Per shard: where its keys' rows start among the fetched rows (shard by shard).
  std::vector<int64_t> first_row;
  // All the keys fetched: the fetched rows.
  int64_t fetched_rows = 0;
  // Per position of the request: its key's fetched row.
  std::vector<int64_t> row_of;
};

// REQUIRES: 1 <= count <= kMaxShards.
KeySplit SplitKeys(absl::Span<const int64_t> keys, int32_t count);

// An update message by keys split by owning shard: per shard, the positions of `keys` it owns
// (in order) and the delete_keys it owns (in order). Every shard has an entry, possibly empty.
struct KeyUpdateSplit {
  std::vector<std::vector<int64_t>> positions;
  std::vector<std::vector<int64_t>> delete_keys;
};
KeyUpdateSplit SplitKeyUpdate(absl::Span<const int64_t> keys, absl::Span<const int64_t> delete_keys,
                              int32_t count);

// The first position of `keys` whose owner is not spec.index; -1 when every key is the shard's.
// REQUIRES: spec.by_key, a valid spec.
int64_t ForeignKey(absl::Span<const int64_t> keys, const ShardSpec& spec);

// The kinds of table a shard spec fits: a shard by key is a keyed table's, and a keyed table
// is sharded by key. INVALID_ARGUMENT otherwise: "tensor 'T': a table sharded by key
// (shard.by_key) is a keyed table; put it with keys", or "tensor 'T': a keyed table is not
// sharded by row ranges: keyed tables are sharded by key (shard.by_key)".
absl::Status CheckShardKind(absl::string_view name, const ShardSpec& spec, bool keyed);

// OK when every key of a put of shard `spec` is the shard's; else INVALID_ARGUMENT naming the
// first other one, "tensor 'T': keys[5] = 123 belongs to shard 2 of 3, not 0 (shards of a
// keyed table hold the keys k with KeyShard(k, 3) == their index)".
absl::Status CheckKeysOfShard(absl::string_view name, absl::Span<const int64_t> keys,
                              const ShardSpec& spec);

// The ERROR policy's answer for a key the table lacks, at flat position `position` of the
// request's keys of `shape`: INVALID_ARGUMENT "keys[1,0] = 90210 is not a key of table 'users'"
// (KeyedRows::Resolve's, and a router's when a shard by key answers that a key is missing).
absl::Status MissingKeyError(absl::string_view table, absl::Span<const int64_t> shape,
                             int64_t position, int64_t key);

// FAILED_PRECONDITION for a lookup or update (`what`: "keys" or "delete_keys") on shard `spec`
// of table `name`, naming the key at flat position `position` of `shape` and the shard owning
// it: "tensor 'T' here is shard 0 of 3 (sharded by key); keys[1,0] = 90210 is shard 2's, and
// <reason>".
absl::Status ForeignKeyError(absl::string_view name, const ShardSpec& spec, absl::string_view what,
                             absl::Span<const int64_t> shape, int64_t position, int64_t key,
                             absl::string_view reason);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_KEY_SPLIT_H_
