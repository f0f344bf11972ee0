// File: server/metrics/metrics.h
//
// What an operator (and an autoscaler, and the tests) sees of load, latency and batching:
// requests by RPC and status code, requests in flight, each RPC's stage histograms (queue,
// compute, total) and sizes, the built-in models' statistics (a resident table's are its own,
// core::ResidentTensor::stats), and batches and their sizes (a histogram). The time batches spent
// on each executor is metered_executor.h's. Queue depth and batches in flight are read live from
// the batcher at scrape time. prometheus_metrics.h serves all of it in the Prometheus text format.
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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/request_stats.h"

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
  // Triton's extensions of KServe v2, over gRPC and HTTP.
  kModelConfig = 12,
  kModelStatistics = 13,
  kUpdateRows = 14,
};
inline constexpr int kNumRpcs = 15;
inline constexpr int kNumCodes = 17;  // absl::StatusCode 0..16

const char* RpcName(Rpc rpc);

// The front ends, for what is counted by front end (an answer given up unsent).
enum class FrontEndKind { kNative = 0, kKserveGrpc = 1, kKserveHttp = 2 };
inline constexpr int kNumFrontEnds = 3;
// "native", "kserve_grpc", "kserve_http": the metrics' front_end label.
const char* FrontEndName(FrontEndKind front_end);

// The built-in models: an op whose params come inline. A request on a resident table joins the
// table's statistics instead (core::ResidentTensor::stats).
enum class BuiltinModel { kGather = 0, kGatherNd = 1, kEmbeddingBag = 2 };
inline constexpr int kNumBuiltinModels = 3;
// "gather", "gather_nd", "embedding_bag": the KServe model names.
const char* BuiltinModelName(BuiltinModel model);

class Metrics {
 public:
  Metrics();

  // Batch sizes are counted in buckets of upper bounds 1, 2, 4, ..., 2^(kBuckets-1), +inf.
  static constexpr int kBuckets = 12;

  // An RPC was accepted: in flight until its CountRequest.
  void RequestStarted() { inflight_.fetch_add(1, std::memory_order_relaxed); }
  // An accepted RPC that gRPC ended before its message arrived (cancelled by its client, or its
  // message refused by gRPC's own size limit): no longer in flight, and not counted, as gRPC's
  // own answers are not.
  void RequestAbandoned() { inflight_.fetch_sub(1, std::memory_order_relaxed); }
  // An RPC was answered with `code` at `answered`, its stages as given: counted by code, and its
  // stages recorded in the RPC's statistics (rpc_stats).
  void CountRequest(Rpc rpc, absl::StatusCode code, const core::RequestStages& stages,
                    absl::Time answered);
  void CountBatch(int64_t size);
  // A connection was closed as soon as it was accepted because a listener had as many open as
  // it serves (the KServe HTTP front end's http_max_connections).
  void CountRejectedConnection() { rejected_connections_.fetch_add(1, std::memory_order_relaxed); }
  // A gRPC connection was closed as soon as it was accepted: fewer than descriptor_reserve file
  // descriptors were free (grpc_acceptor.h).
  void CountRefusedGrpcConnection() {
    refused_grpc_connections_.fetch_add(1, std::memory_order_relaxed);
  }
  // An idle HTTP connection (waiting for a request's first byte) was closed to make room for a
  // new one at the listener's limit (kserve/http_idle_list.h).
  void CountIdleConnectionClosed() {
    idle_connections_closed_.fetch_add(1, std::memory_order_relaxed);
  }

  // An answer was handed to the transport but not taken by its client within its send limit
  // (server/admission/send_deadline.h): its call was cancelled (gRPC) or its connection closed
  // (HTTP), and its budget freed.
  void CountAnswerNotTaken(FrontEndKind front_end) {
    answers_not_taken_[static_cast<int>(front_end)].fetch_add(1, std::memory_order_relaxed);
  }

  // A shard router's part (server/compute/shard_router.h) for shard `shard` ended with `code` after
  // `latency`: a sub-call to a peer, or this server's own part. (A short lock, beside a
  // network round trip.)
  void CountShardCall(int32_t shard, absl::StatusCode code, absl::Duration latency);
  struct ShardCalls {
    std::array<int64_t, kNumCodes> by_code{};
    std::shared_ptr<core::Histogram> latency;  // seconds, core::DurationBounds()
  };
  // By shard index, for every shard routed to so far.
  std::vector<std::pair<int32_t, ShardCalls>> shard_calls() const;

  // What each RPC's answers took, stage by stage, and their sizes.
  const core::RequestStats& rpc_stats(Rpc rpc) const { return rpc_stats_[static_cast<int>(rpc)]; }
  // The statistics of a built-in model (requests with params inline); shared so that a call
  // record may hold them like a table's.
  const std::shared_ptr<core::RequestStats>& model_stats(BuiltinModel model) const {
    return model_stats_[static_cast<int>(model)];
  }

  int64_t requests(Rpc rpc, absl::StatusCode code) const;
  int64_t requests_total() const;
  int64_t inflight_requests() const { return inflight_.load(std::memory_order_relaxed); }
  int64_t batches() const { return batches_.load(); }
  int64_t rejected_connections() const {
    return rejected_connections_.load(std::memory_order_relaxed);
  }
  int64_t refused_grpc_connections() const {
    return refused_grpc_connections_.load(std::memory_order_relaxed);
  }
  int64_t idle_connections_closed() const {
    return idle_connections_closed_.load(std::memory_order_relaxed);
  }
  int64_t answers_not_taken(FrontEndKind front_end) const {
    return answers_not_taken_[static_cast<int>(front_end)].load(std::memory_order_relaxed);
  }
  int64_t batched_requests() const { return batched_requests_.load(); }
  int64_t max_batch_size() const { return max_batch_size_.load(); }
  // Batches whose size is <= 2^bucket and > 2^(bucket-1) (the last bucket: everything larger).
  int64_t batch_size_bucket(int bucket) const { return batch_buckets_[bucket].load(); }

 private:
  mutable absl::Mutex shard_calls_mu_;
  absl::flat_hash_map<int32_t, ShardCalls> shard_calls_ ABSL_GUARDED_BY(shard_calls_mu_);
  std::array<std::atomic<int64_t>, kNumRpcs * kNumCodes> requests_{};
  std::atomic<int64_t> inflight_{0};
  std::array<core::RequestStats, kNumRpcs> rpc_stats_;
  std::array<std::shared_ptr<core::RequestStats>, kNumBuiltinModels> model_stats_;
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> rejected_connections_{0};
  std::atomic<int64_t> idle_connections_closed_{0};
  std::atomic<int64_t> refused_grpc_connections_{0};
  std::array<std::atomic<int64_t>, kNumFrontEnds> answers_not_taken_{};
  std::atomic<int64_t> batched_requests_{0};
  std::atomic<int64_t> max_batch_size_{0};
  std::array<std::atomic<int64_t>, kBuckets + 1> batch_buckets_{};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_METRICS_H_
