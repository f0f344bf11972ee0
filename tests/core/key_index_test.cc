// core/key_index.h: the key index against a std::unordered_map reference on random keys
// (negative, extreme, sequential runs), built with and without a pool; mutations interleaved at
// random; the first duplicate's message; growth; the memory bound; and KeyShard's published
// formula (its worked examples and an even spread).

#include "core/key_index.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::StatusIs;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// `n` unique keys: the extremes, 0 and -1, sequential runs (ascending from a random start, and
// around the extremes) and random values of every sign and size, in random order.
std::vector<int64_t> UniqueKeys(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<int64_t> seen;
  std::vector<int64_t> keys;
  auto add = [&](int64_t key) {
    if (static_cast<int64_t>(keys.size()) < n && seen.insert(key).second) keys.push_back(key);
  };
  for (int64_t key : {kMin, kMax, int64_t{0}, int64_t{-1}, int64_t{1}}) add(key);
  const int64_t run = std::max<int64_t>(1, n / 8);
  for (int64_t i = 0; i < run / 4; ++i) add(kMin + 1 + i), add(kMax - 1 - i);
  const auto start = static_cast<int64_t>(rng() >> 8);
  for (int64_t i = 0; i < run; ++i) add(start + i), add(-1000 - i);
  while (static_cast<int64_t>(keys.size()) < n) {
    const auto bits = static_cast<int64_t>(rng());
    add(rng() % 2 ? bits : bits >> (rng() % 64));  // small magnitudes as well as large
  }
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

// Keys not in `present`.
std::vector<int64_t> AbsentKeys(const std::vector<int64_t>& present, int64_t n, uint64_t seed) {
  std::unordered_set<int64_t> in(present.begin(), present.end());
  std::mt19937_64 rng(seed);
  std::vector<int64_t> absent;
  while (static_cast<int64_t>(absent.size()) < n) {
    const auto key = static_cast<int64_t>(rng()) >> (rng() % 40);
    if (!in.count(key)) absent.push_back(key);
  }
  return absent;
}

// Every key of the reference has its row, singly and batched, and absent keys give -1.
void ExpectMatches(const KeyIndex& index, const std::unordered_map<int64_t, int64_t>& reference,
                   const std::vector<int64_t>& absent) {
  ASSERT_EQ(index.size(), static_cast<int64_t>(reference.size()));
  std::vector<int64_t> queries, expected;
  for (const auto& [key, row] : reference) queries.push_back(key), expected.push_back(row);
  for (int64_t key : absent) {
    if (!reference.count(key)) queries.push_back(key), expected.push_back(-1);
  }
  std::shuffle(queries.begin(), queries.end(), std::mt19937_64(7));
  std::vector<int64_t> rows(queries.size());
  index.Find(queries, rows.data());
  for (size_t i = 0; i < queries.size(); ++i) {
    const auto it = reference.find(queries[i]);
    const int64_t want = it == reference.end() ? -1 : it->second;
    ASSERT_EQ(rows[i], want) << "batched, key " << queries[i];
    ASSERT_EQ(index.Find(queries[i]), want) << "single, key " << queries[i];
  }
}

std::unordered_map<int64_t, int64_t> ByPosition(const std::vector<int64_t>& keys) {
  std::unordered_map<int64_t, int64_t> reference;
  for (size_t i = 0; i < keys.size(); ++i) reference[keys[i]] = static_cast<int64_t>(i);
  return reference;
}

TEST(KeyIndexTest, EmptyFindsNothing) {
  KeyIndex index;
  EXPECT_EQ(index.size(), 0);
  EXPECT_EQ(index.Find(0), -1);
  EXPECT_EQ(index.Find(kMin), -1);
  EXPECT_EQ(index.Erase(5), -1);
  EXPECT_FALSE(index.Assign(5, 1));
  EXPECT_EQ(index.load_factor(), 0.0);
  const std::vector<int64_t> keys = {1, kMax};
  std::vector<int64_t> rows(2, 9);
  index.Find(keys, rows.data());
  EXPECT_THAT(rows, ::testing::ElementsAre(-1, -1));
  ASSERT_OK_AND_ASSIGN(KeyIndex built, KeyIndex::Build({}, nullptr));
  EXPECT_EQ(built.size(), 0);
  EXPECT_EQ(built.Find(0), -1);
}

TEST(KeyIndexTest, BuildMapsEachKeyToItsPosition) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 5, 6, 100, 1000, 20000, 200000}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << (p ? " pool" : " one thread"));
      const std::vector<int64_t> keys = UniqueKeys(n, n);
      ASSERT_OK_AND_ASSIGN(const KeyIndex index, KeyIndex::Build(keys, p));
      EXPECT_LE(index.load_factor(), KeyIndex::kMaxLoad);
      ExpectMatches(index, ByPosition(keys), AbsentKeys(keys, n / 4 + 10, n + 1));
    }
  }
}

