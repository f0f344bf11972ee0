// core/row_cache_policy.h: the placement's invariants against a shadow map on random calls,
// set-associative LRU eviction, TinyLFU admission, and hit rates against a plain LRU on a
// power-law trace and across a scan (issue 43).

#include "core/row_cache_policy.h"

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

#include "tests/testing/cache_traces.h"

namespace tensorcompute::core {
namespace {

using Policy = RowCachePolicy;

// `count` distinct rows of `set`, from row `from` on.
std::vector<int64_t> RowsOfSet(const Policy& policy, int64_t set, int count, int64_t from = 0) {
  std::vector<int64_t> rows;
  for (int64_t row = from; static_cast<int>(rows.size()) < count; ++row) {
    if (policy.Set(row) == set) rows.push_back(row);
  }
  return rows;
}

TEST(RowCachePolicy, CapacityIsWholeSets) {
  EXPECT_EQ(Policy(100, {}).capacity(), 96);
  EXPECT_EQ(Policy(100, {}).sets(), 12);
  EXPECT_EQ(Policy(3, {}).capacity(), Policy::kWays);  // at least one set
}

TEST(RowCachePolicy, RandomCallsKeepEveryRowInOneSlotOfItsSet) {
  for (bool admission : {false, true}) {
    Policy policy(200, {admission});
    absl::flat_hash_map<int64_t, int64_t> slot_of;  // the shadow: row -> slot
    std::mt19937_64 rng(43);
    for (int step = 0; step < 20000; ++step) {
      const int64_t row = static_cast<int64_t>(rng() % 600);
      const auto shadow = slot_of.find(row);
      if (rng() % 10 == 0) {
        EXPECT_EQ(policy.Erase(row), shadow == slot_of.end() ? -1 : shadow->second);
        if (shadow != slot_of.end()) slot_of.erase(shadow);
        continue;
      }
      const int frequency = policy.Frequency(row);
      ASSERT_EQ(policy.Slot(row), shadow == slot_of.end() ? -1 : shadow->second) << step;
      ASSERT_EQ(policy.Frequency(row), frequency) << "Slot counts nothing";
      const int64_t found = policy.Find(row);
      ASSERT_EQ(found, shadow == slot_of.end() ? -1 : shadow->second) << "step " << step;
      if (found >= 0) continue;
      const Policy::Placement placed = policy.Admit(row);
      if (placed.slot < 0) {
        ASSERT_TRUE(admission) << "only admission refuses a row";
        continue;
      }
      const int64_t first = policy.Set(row) * Policy::kWays;
      ASSERT_GE(placed.slot, first);
      ASSERT_LT(placed.slot, first + Policy::kWays);
      if (placed.evicted >= 0) {
        ASSERT_EQ(slot_of.at(placed.evicted), placed.slot);
        slot_of.erase(placed.evicted);
      }
      for (const auto& [other, slot] : slot_of) ASSERT_NE(slot, placed.slot) << other;
      slot_of[row] = placed.slot;
      ASSERT_EQ(policy.size(), static_cast<int64_t>(slot_of.size()));
      ASSERT_LE(policy.size(), policy.capacity());
    }
  }
}

TEST(RowCachePolicy, AFullSetEvictsItsLeastRecentlyUsedRow) {
  Policy policy(64, {false});
  const std::vector<int64_t> rows = RowsOfSet(policy, 3, Policy::kWays + 1);
  for (int i = 0; i < Policy::kWays; ++i) {
    ASSERT_EQ(policy.Find(rows[i]), -1);
    EXPECT_EQ(policy.Admit(rows[i]).evicted, -1);
  }
  ASSERT_GE(policy.Find(rows[0]), 0);  // rows[1] is now the least recently used
  const Policy::Placement placed = policy.Admit(rows[Policy::kWays]);
  EXPECT_EQ(placed.evicted, rows[1]);
  EXPECT_EQ(policy.Find(rows[1]), -1);
  EXPECT_EQ(policy.Find(rows[Policy::kWays]), placed.slot);
}

TEST(RowCachePolicy, AdmissionKeepsFrequentRowsAgainstAOneOff) {
  Policy policy(64, {true});
  const std::vector<int64_t> rows = RowsOfSet(policy, 5, Policy::kWays + 1);
  for (int i = 0; i < Policy::kWays; ++i) {
    for (int ask = 0; ask < 3; ++ask) {
      if (policy.Find(rows[i]) < 0) {
        ASSERT_GE(policy.Admit(rows[i]).slot, 0);
      }
    }
  }
  const int64_t newcomer = rows[Policy::kWays];
  ASSERT_EQ(policy.Find(newcomer), -1);
  EXPECT_EQ(policy.Admit(newcomer).slot, -1) << "asked once, against rows asked three times";
  for (int i = 0; i < Policy::kWays; ++i) EXPECT_GE(policy.Find(rows[i]), 0);
  // Asked more often than the set's least recently used row, it gets in.
  for (int ask = 0; ask < 6; ++ask) ASSERT_EQ(policy.Find(newcomer), -1);
  const Policy::Placement placed = policy.Admit(newcomer);
  EXPECT_GE(placed.slot, 0);
  EXPECT_EQ(placed.evicted, rows[0]);  // the least recently used of the eight
}

TEST(RowCachePolicy, OldPopularityFades) {
  Policy policy(64, {true});
  for (int ask = 0; ask < 12; ++ask) policy.Find(7);
  const int before = policy.Frequency(7);
  EXPECT_GE(before, 10);
  // Rows asked for once reach only the doorkeeper: they age nothing.
  for (int64_t row = 1000; row < 1000 + Policy::kSampleFactor * policy.capacity(); ++row) {
    policy.Find(row);
  }
  EXPECT_GE(policy.Frequency(7), before - 1);  // its doorkeeper bit may have been cleared
  // kSampleFactor x capacity() counts (rows asked for twice) halve every counter.
  for (int64_t row = 5000; row < 5000 + Policy::kSampleFactor * policy.capacity(); ++row) {
    policy.Find(row);
    policy.Find(row);
  }
  EXPECT_LE(policy.Frequency(7), before / 2);
}

// A table of 100,000 rows, a cache of a fifth of it, and power-law traces (exponent 1.2).
constexpr int64_t kTableRows = 100000;
constexpr int64_t kCacheRows = kTableRows / 5;

TEST(RowCachePolicy, PowerLawHitRateBeatsPlainLru) {
  // Exponent 1.2 (most accesses to few rows: LRU is near the best there too) and 0.9, caches of
  // a hundredth and a fifth of the table. Measured: 0.811 against 0.795 and 0.939 against
  // 0.938 at 1.2; 0.405 against 0.342 and 0.731 against 0.702 at 0.9.
  for (double exponent : {1.2, 0.9}) {
    std::mt19937_64 rng(1200);
    const std::vector<int64_t> trace = testing::PowerLawTrace(kTableRows, exponent, 1000000, rng);
    for (int64_t cache : {kTableRows / 100, kCacheRows}) {
      Policy policy(cache, {true});
      testing::LruCache lru(cache);
      const double ours = testing::HitRate(policy, trace);
      const double plain = testing::HitRate(lru, trace);
      EXPECT_GT(ours, plain) << "exponent " << exponent << ", cache " << cache;
      if (exponent < 1) {
        EXPECT_GT(ours, 1.03 * plain) << "cache " << cache;
      }
    }
  }
}

TEST(RowCachePolicy, AScanDoesNotFlushTheHotRows) {
  std::mt19937_64 rng(1201);
  const std::vector<int64_t> trace = testing::PowerLawTrace(kTableRows, 1.2, 600000, rng);
  const absl::Span<const int64_t> warm = absl::MakeConstSpan(trace).first(500000);
  const absl::Span<const int64_t> after = absl::MakeConstSpan(trace).subspan(500000);
  const std::vector<int64_t> scan = testing::ScanTrace(kTableRows);  // five caches' worth
  Policy policy(kCacheRows, {true});
  testing::LruCache lru(kCacheRows);
  const double ours_before = testing::HitRate(policy, warm);
  testing::HitRate(lru, warm);
  testing::HitRate(policy, scan);
  testing::HitRate(lru, scan);
  // The first 10,000 accesses after the scan: LRU has lost its hot rows, TinyLFU has not.
  const absl::Span<const int64_t> next = after.first(10000);
  const double ours_after = testing::HitRate(policy, next);
  const double plain_after = testing::HitRate(lru, next);
  EXPECT_GT(ours_after, 0.9 * ours_before);
  EXPECT_GT(ours_after, plain_after + 0.05);
}

}  // namespace
}  // namespace tensorcompute::core
