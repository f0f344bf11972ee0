// core/key_split.h: a lookup's keys split by shard by key (KeyShard) and put back together, on
// random keys (negative, extreme, repeated): every key goes to its owner once, each position's
// fetched row is its key's; an update's keys and deletes split by owner; the put's check and
// the words of each error.

#include "core/key_split.h"

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/key_index.h"
#include "core/shard_spec.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// Random keys with repeats and the extreme values.
std::vector<int64_t> RandomKeys(std::mt19937_64& rng, size_t n) {
  std::vector<int64_t> pool = {std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), 0, -1, 1};
  for (int i = 0; i < 40; ++i) pool.push_back(static_cast<int64_t>(rng()));
  std::vector<int64_t> keys(n);
  for (int64_t& key : keys) key = pool[rng() % pool.size()];
  return keys;
}

TEST(KeySplitTest, EveryKeyIsFetchedOnceFromItsOwner) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 200; ++round) {
    const int32_t count = static_cast<int32_t>(1 + rng() % 7);
    const std::vector<int64_t> keys = RandomKeys(rng, rng() % 60);
    const KeySplit split = SplitKeys(keys, count);
    ASSERT_EQ(split.keys.size(), static_cast<size_t>(count));
    ASSERT_EQ(split.first_row.size(), static_cast<size_t>(count));
    // The fetched rows, shard by shard: each shard's keys are its own and distinct.
    std::vector<int64_t> fetched;
    for (int32_t s = 0; s < count; ++s) {
      EXPECT_EQ(split.first_row[static_cast<size_t>(s)], static_cast<int64_t>(fetched.size()));
      for (int64_t key : split.keys[static_cast<size_t>(s)]) {
        EXPECT_EQ(KeyShard(key, count), s);
        fetched.push_back(key);
      }
    }
    EXPECT_EQ(split.fetched_rows, static_cast<int64_t>(fetched.size()));
    EXPECT_EQ(std::set<int64_t>(fetched.begin(), fetched.end()),
              std::set<int64_t>(keys.begin(), keys.end()));
    EXPECT_EQ(fetched.size(), std::set<int64_t>(keys.begin(), keys.end()).size());
    ASSERT_EQ(split.row_of.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(fetched[static_cast<size_t>(split.row_of[i])], keys[i]) << i;
    }
  }
}

TEST(KeySplitTest, UpdatesSplitByOwnerInOrder) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 100; ++round) {
    const int32_t count = static_cast<int32_t>(1 + rng() % 5);
    const std::vector<int64_t> keys = RandomKeys(rng, rng() % 30);
    const std::vector<int64_t> deletes = RandomKeys(rng, rng() % 10);
    const KeyUpdateSplit split = SplitKeyUpdate(keys, deletes, count);
    ASSERT_EQ(split.positions.size(), static_cast<size_t>(count));
    ASSERT_EQ(split.delete_keys.size(), static_cast<size_t>(count));
    std::vector<int64_t> want_positions, want_deletes;
    for (int32_t s = 0; s < count; ++s) {
      std::vector<int64_t> positions, dels;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (KeyShard(keys[i], count) == s) positions.push_back(static_cast<int64_t>(i));
      }
      for (int64_t key : deletes) {
        if (KeyShard(key, count) == s) dels.push_back(key);
      }
      EXPECT_EQ(split.positions[static_cast<size_t>(s)], positions);
      EXPECT_EQ(split.delete_keys[static_cast<size_t>(s)], dels);
    }
  }
}

TEST(KeySplitTest, APutHoldsOnlyItsShardsKeys) {
  const ShardSpec spec{0, 3, 0, true};
  std::vector<int64_t> keys;
  for (int64_t k = -50; keys.size() < 5; ++k) {
    if (KeyShard(k, 3) == 0) keys.push_back(k);
  }
  EXPECT_TRUE(CheckKeysOfShard("t", keys, spec).ok());
  EXPECT_EQ(ForeignKey(keys, spec), -1);
  int64_t other = 1000;
  while (KeyShard(other, 3) == 0) ++other;
  keys.insert(keys.begin() + 2, other);
  EXPECT_EQ(ForeignKey(keys, spec), 2);
  EXPECT_THAT(CheckKeysOfShard("t", keys, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("tensor 't': keys[2] = ", other, " belongs to shard ",
                                              KeyShard(other, 3), " of 3, not 0"))));
}

TEST(KeySplitTest, ShardKindsAndForeignKeyWords) {
  EXPECT_TRUE(CheckShardKind("t", ShardSpec{0, 2, 0, true}, true).ok());
  EXPECT_TRUE(CheckShardKind("t", ShardSpec{0, 2, 10, false}, false).ok());
  EXPECT_THAT(CheckShardKind("t", ShardSpec{0, 2, 0, true}, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a table sharded by key (shard.by_key) is a keyed table")));
  EXPECT_THAT(
      CheckShardKind("t", ShardSpec{0, 2, 10, false}, true),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keyed tables are sharded by key")));
  // A shard by key holds any number of rows.
  EXPECT_TRUE(ValidateShardSpec("t", ShardSpec{1, 3, 0, true}, 17).ok());
  EXPECT_THAT(ForeignKeyError("users", ShardSpec{0, 3, 0, true}, "keys", {2, 2}, 2, -1,
                              "this server has no --shard_peers to route it to"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("tensor 'users' here is shard 0 of 3 (sharded by key); "
                                    "keys[1,0] = -1 is shard ",
                                    KeyShard(-1, 3),
                                    "'s, and this server has no --shard_peers to route it to")));
}

}  // namespace
}  // namespace tensorcompute::core
