// File: client/latency_histogram.h
//
// A fixed-memory histogram of durations for the load tester, in the manner of HdrHistogram
// (which Debian does not package): log-linear buckets, 128 sub-buckets per power of two, so a
// recorded value is known to within 1/128 (< 0.8%) of itself, from 1 ns to about 2^40 ns
// (18 minutes; larger values land in the last bucket). Percentiles report the bucket's upper
// bound, never under-stating a latency; min and max are exact.
//
// Thread-safety: Record is lock-free and may be called from any number of threads at once
// (relaxed atomics); the readers see every Record that happened before them.

#ifndef TENSORCOMPUTE_CLIENT_LATENCY_HISTOGRAM_H_
#define TENSORCOMPUTE_CLIENT_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace tensorcompute::client {

class LatencyHistogram {
 public:
  LatencyHistogram();

  // Adds one value in nanoseconds; negative values count as 0.
  void Record(int64_t nanos);

  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Exact smallest and largest recorded values; 0 when empty.
  int64_t min() const;
  int64_t max() const;
  double mean() const;
  // The value below or at which `q` (0..1) of the recorded values lie, as the upper bound of
  // that value's bucket (capped at max()); 0 when empty.
  int64_t Quantile(double q) const;

  // --- implementation details below ---
  static constexpr int kSubBits = 7;  // 128 sub-buckets per power of two
  static constexpr int kBuckets = (41 - kSubBits + 1) << kSubBits;
  static int BucketOf(int64_t nanos);
  static int64_t UpperBoundOf(int bucket);

 private:
  std::array<std::atomic<int64_t>, kBuckets> counts_;
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> sum_{0};
  std::atomic<int64_t> min_;
  std::atomic<int64_t> max_{0};
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_LATENCY_HISTOGRAM_H_
