#include "core/request_stats.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace tensorcompute::core {
namespace {

constexpr std::array<double, 21> kDurationBounds = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0,   25.0, 60.0};

constexpr std::array<double, 13> kSizeBounds = {
    64.0,      256.0,     1024.0,     4096.0,     16384.0,     65536.0,     262144.0,
    1048576.0, 4194304.0, 16777216.0, 67108864.0, 268435456.0, 1073741824.0};

}  // namespace

absl::Span<const double> DurationBounds() { return kDurationBounds; }
absl::Span<const double> SizeBounds() { return kSizeBounds; }

Histogram::Histogram(absl::Span<const double> bounds) : bounds_(bounds) {
  assert(bounds.size() <= kMaxBounds);
}

void Histogram::Observe(double value) {
  // The first bound >= value: Prometheus's buckets are "less than or equal".
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  buckets_[it - bounds_.begin()].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  uint64_t seen = sum_bits_.load(std::memory_order_relaxed);
  while (!sum_bits_.compare_exchange_weak(
      seen, std::bit_cast<uint64_t>(std::bit_cast<double>(seen) + value),
      std::memory_order_relaxed)) {
  }
}

std::vector<int64_t> Histogram::buckets() const {
  std::vector<int64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = bucket(static_cast<int>(i));
  return out;
}

double Histogram::sum() const {
  return std::bit_cast<double>(sum_bits_.load(std::memory_order_relaxed));
}

RequestStats::RequestStats()
    : queue_(DurationBounds()),
      compute_(DurationBounds()),
      total_(DurationBounds()),
      request_bytes_(SizeBounds()),
      response_bytes_(SizeBounds()),
      update_visible_(DurationBounds()) {}

void RequestStats::RecordUpdate(int64_t rows, absl::Duration visible) {
  updated_rows_.fetch_add(rows, std::memory_order_relaxed);
  update_messages_.fetch_add(1, std::memory_order_relaxed);
  update_visible_.ObserveDuration(visible);
}

void RequestStats::Record(const RequestStages& stages, bool ok, absl::Time answered) {
  total_.ObserveDuration(stages.total);
  if (stages.computed) {
    queue_.ObserveDuration(stages.queue);
    compute_.ObserveDuration(stages.compute);
    request_bytes_.Observe(static_cast<double>(stages.request_bytes));
    if (ok) response_bytes_.Observe(static_cast<double>(stages.response_bytes));
  }
  if (!ok) {
    failure_.Add(stages.total);
  } else {
    success_.Add(stages.total);
    if (stages.computed) {
      decode_total_.Add(stages.decode);
      queue_total_.Add(stages.queue);
      compute_total_.Add(stages.compute);
      encode_total_.Add(std::max(absl::ZeroDuration(),
                                 stages.total - stages.decode - stages.queue - stages.compute));
    }
  }
  last_answer_ms_.store(absl::ToUnixMillis(answered), std::memory_order_relaxed);
}

}  // namespace tensorcompute::core