TEST(KeyIndexTest, SequentialKeysBuild) {
  ThreadPool pool(3);
  for (int64_t start : {kMin, int64_t{-50000}, int64_t{0}, kMax - 99999}) {
    std::vector<int64_t> keys(100000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = start + static_cast<int64_t>(i);
    ASSERT_OK_AND_ASSIGN(const KeyIndex index, KeyIndex::Build(keys, &pool));
    // The neighbours of the run, wrapping around int64 (in uint64: no signed overflow).
    const auto before = static_cast<int64_t>(static_cast<uint64_t>(start) - 1);
    const auto after = static_cast<int64_t>(static_cast<uint64_t>(start) + 100000);
    ExpectMatches(index, ByPosition(keys), {before, after});
  }
}

// The first duplicate in position order: the smallest j with keys[j] == keys[i] for some i < j,
// and that i (the first occurrence).
std::string FirstDuplicateMessage(const std::vector<int64_t>& keys) {
  std::unordered_map<int64_t, int64_t> first;
  for (size_t j = 0; j < keys.size(); ++j) {
    const auto [it, inserted] = first.emplace(keys[j], j);
    if (!inserted) {
      return "keys[" + std::to_string(j) + "] = " + std::to_string(keys[j]) + " repeats keys[" +
             std::to_string(it->second) + "]";
    }
  }
  return "";
}

TEST(KeyIndexTest, DuplicateNamesBothPositions) {
  const std::vector<int64_t> keys = {10, 11, 12, -42, 14, 15, 16, -42};
  EXPECT_THAT(KeyIndex::Build(keys, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "keys[7] = -42 repeats keys[3]"));
  // The smallest later position wins, not the smallest earlier one.
  const std::vector<int64_t> nested = {1, 2, 3, 2, 1};
  EXPECT_THAT(KeyIndex::Build(nested, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "keys[3] = 2 repeats keys[1]"));
  const std::vector<int64_t> triple = {kMin, kMin, kMin};
  EXPECT_THAT(KeyIndex::Build(triple, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "keys[1] = " + std::to_string(kMin) + " repeats keys[0]"));
}

TEST(KeyIndexTest, FirstDuplicateIsTheSameWithAPool) {
  ThreadPool pool(3);
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::vector<int64_t>{50, 1000, 30000, 100000}[trial % 4];
    std::vector<int64_t> keys = UniqueKeys(n, trial);
    const int copies = 1 + static_cast<int>(rng() % 5);
    for (int c = 0; c < copies; ++c) keys[rng() % n] = keys[rng() % n];
    const std::string expected = FirstDuplicateMessage(keys);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n=" << n << ": " << expected);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const absl::StatusOr<KeyIndex> index = KeyIndex::Build(keys, p);
      if (expected.empty()) {
        EXPECT_TRUE(index.ok()) << index.status();  // every copy landed on itself
      } else {
        EXPECT_THAT(index.status(), StatusIs(absl::StatusCode::kInvalidArgument, expected));
      }
    }
  }
}

TEST(KeyIndexTest, TooManyKeysIsRefusedBeforeReading) {
  const int64_t one = 0;
  // Never read: the size alone is refused.
  const absl::Span<const int64_t> huge(&one, static_cast<size_t>(KeyIndex::kMaxRows));
  EXPECT_THAT(KeyIndex::Build(huge, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "keys: 2147483647 keys are too many for a key index (at most "
                       "2147483646)"));
}

// Batched Find follows the keys not in their home bucket in rounds of its own: small indexes
// (probes that wrap past the last bucket), one filled to the brink of growing (long chains), and
// more queries than one of Find's chunks, absent keys among them.
TEST(KeyIndexTest, BatchedFindFollowsLongChainsAndWrapsAround) {
  for (int64_t n = 1; n <= 80; ++n) {
    KeyIndex index;
    std::unordered_map<int64_t, int64_t> reference;
    for (int64_t key : UniqueKeys(n, 100 + n)) {
      const auto row = static_cast<int64_t>(reference.size());
      ASSERT_TRUE(index.Insert(key, row));
      reference[key] = row;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectMatches(index, reference, AbsentKeys(UniqueKeys(n, 1), 3 * n, 2)))
        << n << " keys";
  }
  std::vector<int64_t> keys = UniqueKeys(40000, 11);
  std::vector<int64_t> first(keys.begin(), keys.begin() + 20000);
  ASSERT_OK_AND_ASSIGN(KeyIndex index, KeyIndex::Build(first, nullptr));
  std::unordered_map<int64_t, int64_t> reference = ByPosition(first);
  const int64_t capacity = index.capacity();
  const auto most = static_cast<int64_t>(std::floor(capacity * KeyIndex::kMaxLoad));
  for (size_t i = first.size(); i < keys.size() && index.size() < most; ++i) {
    ASSERT_TRUE(index.Insert(keys[i], static_cast<int64_t>(i)));
    reference[keys[i]] = static_cast<int64_t>(i);
  }
  ASSERT_EQ(index.capacity(), capacity) << "filled without growing";
  ExpectMatches(index, reference, AbsentKeys(keys, 20000, 12));
}

