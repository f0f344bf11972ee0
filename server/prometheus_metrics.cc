#include "server/prometheus_metrics.h"

#include <exception>
#include <limits>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace tensorcompute::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

ClientMetric Gauge(double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  return metric;
}

ClientMetric Counter(double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  return metric;
}

// `counts[i]` observations fell in bucket i (non-cumulative; the last is +Inf), whose upper
// bound is `bounds[i]`.
ClientMetric Histogram(const std::vector<double>& bounds, const std::vector<int64_t>& counts,
                       double sum, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += static_cast<uint64_t>(counts[i]);
    ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = sum;
  return metric;
}

ClientMetric Histogram(const core::Histogram& h, std::vector<ClientMetric::Label> labels) {
  return Histogram({h.bounds().begin(), h.bounds().end()}, h.buckets(), h.sum(), std::move(labels));
}

// The compute RPCs: the ones with queue and compute stages.
bool Computes(Rpc rpc) {
  return rpc == Rpc::kGather || rpc == Rpc::kGatherNd || rpc == Rpc::kEmbeddingBag ||
         rpc == Rpc::kModelInfer;
}

}  // namespace

MetricsCollector::MetricsCollector(const Metrics* metrics, const batching::Batcher* batcher,
                                   const ByteBudget* budget, std::vector<ExecutorGauges> executors,
                                   std::string device, std::string device_description)
    : metrics_(metrics),
      batcher_(batcher),
      budget_(budget),
      executors_(std::move(executors)),
      device_(std::move(device)),
      device_description_(std::move(device_description)) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  std::vector<MetricFamily> families;
  std::vector<Rpc> rpcs;
  for (int r = 0; r < kNumRpcs; ++r) rpcs.push_back(static_cast<Rpc>(r));

  MetricFamily requests =
      Family("tensorcompute_requests_total", "RPCs answered, by method and gRPC status code",
             MetricType::Counter);
  for (Rpc rpc : rpcs) {
    for (int c = 0; c < kNumCodes; ++c) {
      const auto code = static_cast<absl::StatusCode>(c);
      const int64_t n = metrics_->requests(rpc, code);
      // OK always (so rate() works from the first scrape); error codes once seen.
      if (n == 0 && code != absl::StatusCode::kOk) continue;
      requests.metric.push_back(
          Counter(static_cast<double>(n),
                  {{"code", absl::StatusCodeToString(code)}, {"rpc", RpcName(rpc)}}));
    }
  }
  families.push_back(std::move(requests));

  MetricFamily latency =
      Family("tensorcompute_request_duration_seconds",
             "Time from an RPC's arrival to its answer, by method", MetricType::Histogram);
  MetricFamily queue_wait = Family(
      "tensorcompute_queue_duration_seconds",
      "Time from a compute RPC's submission to compute (its message read and decoded) to the "
      "start of the batch that computes it, by method",
      MetricType::Histogram);
  MetricFamily compute = Family("tensorcompute_compute_duration_seconds",
                                "Time from a compute RPC's batch start to its output written, "
                                "by method",
                                MetricType::Histogram);
  MetricFamily request_size =
      Family("tensorcompute_request_size_bytes",
             "Compute RPCs' request messages (HTTP: bodies), by method", MetricType::Histogram);
  MetricFamily response_size =
      Family("tensorcompute_response_size_bytes",
             "Compute RPCs' OK answers (HTTP: bodies), by method", MetricType::Histogram);
  for (Rpc rpc : rpcs) {
    const core::RequestStats& stats = metrics_->rpc_stats(rpc);
    latency.metric.push_back(Histogram(stats.total(), {{"rpc", RpcName(rpc)}}));
    if (!Computes(rpc)) continue;
    queue_wait.metric.push_back(Histogram(stats.queue(), {{"rpc", RpcName(rpc)}}));
    compute.metric.push_back(Histogram(stats.compute(), {{"rpc", RpcName(rpc)}}));
    request_size.metric.push_back(Histogram(stats.request_bytes(), {{"rpc", RpcName(rpc)}}));
    response_size.metric.push_back(Histogram(stats.response_bytes(), {{"rpc", RpcName(rpc)}}));
  }
  families.push_back(std::move(latency));
  families.push_back(std::move(queue_wait));
  families.push_back(std::move(compute));
  families.push_back(std::move(request_size));
  families.push_back(std::move(response_size));

  // By model: the built-in ones, then every resident table.
  std::vector<std::pair<std::string, std::shared_ptr<const core::RequestStats>>> models;
  for (int m = 0; m < kNumBuiltinModels; ++m) {
    const auto model = static_cast<BuiltinModel>(m);
    models.emplace_back(BuiltinModelName(model), metrics_->model_stats(model));
  }
  if (registry_ != nullptr) {
    for (const auto& table : registry_->List()) {
      if (table->stats != nullptr) models.emplace_back(table->name, table->stats);
    }
  }
  MetricFamily model_total =
      Family("tensorcompute_model_request_duration_seconds",
             "Time from a compute request's arrival to its answer, by model (a resident table, "
             "or the built-in gather, gather_nd or embedding_bag with params sent)",
             MetricType::Histogram);
  MetricFamily model_queue =
      Family("tensorcompute_model_queue_duration_seconds",
             "Time from submission to compute to batch start, by model", MetricType::Histogram);
  MetricFamily model_compute =
      Family("tensorcompute_model_compute_duration_seconds",
             "Time from batch start to output written, by model", MetricType::Histogram);
  for (const auto& [name, stats] : models) {
    model_total.metric.push_back(Histogram(stats->total(), {{"model", name}}));
    model_queue.metric.push_back(Histogram(stats->queue(), {{"model", name}}));
    model_compute.metric.push_back(Histogram(stats->compute(), {{"model", name}}));
  }
  families.push_back(std::move(model_total));
  families.push_back(std::move(model_queue));
  families.push_back(std::move(model_compute));

  if (gpu_stages_ != nullptr) {
    MetricFamily stages = Family("tensorcompute_gpu_stage_duration_seconds",
                                 "Time of each stage of a GPU batch on its stream (CUDA events): "
                                 "copy_in, kernel, copy_out, by device",
                                 MetricType::Histogram);
    for (const GpuStageMetrics::Device* device : gpu_stages_->active()) {
      stages.metric.push_back(
          Histogram(device->copy_in, {{"device", device->name}, {"stage", "copy_in"}}));
      stages.metric.push_back(
          Histogram(device->kernel, {{"device", device->name}, {"stage", "kernel"}}));
      stages.metric.push_back(
          Histogram(device->copy_out, {{"device", device->name}, {"stage", "copy_out"}}));
    }
    families.push_back(std::move(stages));
  }

  if (registry_ != nullptr) {
    std::map<std::string, int64_t> bytes_by_device = {{"cpu", 0}};
    const auto tables = registry_->List();
    for (const auto& table : tables) bytes_by_device[table->device] += table->bytes;
    MetricFamily resident =
        Family("tensorcompute_resident_bytes",
               "Bytes of resident tensors (PutTensor, --preload), by device", MetricType::Gauge);
    for (const auto& [device, bytes] : bytes_by_device) {
      resident.metric.push_back(Gauge(static_cast<double>(bytes), {{"device", device}}));
    }
    families.push_back(std::move(resident));
    MetricFamily count = Family("tensorcompute_resident_tensors", "Resident tensors (names) stored",
                                MetricType::Gauge);
    count.metric.push_back(Gauge(static_cast<double>(tables.size())));
    families.push_back(std::move(count));
    MetricFamily held = Family("tensorcompute_resident_bytes_held",
                               "Bytes counted against max_resident_bytes, including deleted or "
                               "replaced tensors still used by gathers in flight",
                               MetricType::Gauge);
    held.metric.push_back(Gauge(static_cast<double>(registry_->resident_bytes())));
    families.push_back(std::move(held));
    MetricFamily lookups =
        Family("tensorcompute_resident_lookups_total",
               "Requests answered on each resident table (gathers and lookups by name, every "
               "front end), since the name was first stored",
               MetricType::Counter);
    for (const auto& table : tables) {
      if (table->stats == nullptr) continue;
      lookups.metric.push_back(
          Counter(static_cast<double>(table->stats->total().count()), {{"tensor", table->name}}));
    }
    families.push_back(std::move(lookups));
  }

  if (const auto shards = metrics_->shard_calls(); !shards.empty()) {
    MetricFamily calls = Family("tensorcompute_shard_calls_total",
                                "Parts of routed lookups on sharded tables (sub-calls to peers, "
                                "and this server's own part), by shard and gRPC status code",
                                MetricType::Counter);
    MetricFamily seconds = Family("tensorcompute_shard_call_duration_seconds",
                                  "Time from a routed lookup's part being sent to its answer, "
                                  "by shard",
                                  MetricType::Histogram);
    for (const auto& [shard, counts] : shards) {
      const std::string label = std::to_string(shard);
      for (int c = 0; c < kNumCodes; ++c) {
        const auto code = static_cast<absl::StatusCode>(c);
        if (counts.by_code[c] == 0 && code != absl::StatusCode::kOk) continue;
        calls.metric.push_back(
            Counter(static_cast<double>(counts.by_code[c]),
                    {{"code", absl::StatusCodeToString(code)}, {"shard", label}}));
      }
      if (counts.latency != nullptr) {
        seconds.metric.push_back(Histogram(*counts.latency, {{"shard", label}}));
      }
    }
    families.push_back(std::move(calls));
    families.push_back(std::move(seconds));
  }

  MetricFamily inflight = Family("tensorcompute_inflight_requests",
                                 "RPCs accepted and not yet answered", MetricType::Gauge);
  inflight.metric.push_back(Gauge(static_cast<double>(metrics_->inflight_requests())));
  families.push_back(std::move(inflight));

  MetricFamily rejected = Family("tensorcompute_rejected_connections_total",
                                 "Connections closed at once: the listener was at its connection "
                                 "limit (--http_max_connections)",
                                 MetricType::Counter);
  rejected.metric.push_back(Counter(static_cast<double>(metrics_->rejected_connections())));
  families.push_back(std::move(rejected));

  MetricFamily evicted = Family("tensorcompute_http_idle_connections_closed_total",
                                "Idle HTTP connections (waiting for a request) closed to make "
                                "room for a new one at --http_max_connections",
                                MetricType::Counter);
  evicted.metric.push_back(Counter(static_cast<double>(metrics_->idle_connections_closed())));
  families.push_back(std::move(evicted));

  if (budget_ != nullptr) {
    MetricFamily used =
        Family("tensorcompute_inflight_bytes",
               "Bytes of requests and their outputs held by RPCs in flight", MetricType::Gauge);
    used.metric.push_back(Gauge(static_cast<double>(budget_->used())));
    families.push_back(std::move(used));
    MetricFamily limit =
        Family("tensorcompute_inflight_bytes_limit",
               "max_inflight_bytes: beyond it requests are refused", MetricType::Gauge);
    limit.metric.push_back(Gauge(static_cast<double>(budget_->limit())));
    families.push_back(std::move(limit));
  }

  if (batcher_ != nullptr) {
    MetricFamily queue = Family("tensorcompute_queue_depth",
                                "Requests waiting in the batcher's queue", MetricType::Gauge);
    queue.metric.push_back(Gauge(static_cast<double>(batcher_->queue_depth())));
    families.push_back(std::move(queue));
    MetricFamily capacity =
        Family("tensorcompute_queue_capacity",
               "The most requests the batcher's queue holds (--queue_capacity)", MetricType::Gauge);
    capacity.metric.push_back(Gauge(static_cast<double>(batcher_->queue_capacity())));
    families.push_back(std::move(capacity));
    MetricFamily batches = Family("tensorcompute_inflight_batches",
                                  "Batches running on the executors now", MetricType::Gauge);
    batches.metric.push_back(Gauge(static_cast<double>(batcher_->inflight_batches())));
    families.push_back(std::move(batches));
  }

  MetricFamily batch_size =
      Family("tensorcompute_batch_size", "Requests per batch handed to an executor",
             MetricType::Histogram);
  std::vector<double> size_bounds;
  std::vector<int64_t> size_counts;
  for (int b = 0; b <= Metrics::kBuckets; ++b) {
    if (b < Metrics::kBuckets) size_bounds.push_back(static_cast<double>(int64_t{1} << b));
    size_counts.push_back(metrics_->batch_size_bucket(b));
  }
  batch_size.metric.push_back(
      Histogram(size_bounds, size_counts, static_cast<double>(metrics_->batched_requests())));
  families.push_back(std::move(batch_size));

  MetricFamily executor_batches = Family("tensorcompute_executor_batches_total",
                                         "Batches run, by executor", MetricType::Counter);
  MetricFamily busy =
      Family("tensorcompute_executor_busy_seconds_total",
             "Time batches spent on each executor, summed over batches (batches run side by side)",
             MetricType::Counter);
  MetricFamily slots =
      Family("tensorcompute_executor_slots",
             "Batches each executor runs at once (pool threads, GPU streams in service): its "
             "busy fraction is rate(tensorcompute_executor_busy_seconds_total) / this",
             MetricType::Gauge);
  MetricFamily up =
      Family("tensorcompute_device_up",
             "1 while an executor is in service, 0 once its GPUs are all lost", MetricType::Gauge);
  for (const ExecutorGauges& executor : executors_) {
    const std::string device(executor.metered->name());
    executor_batches.metric.push_back(
        Counter(static_cast<double>(executor.metered->batches()), {{"device", device}}));
    busy.metric.push_back(
        Counter(absl::ToDoubleSeconds(executor.metered->busy()), {{"device", device}}));
    if (executor.slots) {
      slots.metric.push_back(Gauge(static_cast<double>(executor.slots()), {{"device", device}}));
    }
    up.metric.push_back(Gauge(!executor.up || executor.up() ? 1 : 0, {{"device", device}}));
  }
  families.push_back(std::move(executor_batches));
  families.push_back(std::move(busy));
  families.push_back(std::move(slots));
  families.push_back(std::move(up));

  if (serving_) {
    MetricFamily serving =
        Family("tensorcompute_serving",
               "1 while health is SERVING; 0 while preloading, draining or after a lost GPU",
               MetricType::Gauge);
    serving.metric.push_back(Gauge(serving_() ? 1 : 0));
    families.push_back(std::move(serving));
  }

  MetricFamily info =
      Family("tensorcompute_device_info", "Where gathers run (1): device and its description",
             MetricType::Gauge);
  info.metric.push_back(Gauge(1, {{"description", device_description_}, {"device", device_}}));
  families.push_back(std::move(info));
  return families;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen, std::shared_ptr<MetricsCollector> collector) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen));
  }
  endpoint->port_ = ports.front();
  endpoint->collector_ = std::move(collector);
  endpoint->exposer_->RegisterCollectable(endpoint->collector_);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  // Stops the HTTP threads before the collector (and what it reads) can go away.
  exposer_.reset();
}

}  // namespace tensorcompute::server
