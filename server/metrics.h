// File: server/metrics.h
//
// Counters that let an operator (and the tests) see load and batching without a debugger:
// requests by RPC and status code, batches and their sizes (a histogram), request latency.
// Queue depth is read live from the batcher. All counters are lock-free atomics.
// (The Prometheus endpoint that serves them comes with the deployment issue.)
//
// Thread-safety: every method may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_METRICS_H_
#define TENSORCOMPUTE_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

enum class Rpc { kGather = 0, kGatherNd = 1 };
inline constexpr int kNumRpcs = 2;
inline constexpr int kNumCodes = 17;  // absl::StatusCode 0..16

class Metrics {
 public:
  // Batch sizes are counted in buckets of upper bounds 1, 2, 4, ..., 2^(kBuckets-1), +inf.
  static constexpr int kBuckets = 12;

  void CountRequest(Rpc rpc, absl::StatusCode code, absl::Duration latency);
  void CountBatch(int64_t size);

  int64_t requests(Rpc rpc, absl::StatusCode code) const;
  int64_t requests_total() const;
  int64_t batches() const { return batches_.load(); }
  int64_t batched_requests() const { return batched_requests_.load(); }
  int64_t max_batch_size() const { return max_batch_size_.load(); }
  // Batches whose size is <= 2^bucket and > 2^(bucket-1) (the last bucket: everything larger).
  int64_t batch_size_bucket(int bucket) const { return batch_buckets_[bucket].load(); }
  absl::Duration latency_total() const;

 private:
  std::array<std::atomic<int64_t>, kNumRpcs * kNumCodes> requests_{};
  std::atomic<int64_t> latency_ns_{0};
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> batched_requests_{0};
  std::atomic<int64_t> max_batch_size_{0};
  std::array<std::atomic<int64_t>, kBuckets + 1> batch_buckets_{};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_METRICS_H_