TEST(KeyIndexTest, RandomMutationsMatchTheReference) {
  ThreadPool pool(2);
  const std::vector<int64_t> universe = UniqueKeys(30000, 99);
  const std::vector<int64_t> initial(universe.begin(), universe.begin() + 10000);
  ASSERT_OK_AND_ASSIGN(KeyIndex index, KeyIndex::Build(initial, &pool));
  std::unordered_map<int64_t, int64_t> reference = ByPosition(initial);
  std::mt19937_64 rng(5);
  for (int op = 0; op < 100000; ++op) {
    const int64_t key = universe[rng() % universe.size()];
    const int64_t row = static_cast<int64_t>(rng() % KeyIndex::kMaxRows);
    const bool present = reference.count(key) > 0;
    switch (rng() % 4) {
      case 0:
        ASSERT_EQ(index.Insert(key, row), !present) << "op " << op;
        if (!present) reference[key] = row;
        break;
      case 1:
        ASSERT_EQ(index.Assign(key, row), present) << "op " << op;
        if (present) reference[key] = row;
        break;
      case 2:
        ASSERT_EQ(index.Erase(key), present ? reference[key] : -1) << "op " << op;
        reference.erase(key);
        break;
      default:
        ASSERT_EQ(index.Find(key), present ? reference[key] : -1) << "op " << op;
    }
  }
  ExpectMatches(index, reference, AbsentKeys(universe, 1000, 3));
  EXPECT_LE(index.load_factor(), KeyIndex::kMaxLoad);
}

TEST(KeyIndexTest, ChurnAtAConstantSizeNeverGrows) {
  // Erase and insert at a steady size near the maximum load: no rehash, and lookups of absent
  // keys still end (no tombstones left behind).
  const std::vector<int64_t> keys = UniqueKeys(40000, 11);
  const std::vector<int64_t> live(keys.begin(), keys.begin() + 20000);
  ASSERT_OK_AND_ASSIGN(KeyIndex index, KeyIndex::Build(live, nullptr));
  const int64_t capacity = index.capacity();
  std::unordered_map<int64_t, int64_t> reference = ByPosition(live);
  std::vector<int64_t> in = live, out(keys.begin() + 20000, keys.end());
  std::mt19937_64 rng(12);
  for (int op = 0; op < 200000; ++op) {
    const size_t a = rng() % in.size(), b = rng() % out.size();
    ASSERT_EQ(index.Erase(in[a]), reference[in[a]]);
    reference.erase(in[a]);
    ASSERT_TRUE(index.Insert(out[b], op));
    reference[out[b]] = op;
    std::swap(in[a], out[b]);
  }
  EXPECT_EQ(index.capacity(), capacity);
  ExpectMatches(index, reference, out);
}

TEST(KeyIndexTest, GrowsFromEmptyAndReserveAvoidsRehash) {
  KeyIndex index;
  std::unordered_map<int64_t, int64_t> reference;
  int64_t growths = 0, capacity = index.capacity();
  for (int64_t i = 0; i < 100000; ++i) {
    const int64_t key = (i % 2 ? kMin : kMax) + (i % 2 ? i : -i);
    ASSERT_TRUE(index.Insert(key, i));
    reference[key] = i;
    ASSERT_LE(index.load_factor(), KeyIndex::kMaxLoad);
    if (index.capacity() != capacity) ++growths, capacity = index.capacity();
  }
  EXPECT_GT(growths, 10);
  ExpectMatches(index, reference, {0, -1, 1});

  KeyIndex reserved;
  reserved.Reserve(50000);
  const int64_t reserved_capacity = reserved.capacity();
  EXPECT_LE(reserved.memory_bytes(), 16 * 50000 + 64);
  for (int64_t i = 0; i < 50000; ++i) ASSERT_TRUE(reserved.Insert(i * 7919, i));
  EXPECT_EQ(reserved.capacity(), reserved_capacity);
  EXPECT_FALSE(reserved.Insert(7919, 3));
  EXPECT_EQ(reserved.Find(7919), 1);
  EXPECT_TRUE(reserved.Insert(-5, KeyIndex::kMaxRows - 1));
  EXPECT_EQ(reserved.Find(-5), KeyIndex::kMaxRows - 1);
}

