#include "client/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace tensorcompute::client {

// Bucket layout: group 0 holds 0..127 one value per bucket; group g >= 1 holds the values
// whose highest set bit is bit g + 6, in 128 buckets of width 2^(g-1).

int LatencyHistogram::BucketOf(int64_t nanos) {
  if (nanos < (1 << kSubBits)) return static_cast<int>(std::max<int64_t>(nanos, 0));
  const int top_bit = 63 - std::countl_zero(static_cast<uint64_t>(nanos));
  const int shift = top_bit - kSubBits;
  const int group = shift + 1;
  const int sub = static_cast<int>(nanos >> shift) - (1 << kSubBits);
  return std::min((group << kSubBits) + sub, kBuckets - 1);
}

int64_t LatencyHistogram::UpperBoundOf(int bucket) {
  const int group = bucket >> kSubBits;
  const int64_t sub = bucket & ((1 << kSubBits) - 1);
  if (group == 0) return sub;
  const int shift = group - 1;
  return (((int64_t{1} << kSubBits) + sub) << shift) + (int64_t{1} << shift) - 1;
}

LatencyHistogram::LatencyHistogram() : min_(std::numeric_limits<int64_t>::max()) {
  for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Record(int64_t nanos) {
  nanos = std::max<int64_t>(nanos, 0);
  counts_[BucketOf(nanos)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(nanos, std::memory_order_relaxed);
  // Lock-free minimum and maximum: retry while another thread moves them first.
  int64_t seen = min_.load(std::memory_order_relaxed);
  while (nanos < seen && !min_.compare_exchange_weak(seen, nanos, std::memory_order_relaxed)) {
  }
  seen = max_.load(std::memory_order_relaxed);
  while (nanos > seen && !max_.compare_exchange_weak(seen, nanos, std::memory_order_relaxed)) {
  }
}

int64_t LatencyHistogram::min() const {
  return count() == 0 ? 0 : min_.load(std::memory_order_relaxed);
}

int64_t LatencyHistogram::max() const { return max_.load(std::memory_order_relaxed); }

double LatencyHistogram::mean() const {
  const int64_t n = count();
  return n == 0 ? 0.0 : static_cast<double>(sum_.load(std::memory_order_relaxed)) / n;
}

int64_t LatencyHistogram::Quantile(double q) const {
  int64_t total = 0;
  for (const auto& c : counts_) total += c.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  // The rank of the value asked for, 1-based: the smallest value with at least q of all
  // values at or below it.
  const auto rank = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * total)), 1, total);
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[b].load(std::memory_order_relaxed);
    // A bucket's upper bound may lie beyond every value recorded in it: the exact min and max
    // keep the answer within what was seen (p100 is the max itself).
    if (seen >= rank) return std::clamp(UpperBoundOf(b), min(), max());
  }
  return max();
}

}  // namespace tensorcompute::client
