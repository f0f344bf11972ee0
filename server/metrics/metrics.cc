#include "server/metrics/metrics.h"

#include <algorithm>
#include <utility>

namespace tensorcompute::server {
namespace {

// The slot of (rpc, code) in the flat requests_ array. absl::StatusCode is an open enum (a code
// cast from a peer's number can be anything), so one outside 0..16 is counted as UNKNOWN rather
// than indexing past the array.
int Index(Rpc rpc, absl::StatusCode code) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  return static_cast<int>(rpc) * kNumCodes + c;
}

}  // namespace

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kGather:
      return "Gather";
    case Rpc::kGatherNd:
      return "GatherNd";
    case Rpc::kPutTensor:
      return "PutTensor";
    case Rpc::kDeleteTensor:
      return "DeleteTensor";
    case Rpc::kListTensors:
      return "ListTensors";
    case Rpc::kModelInfer:
      return "ModelInfer";
    case Rpc::kServerLive:
      return "ServerLive";
    case Rpc::kServerReady:
      return "ServerReady";
    case Rpc::kModelReady:
      return "ModelReady";
    case Rpc::kServerMetadata:
      return "ServerMetadata";
    case Rpc::kModelMetadata:
      return "ModelMetadata";
    case Rpc::kEmbeddingBag:
      return "EmbeddingBag";
    case Rpc::kModelConfig:
      return "ModelConfig";
    case Rpc::kModelStatistics:
      return "ModelStatistics";
    case Rpc::kUpdateRows:
      return "UpdateRows";
  }
  return "?";
}

const char* BuiltinModelName(BuiltinModel model) {
  switch (model) {
    case BuiltinModel::kGather:
      return "gather";
    case BuiltinModel::kGatherNd:
      return "gather_nd";
    case BuiltinModel::kEmbeddingBag:
      return "embedding_bag";
  }
  return "?";
}

const char* FrontEndName(FrontEndKind front_end) {
  switch (front_end) {
    case FrontEndKind::kNative:
      return "native";
    case FrontEndKind::kKserveGrpc:
      return "kserve_grpc";
    case FrontEndKind::kKserveHttp:
      return "kserve_http";
  }
  return "?";
}

Metrics::Metrics() {
  for (auto& stats : model_stats_) stats = std::make_shared<core::RequestStats>();
}

void Metrics::CountRequest(Rpc rpc, absl::StatusCode code, const core::RequestStages& stages,
                           absl::Time answered) {
  requests_[Index(rpc, code)].fetch_add(1, std::memory_order_relaxed);
  rpc_stats_[static_cast<int>(rpc)].Record(stages, code == absl::StatusCode::kOk, answered);
  inflight_.fetch_sub(1, std::memory_order_relaxed);
}

void Metrics::CountBatch(int64_t size) {
  batches_.fetch_add(1, std::memory_order_relaxed);
  batched_requests_.fetch_add(size, std::memory_order_relaxed);
  // A lock-free running maximum: a failed exchange reloads `seen`, and the loop ends once another
  // thread has stored a size at least this large.
  int64_t seen = max_batch_size_.load(std::memory_order_relaxed);
  while (size > seen && !max_batch_size_.compare_exchange_weak(seen, size)) {
  }
  // The smallest bucket whose bound 2^bucket holds `size`; past the last bound, the +inf bucket.
  int bucket = 0;
  while (bucket < kBuckets && (int64_t{1} << bucket) < size) ++bucket;
  batch_buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::CountShardCall(int32_t shard, absl::StatusCode code, absl::Duration latency) {
  // A mutex, unlike the counters above: the map grows when a shard is first seen.
  const int c = static_cast<int>(code);
  absl::MutexLock lock(&shard_calls_mu_);
  ShardCalls& calls = shard_calls_[shard];
  ++calls.by_code[c >= 0 && c < kNumCodes ? c : static_cast<int>(absl::StatusCode::kUnknown)];
  // Shared, not copied, by shard_calls(): a Histogram holds atomics and cannot be copied.
  if (calls.latency == nullptr) {
    calls.latency = std::make_shared<core::Histogram>(core::DurationBounds());
  }
  calls.latency->ObserveDuration(latency);
}

std::vector<std::pair<int32_t, Metrics::ShardCalls>> Metrics::shard_calls() const {
  // A copy under the lock; the histograms it points to are read after, while they may still grow
  // (their own atomics keep that safe).
  absl::MutexLock lock(&shard_calls_mu_);
  std::vector<std::pair<int32_t, ShardCalls>> out(shard_calls_.begin(), shard_calls_.end());
  // flat_hash_map's order is unspecified; the scrape lists shards in order.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

int64_t Metrics::requests(Rpc rpc, absl::StatusCode code) const {
  return requests_[Index(rpc, code)].load(std::memory_order_relaxed);
}

int64_t Metrics::requests_total() const {
  int64_t n = 0;
  for (const auto& c : requests_) n += c.load(std::memory_order_relaxed);
  return n;
}

}  // namespace tensorcompute::server