TEST(KeyIndexTest, AtMostSixteenBytesPerKeyAfterBuild) {
  ThreadPool pool(1);
  const std::vector<int64_t> keys = UniqueKeys(1000000, 3);
  ASSERT_OK_AND_ASSIGN(const KeyIndex index, KeyIndex::Build(keys, &pool));
  EXPECT_EQ(index.size(), 1000000);
  EXPECT_LE(static_cast<double>(index.memory_bytes()) / index.size(), 16.0);
  EXPECT_NEAR(index.load_factor(), KeyIndex::kWorkingLoad, 0.01);
  std::vector<int64_t> rows(keys.size());
  index.Find(keys, rows.data());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(rows[i], static_cast<int64_t>(i));
}

TEST(KeyIndexTest, MovedIndexKeepsItsKeysAndConcurrentFindsAgree) {
  const std::vector<int64_t> keys = UniqueKeys(50000, 8);
  ASSERT_OK_AND_ASSIGN(KeyIndex built, KeyIndex::Build(keys, nullptr));
  KeyIndex index = std::move(built);
  EXPECT_EQ(built.size(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(built.Find(keys[0]), -1);
  std::vector<std::thread> readers;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::vector<int64_t> rows(keys.size());
      index.Find(keys, rows.data());
      for (size_t i = 0; i < keys.size(); ++i) wrong[t] += rows[i] != static_cast<int64_t>(i);
    });
  }
  for (std::thread& r : readers) r.join();
  EXPECT_THAT(wrong, ::testing::Each(0));
}

// ---- KeyShard ----

TEST(KeyShardTest, WorkedExamplesOfTheHeader) {
  EXPECT_EQ(KeyShardHash(1), 0x5692161d100b05e5ull);
  EXPECT_EQ(KeyShardHash(1), 6238072747940578789ull);
  EXPECT_EQ(KeyShard(1, 8), 5);
  EXPECT_EQ(KeyShardHash(-1), 0xb4d055fcf2cbbd7bull);
  EXPECT_EQ(KeyShardHash(-1), 13029008266876403067ull);
  EXPECT_EQ(KeyShard(-1, 10), 7);
  EXPECT_EQ(KeyShardHash(123456789), 0xf21c87d4233ffd60ull);
  EXPECT_EQ(KeyShardHash(123456789), 17445968401720671584ull);
  EXPECT_EQ(KeyShard(123456789, 10), 4);
  EXPECT_EQ(KeyShardHash(0), 0u);
  for (int64_t shards = 1; shards < 50; ++shards) EXPECT_EQ(KeyShard(0, shards), 0);
}

TEST(KeyShardTest, IsSplitmix64sFinalizerModShards) {
  // The formula written out again, independently, on random keys of every size.
  std::mt19937_64 rng(17);
  for (int i = 0; i < 10000; ++i) {
    const auto key = static_cast<int64_t>(rng()) >> (rng() % 64);
    const int64_t shards = 1 + static_cast<int64_t>(rng() % 1000);
    uint64_t z = static_cast<uint64_t>(key);
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 31;
    ASSERT_EQ(KeyShardHash(key), z);
    ASSERT_EQ(KeyShard(key, shards), static_cast<int64_t>(z % static_cast<uint64_t>(shards)));
    ASSERT_GE(KeyShard(key, shards), 0);
  }
}

// Pearson's statistic of the keys' shards against an even spread.
double ChiSquare(const std::vector<int64_t>& keys, int64_t shards) {
  std::vector<double> counts(shards, 0.0);
  for (int64_t key : keys) ++counts[KeyShard(key, shards)];
  const double expected = static_cast<double>(keys.size()) / shards;
  double chi = 0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

TEST(KeyShardTest, SpreadsKeysEvenly) {
  // Sequential keys, strided keys (high bits only) and random keys: with `shards` - 1 degrees
  // of freedom, the statistic stays below its mean plus 6 standard deviations.
  std::vector<std::vector<int64_t>> sets(3);
  std::mt19937_64 rng(2026);
  for (int64_t i = 0; i < 200000; ++i) {
    sets[0].push_back(i - 100000);
    sets[1].push_back(i << 40);
    sets[2].push_back(static_cast<int64_t>(rng()));
  }
  for (int64_t shards : {2, 3, 7, 16, 64, 100}) {
    const double dof = static_cast<double>(shards - 1);
    for (size_t s = 0; s < sets.size(); ++s) {
      EXPECT_LT(ChiSquare(sets[s], shards), dof + 6 * std::sqrt(2 * dof))
          << "set " << s << ", " << shards << " shards";
    }
  }
}

}  // namespace
}  // namespace tensorcompute::core
