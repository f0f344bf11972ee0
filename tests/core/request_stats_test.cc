// core::Histogram and core::RequestStats: bucket edges as Prometheus counts them ("less than or
// equal"), sums and counts, what a request's stages add to each statistic, and that records
// from many threads at once add up exactly.

#include "core/request_stats.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tensorcompute::core {
namespace {

TEST(HistogramTest, AValueOnABoundIsInThatBucketAndAboveTheLastInfinity) {
  const std::vector<double> bounds = {1, 2, 4};
  Histogram h(bounds);
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 4.5, 100.0}) h.Observe(v);
  EXPECT_EQ(h.buckets(), (std::vector<int64_t>{2, 2, 1, 2}));
  EXPECT_EQ(h.count(), 7);
  EXPECT_DOUBLE_EQ(h.sum(), 113.5);
}

TEST(HistogramTest, DurationsAreSecondsInTheSharedBounds) {
  Histogram h(DurationBounds());
  ASSERT_EQ(DurationBounds().front(), 1e-5);
  ASSERT_EQ(DurationBounds().back(), 60.0);
  h.ObserveDuration(absl::Microseconds(10));  // on the first bound
  h.ObserveDuration(absl::Microseconds(11));  // the second bucket
  h.ObserveDuration(absl::Seconds(61));       // +Inf
  EXPECT_EQ(h.bucket(0), 1);
  EXPECT_EQ(h.bucket(1), 1);
  EXPECT_EQ(h.bucket(static_cast<int>(DurationBounds().size())), 1);
  EXPECT_NEAR(h.sum(), 61.000021, 1e-9);
}

TEST(HistogramTest, BoundsIncreaseAndFit) {
  for (absl::Span<const double> bounds : {DurationBounds(), SizeBounds()}) {
    ASSERT_LE(bounds.size(), static_cast<size_t>(Histogram::kMaxBounds));
    for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]);
  }
  EXPECT_EQ(SizeBounds().front(), 64.0);
  EXPECT_EQ(SizeBounds().back(), 1073741824.0);
}

TEST(HistogramTest, ConcurrentObservationsAddUpExactly) {
  Histogram h(DurationBounds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.Observe(t == 0 ? 0.5 : 0.25);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(h.count(), 40000);
  EXPECT_DOUBLE_EQ(h.sum(), 10000 * 0.5 + 30000 * 0.25);  // exact in binary
  int64_t total = 0;
  for (int64_t n : h.buckets()) total += n;
  EXPECT_EQ(total, 40000);
}

RequestStages Computed(int decode_us, int queue_us, int compute_us, int total_us) {
  RequestStages s;
  s.computed = true;
  s.decode = absl::Microseconds(decode_us);
  s.queue = absl::Microseconds(queue_us);
  s.compute = absl::Microseconds(compute_us);
  s.total = absl::Microseconds(total_us);
  s.request_bytes = 100;
  s.response_bytes = 5000;
  return s;
}

TEST(RequestStatsTest, ASuccessCountsEveryStageAndTheEncodingIsTheRest) {
  RequestStats stats;
  const absl::Time answered = absl::FromUnixMillis(1700000000123);
  stats.Record(Computed(10, 20, 30, 100), /*ok=*/true, answered);
  EXPECT_EQ(stats.success().count(), 1);
  EXPECT_EQ(stats.success().ns(), 100000);
  EXPECT_EQ(stats.failure().count(), 0);
  EXPECT_EQ(stats.decode_total().ns(), 10000);
  EXPECT_EQ(stats.queue_total().ns(), 20000);
  EXPECT_EQ(stats.compute_total().ns(), 30000);
  EXPECT_EQ(stats.encode_total().ns(), 40000);
  EXPECT_EQ(stats.total().count(), 1);
  EXPECT_EQ(stats.queue().count(), 1);
  EXPECT_EQ(stats.compute().count(), 1);
  EXPECT_DOUBLE_EQ(stats.request_bytes().sum(), 100);
  EXPECT_DOUBLE_EQ(stats.response_bytes().sum(), 5000);
  EXPECT_EQ(stats.last_answer_ms(), 1700000000123);
}

TEST(RequestStatsTest, AFailureCountsItsTimeButNoStagesOfASuccess) {
  RequestStats stats;
  stats.Record(Computed(10, 20, 30, 100), /*ok=*/false, absl::Now());
  RequestStages refused;  // never computed: only its total
  refused.total = absl::Microseconds(7);
  stats.Record(refused, /*ok=*/false, absl::Now());
  EXPECT_EQ(stats.failure().count(), 2);
  EXPECT_EQ(stats.failure().ns(), 107000);
  EXPECT_EQ(stats.success().count(), 0);
  EXPECT_EQ(stats.queue_total().count(), 0);
  EXPECT_EQ(stats.total().count(), 2);
  EXPECT_EQ(stats.queue().count(), 1);  // the computed one's histograms
  EXPECT_EQ(stats.request_bytes().count(), 1);
  EXPECT_EQ(stats.response_bytes().count(), 0);  // no answer bytes for a failure
}

}  // namespace
}  // namespace tensorcompute::core
