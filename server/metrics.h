// File: server/metrics.h
//
// What an operator (and an autoscaler, and the tests) sees of load, latency and batching:
// requests by RPC and status code, requests in flight, a latency histogram per RPC, batches
// and their sizes (a histogram), and lookups by resident tensor. The time batches spent on
// each executor is metered_executor.h's. Queue depth and batches in flight are read live from the
// batcher at scrape time. prometheus_metrics.h serves all of it in the Prometheus text format.
//
// The hot path only does relaxed atomic adds (no lock, no allocation): prometheus-cpp's own
// Histogram takes a mutex on every Observe, so the counters live here and are converted to
// prometheus-cpp's metric families only when scraped.
//
// Thread-safety: every method may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_METRICS_H_
#define TENSORCOMPUTE_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

enum class Rpc {
  kGather = 0,
  kGatherNd = 1,
  kPutTensor = 2,
  kDeleteTensor = 3,
  kListTensors = 4,
  // KServe v2 (inference.GRPCInferenceService), and the same calls in its HTTP/REST form.
  kModelInfer = 5,
  kServerLive = 6,
  kServerReady = 7,
  kModelReady = 8,
  kServerMetadata = 9,
  kModelMetadata = 10,
  kEmbeddingBag = 11,
};
inline constexpr int kNumRpcs = 12;
inline constexpr int kNumCodes = 17;  // absl::StatusCode 0..16

const char* RpcName(Rpc rpc);

class Metrics {
 public:
  // Batch sizes are counted in buckets of upper bounds 1, 2, 4, ..., 2^(kBuckets-1), +inf.
  static constexpr int kBuckets = 12;
  // Request latency bucket upper bounds, in seconds (then +inf): 100 us to 10 s.
  static constexpr std::array<double, 16> kLatencyBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
  static constexpr int kLatencyBuckets = static_cast<int>(kLatencyBounds.size());

  // An RPC was accepted: in flight until its CountRequest.
  void RequestStarted() { inflight_.fetch_add(1, std::memory_order_relaxed); }
  // An accepted RPC that gRPC ended before its message arrived (cancelled by its client, or its
  // message refused by gRPC's own size limit): no longer in flight, and not counted, as gRPC's
  // own answers are not.
  void RequestAbandoned() { inflight_.fetch_sub(1, std::memory_order_relaxed); }
  // An RPC was answered with `code`, `latency` after it arrived.
  void CountRequest(Rpc rpc, absl::StatusCode code, absl::Duration latency);
  void CountBatch(int64_t size);
  // A connection was closed as soon as it was accepted because a listener had as many open as
  // it serves (the KServe HTTP front end's http_max_connections).
  void CountRejectedConnection() { rejected_connections_.fetch_add(1, std::memory_order_relaxed); }
  // An idle HTTP connection (waiting for a request's first byte) was closed to make room for a
  // new one at the listener's limit (kserve/http_idle_list.h).
  void CountIdleConnectionClosed() {
    idle_connections_closed_.fetch_add(1, std::memory_order_relaxed);
  }
  // A gather by params_name found resident tensor `name`. (Names are bounded by the tensors
  // ever stored; a short lock, beside the request's own costs.)
  void CountLookup(absl::string_view name);
  // Lookups by tensor name, including names since deleted.
  std::vector<std::pair<std::string, int64_t>> lookups() const;

  // A shard router's part (shard_router.h) for shard `shard` ended with `code` after
  // `latency`: a sub-call to a peer, or this server's own part. (A short lock, beside a
  // network round trip.)
  void CountShardCall(int32_t shard, absl::StatusCode code, absl::Duration latency);
  struct ShardCalls {
    std::array<int64_t, kNumCodes> by_code{};
    std::array<int64_t, kLatencyBuckets + 1> latency_buckets{};  // as latency_bucket()'s
    absl::Duration latency_total;
  };
  // By shard index, for every shard routed to so far.
  std::vector<std::pair<int32_t, ShardCalls>> shard_calls() const;

  int64_t requests(Rpc rpc, absl::StatusCode code) const;
  int64_t requests_total() const;
  int64_t inflight_requests() const { return inflight_.load(std::memory_order_relaxed); }
  int64_t batches() const { return batches_.load(); }
  int64_t rejected_connections() const {
    return rejected_connections_.load(std::memory_order_relaxed);
  }
  int64_t idle_connections_closed() const {
    return idle_connections_closed_.load(std::memory_order_relaxed);
  }
  int64_t batched_requests() const { return batched_requests_.load(); }
  int64_t max_batch_size() const { return max_batch_size_.load(); }
  // Batches whose size is <= 2^bucket and > 2^(bucket-1) (the last bucket: everything larger).
  int64_t batch_size_bucket(int bucket) const { return batch_buckets_[bucket].load(); }
  // Answers of `rpc` whose latency is <= kLatencyBounds[bucket] and above the bound before
  // (bucket kLatencyBuckets: everything slower).
  int64_t latency_bucket(Rpc rpc, int bucket) const {
    return latency_buckets_[static_cast<int>(rpc)][bucket].load(std::memory_order_relaxed);
  }
  absl::Duration latency_total(Rpc rpc) const {
    return absl::Nanoseconds(latency_ns_[static_cast<int>(rpc)].load(std::memory_order_relaxed));
  }
  absl::Duration latency_total() const {
    return latency_total(Rpc::kGather) + latency_total(Rpc::kGatherNd) +
           latency_total(Rpc::kEmbeddingBag);
  }

 private:
  mutable absl::Mutex shard_calls_mu_;
  absl::flat_hash_map<int32_t, ShardCalls> shard_calls_ ABSL_GUARDED_BY(shard_calls_mu_);
  mutable absl::Mutex lookups_mu_;
  absl::flat_hash_map<std::string, int64_t> lookups_ ABSL_GUARDED_BY(lookups_mu_);
  std::array<std::atomic<int64_t>, kNumRpcs * kNumCodes> requests_{};
  std::atomic<int64_t> inflight_{0};
  std::array<std::atomic<int64_t>, kNumRpcs> latency_ns_{};
  std::array<std::array<std::atomic<int64_t>, kLatencyBuckets + 1>, kNumRpcs> latency_buckets_{};
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> rejected_connections_{0};
  std::atomic<int64_t> idle_connections_closed_{0};
  std::atomic<int64_t> batched_requests_{0};
  std::atomic<int64_t> max_batch_size_{0};
  std::array<std::atomic<int64_t>, kBuckets + 1> batch_buckets_{};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_METRICS_H_
