// LatencyHistogram: bucket bounds, quantiles within the stated precision, exact min/max,
// concurrent recording.

#include "client/latency_histogram.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tensorcompute::client {
namespace {

TEST(LatencyHistogram, BucketsCoverEveryValueWithinPrecision) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{128}, int64_t{255}, int64_t{256},
                    int64_t{1000}, int64_t{123456789}, int64_t{1} << 40}) {
    const int b = LatencyHistogram::BucketOf(v);
    EXPECT_GE(LatencyHistogram::UpperBoundOf(b), v) << v;
    EXPECT_LE(LatencyHistogram::UpperBoundOf(b), v + v / 128 + 1) << v;
    if (b > 0) {
      EXPECT_LT(LatencyHistogram::UpperBoundOf(b - 1), v) << v;
    }
  }
  for (int b = 1; b < LatencyHistogram::kBuckets; ++b) {
    ASSERT_GT(LatencyHistogram::UpperBoundOf(b), LatencyHistogram::UpperBoundOf(b - 1)) << b;
  }
}

TEST(LatencyHistogram, EmptyReportsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.Quantile(0.5), 0);
}

TEST(LatencyHistogram, QuantilesMatchSortedValues) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(12, 1.5);  // around 160 us, long tail
  std::vector<int64_t> values(100000);
  LatencyHistogram h;
  for (auto& v : values) {
    v = static_cast<int64_t>(dist(rng));
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  EXPECT_EQ(h.count(), 100000);
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const int64_t exact = values[static_cast<size_t>(q * values.size()) - 1];
    EXPECT_GE(h.Quantile(q), exact) << q;
    EXPECT_LE(h.Quantile(q), exact + exact / 100) << q;
  }
  EXPECT_EQ(h.Quantile(1.0), values.back());
}

TEST(LatencyHistogram, ConcurrentRecordsAreAllCounted) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 50000; ++i) h.Record(1000 + t);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 200000);
  EXPECT_EQ(h.min(), 1000);
  EXPECT_EQ(h.max(), 1003);
  EXPECT_DOUBLE_EQ(h.mean(), 1001.5);
}

}  // namespace
}  // namespace tensorcompute::client
