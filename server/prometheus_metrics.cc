#include "server/prometheus_metrics.h"

#include <array>
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

// The families, written once: each Append* below names, types and describes one group's
// families and appends them; Collect calls them in the order they are exposed. docs/deploy.md
// describes them for operators, and tests/deploy/monitoring_test.py checks that its table and a
// real server's /metrics name the same families.

using Families = std::vector<MetricFamily>;

// A family of one unlabelled sample.
void AppendGauge(const char* name, const char* help, double value, Families* out) {
  MetricFamily family = Family(name, help, MetricType::Gauge);
  family.metric.push_back(Gauge(value));
  out->push_back(std::move(family));
}

void AppendCounter(const char* name, const char* help, double value, Families* out) {
  MetricFamily family = Family(name, help, MetricType::Counter);
  family.metric.push_back(Counter(value));
  out->push_back(std::move(family));
}

// One counter per status code, labelled `code` and then `label`: OK always (so that rate()
// works from the first scrape), other codes once seen.
void AddCodeCounters(const std::array<int64_t, kNumCodes>& by_code,
                     const ClientMetric::Label& label, MetricFamily* family) {
  for (int c = 0; c < kNumCodes; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (by_code[c] == 0 && code != absl::StatusCode::kOk) continue;
    family->metric.push_back(Counter(static_cast<double>(by_code[c]),
                                     {{"code", absl::StatusCodeToString(code)}, label}));
  }
}

void AppendRequests(const Metrics& metrics, Families* out) {
  MetricFamily requests =
      Family("tensorcompute_requests_total", "RPCs answered, by method and gRPC status code",
             MetricType::Counter);
  for (int r = 0; r < kNumRpcs; ++r) {
    const auto rpc = static_cast<Rpc>(r);
    std::array<int64_t, kNumCodes> by_code{};
    for (int c = 0; c < kNumCodes; ++c) {
      by_code[c] = metrics.requests(rpc, static_cast<absl::StatusCode>(c));
    }
    AddCodeCounters(by_code, {"rpc", RpcName(rpc)}, &requests);
  }
  out->push_back(std::move(requests));
}

// Each RPC's time to answer; the compute RPCs' stages and sizes too.
void AppendRpcStages(const Metrics& metrics, Families* out) {
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
  for (int r = 0; r < kNumRpcs; ++r) {
    const auto rpc = static_cast<Rpc>(r);
    const core::RequestStats& stats = metrics.rpc_stats(rpc);
    latency.metric.push_back(Histogram(stats.total(), {{"rpc", RpcName(rpc)}}));
    if (!Computes(rpc)) continue;
    queue_wait.metric.push_back(Histogram(stats.queue(), {{"rpc", RpcName(rpc)}}));
    compute.metric.push_back(Histogram(stats.compute(), {{"rpc", RpcName(rpc)}}));
    request_size.metric.push_back(Histogram(stats.request_bytes(), {{"rpc", RpcName(rpc)}}));
    response_size.metric.push_back(Histogram(stats.response_bytes(), {{"rpc", RpcName(rpc)}}));
  }
  out->push_back(std::move(latency));
  out->push_back(std::move(queue_wait));
  out->push_back(std::move(compute));
  out->push_back(std::move(request_size));
  out->push_back(std::move(response_size));
}

// The same stages by model: the built-in ones, then every resident table (`registry` may be
// null: none).
void AppendModelStages(const Metrics& metrics, const core::TensorRegistry* registry,
                       Families* out) {
  std::vector<std::pair<std::string, std::shared_ptr<const core::RequestStats>>> models;
  for (int m = 0; m < kNumBuiltinModels; ++m) {
    const auto model = static_cast<BuiltinModel>(m);
    models.emplace_back(BuiltinModelName(model), metrics.model_stats(model));
  }
  if (registry != nullptr) {
    for (const auto& table : registry->List()) {
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
  out->push_back(std::move(model_total));
  out->push_back(std::move(model_queue));
  out->push_back(std::move(model_compute));
}

void AppendGpuStages(const GpuStageMetrics& gpu_stages, Families* out) {
  MetricFamily stages = Family("tensorcompute_gpu_stage_duration_seconds",
                               "Time of each stage of a GPU batch on its stream (CUDA events): "
                               "copy_in, kernel, copy_out, by device",
                               MetricType::Histogram);
  for (const GpuStageMetrics::Device* device : gpu_stages.active()) {
    stages.metric.push_back(
        Histogram(device->copy_in, {{"device", device->name}, {"stage", "copy_in"}}));
    stages.metric.push_back(
        Histogram(device->kernel, {{"device", device->name}, {"stage", "kernel"}}));
    stages.metric.push_back(
        Histogram(device->copy_out, {{"device", device->name}, {"stage", "copy_out"}}));
  }
  out->push_back(std::move(stages));
}

// Tables on disk (core/disk_rows.h): their row caches and reads. Nothing without one.
void AppendDiskTables(const std::vector<std::shared_ptr<const core::ResidentTensor>>& tables,
                      Families* out) {
  MetricFamily hits =
      Family("tensorcompute_disk_cache_hits_total",
             "Rows of tables on disk found in their row cache", MetricType::Counter);
  MetricFamily misses =
      Family("tensorcompute_disk_cache_misses_total",
             "Rows of tables on disk read from the disk (one read each)", MetricType::Counter);
  MetricFamily bytes =
      Family("tensorcompute_disk_read_bytes_total",
             "Bytes read from the disk for tables on disk (whole blocks)", MetricType::Counter);
  MetricFamily seconds =
      Family("tensorcompute_disk_read_seconds",
             "Latency of each disk read of a table on disk, submission to completion",
             MetricType::Histogram);
  MetricFamily cache =
      Family("tensorcompute_disk_cache_bytes",
             "Memory of each table on disk's row cache (rows and bookkeeping)", MetricType::Gauge);
  MetricFamily cached = Family("tensorcompute_disk_cached_rows",
                               "Rows in each table on disk's row cache now", MetricType::Gauge);
  for (const auto& table : tables) {
    const core::DiskRows* disk = table->disk.get();
    if (disk == nullptr) continue;
    const std::vector<ClientMetric::Label> label = {{"tensor", table->name}};
    hits.metric.push_back(Counter(static_cast<double>(disk->hits()), label));
    misses.metric.push_back(Counter(static_cast<double>(disk->misses()), label));
    bytes.metric.push_back(Counter(static_cast<double>(disk->read_bytes()), label));
    seconds.metric.push_back(Histogram(disk->read_seconds(), label));
    cache.metric.push_back(Gauge(static_cast<double>(disk->memory_bytes()), label));
    cached.metric.push_back(Gauge(static_cast<double>(disk->cached_rows()), label));
  }
  if (hits.metric.empty()) return;
  for (MetricFamily* family : {&hits, &misses, &bytes, &seconds, &cache, &cached}) {
    out->push_back(std::move(*family));
  }
}

void AppendResidentTables(const core::TensorRegistry& registry, Families* out) {
  const auto tables = registry.List();
  std::map<std::string, int64_t> bytes_by_device = {{"cpu", 0}};
  for (const auto& table : tables) bytes_by_device[table->device] += table->bytes;
  MetricFamily resident =
      Family("tensorcompute_resident_bytes",
             "Bytes of resident tensors (PutTensor, --preload), by device", MetricType::Gauge);
  for (const auto& [device, bytes] : bytes_by_device) {
    resident.metric.push_back(Gauge(static_cast<double>(bytes), {{"device", device}}));
  }
  out->push_back(std::move(resident));
  AppendGauge("tensorcompute_resident_tensors", "Resident tensors (names) stored",
              static_cast<double>(tables.size()), out);
  AppendGauge("tensorcompute_resident_bytes_held",
              "Bytes counted against max_resident_bytes, including deleted or replaced tensors "
              "still used by gathers in flight",
              static_cast<double>(registry.resident_bytes()), out);
  AppendGauge("tensorcompute_table_dir_bytes_held",
              "Bytes of the files of tables on disk under --table_dir, counted against "
              "max_table_dir_bytes, including those of deleted or replaced tables still in use",
              static_cast<double>(registry.disk_bytes()), out);
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
  out->push_back(std::move(lookups));

  // Live tables (core/live_rows.h): each table's sequence, and the row updates applied to it.
  MetricFamily sequence =
      Family("tensorcompute_table_sequence",
             "Each resident table's sequence: row updates and replacements applied on this server",
             MetricType::Gauge);
  MetricFamily rows = Family("tensorcompute_table_updated_rows_total",
                             "Rows replaced by UpdateRows on each resident table, since the name "
                             "was first stored",
                             MetricType::Counter);
  MetricFamily messages =
      Family("tensorcompute_table_update_messages_total",
             "UpdateRows messages applied to each resident table", MetricType::Counter);
  MetricFamily visible = Family("tensorcompute_table_update_visible_seconds",
                                "Time from an UpdateRows message's arrival to its rows being "
                                "visible to lookups, by table",
                                MetricType::Histogram);
  for (const auto& table : tables) {
    if (table->live != nullptr) {
      sequence.metric.push_back(
          Gauge(static_cast<double>(table->live->sequence()), {{"tensor", table->name}}));
    }
    if (table->stats == nullptr) continue;
    rows.metric.push_back(
        Counter(static_cast<double>(table->stats->updated_rows()), {{"tensor", table->name}}));
    messages.metric.push_back(
        Counter(static_cast<double>(table->stats->update_messages()), {{"tensor", table->name}}));
    visible.metric.push_back(Histogram(table->stats->update_visible(), {{"tensor", table->name}}));
  }
  out->push_back(std::move(sequence));
  out->push_back(std::move(rows));
  out->push_back(std::move(messages));
  out->push_back(std::move(visible));
  AppendDiskTables(tables, out);
}

// Nothing until a lookup was routed across shards.
void AppendShardCalls(const Metrics& metrics, Families* out) {
  const auto shards = metrics.shard_calls();
  if (shards.empty()) return;
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
    AddCodeCounters(counts.by_code, {"shard", label}, &calls);
    if (counts.latency != nullptr) {
      seconds.metric.push_back(Histogram(*counts.latency, {{"shard", label}}));
    }
  }
  out->push_back(std::move(calls));
  out->push_back(std::move(seconds));
}

// What is let in: RPCs in flight, and the connections refused or closed to make room.
void AppendAdmission(const Metrics& metrics, Families* out) {
  AppendGauge("tensorcompute_inflight_requests", "RPCs accepted and not yet answered",
              static_cast<double>(metrics.inflight_requests()), out);
  AppendCounter("tensorcompute_rejected_connections_total",
                "Connections closed at once: the listener was at its connection limit "
                "(--http_max_connections)",
                static_cast<double>(metrics.rejected_connections()), out);
  AppendCounter("tensorcompute_grpc_refused_connections_total",
                "gRPC connections closed at once: fewer than --descriptor_reserve file "
                "descriptors were free",
                static_cast<double>(metrics.refused_grpc_connections()), out);
  AppendCounter("tensorcompute_http_idle_connections_closed_total",
                "Idle HTTP connections (waiting for a request) closed to make room for a new one "
                "at --http_max_connections",
                static_cast<double>(metrics.idle_connections_closed()), out);
  // Every front end always, so that rate() works from the first scrape.
  MetricFamily not_taken = Family(
      "tensorcompute_answers_cancelled_unsent_total",
      "Answers not taken by their client within their send limit (--answer_send_timeout_s, "
      "--http_write_timeout_s, + size / --answer_send_min_bytes_per_s): the call cancelled or "
      "the HTTP connection closed, and its budget freed, by front end",
      MetricType::Counter);
  for (int f = 0; f < kNumFrontEnds; ++f) {
    const auto front_end = static_cast<FrontEndKind>(f);
    not_taken.metric.push_back(Counter(static_cast<double>(metrics.answers_not_taken(front_end)),
                                       {{"front_end", FrontEndName(front_end)}}));
  }
  out->push_back(std::move(not_taken));
}

void AppendByteBudget(const ByteBudget& budget, Families* out) {
  AppendGauge("tensorcompute_inflight_bytes",
              "Bytes of requests and their outputs held by RPCs in flight",
              static_cast<double>(budget.used()), out);
  AppendGauge("tensorcompute_inflight_bytes_limit",
              "max_inflight_bytes: beyond it requests are refused",
              static_cast<double>(budget.limit()), out);
  AppendCounter("tensorcompute_inflight_share_refusals_total",
                "Calls refused UNAVAILABLE, or outputs not allocated, because their client held "
                "its share of max_inflight_bytes (--max_inflight_share) while other clients used "
                "it",
                static_cast<double>(budget.share_refusals()), out);
}

void AppendUploadBudget(const UploadBudget& uploads, Families* out) {
  AppendGauge("tensorcompute_upload_bytes",
              "Bytes held by uploads in progress (PutTensor): each one's slot for the message it "
              "reads, and a message's decoded cost beyond it",
              static_cast<double>(uploads.used()), out);
  AppendGauge("tensorcompute_upload_bytes_limit", "max_upload_bytes: beyond it uploads are refused",
              static_cast<double>(uploads.limit()), out);
  AppendCounter("tensorcompute_uploads_refused_total",
                "Uploads, and their messages, refused UNAVAILABLE for want of room in "
                "max_upload_bytes",
                static_cast<double>(uploads.refused()), out);
}

// The batcher's gauges (`batcher` may be null: none), then the batch sizes.
void AppendBatching(const batching::Batcher* batcher, const Metrics& metrics, Families* out) {
  if (batcher != nullptr) {
    AppendGauge("tensorcompute_queue_depth", "Requests waiting in the batcher's queue",
                static_cast<double>(batcher->queue_depth()), out);
    AppendGauge("tensorcompute_queue_capacity",
                "The most requests the batcher's queue holds (--queue_capacity)",
                static_cast<double>(batcher->queue_capacity()), out);
    AppendGauge("tensorcompute_inflight_batches", "Batches running on the executors now",
                static_cast<double>(batcher->inflight_batches()), out);
  }
  MetricFamily batch_size =
      Family("tensorcompute_batch_size", "Requests per batch handed to an executor",
             MetricType::Histogram);
  std::vector<double> size_bounds;
  std::vector<int64_t> size_counts;
  for (int b = 0; b <= Metrics::kBuckets; ++b) {
    if (b < Metrics::kBuckets) size_bounds.push_back(static_cast<double>(int64_t{1} << b));
    size_counts.push_back(metrics.batch_size_bucket(b));
  }
  batch_size.metric.push_back(
      Histogram(size_bounds, size_counts, static_cast<double>(metrics.batched_requests())));
  out->push_back(std::move(batch_size));
}

void AppendExecutors(const std::vector<ExecutorGauges>& executors, Families* out) {
  MetricFamily batches = Family("tensorcompute_executor_batches_total", "Batches run, by executor",
                                MetricType::Counter);
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
  for (const ExecutorGauges& executor : executors) {
    const std::string device(executor.metered->name());
    batches.metric.push_back(
        Counter(static_cast<double>(executor.metered->batches()), {{"device", device}}));
    busy.metric.push_back(
        Counter(absl::ToDoubleSeconds(executor.metered->busy()), {{"device", device}}));
    if (executor.slots) {
      slots.metric.push_back(Gauge(static_cast<double>(executor.slots()), {{"device", device}}));
    }
    up.metric.push_back(Gauge(!executor.up || executor.up() ? 1 : 0, {{"device", device}}));
  }
  out->push_back(std::move(batches));
  out->push_back(std::move(busy));
  out->push_back(std::move(slots));
  out->push_back(std::move(up));
}

void AppendServing(bool serving, Families* out) {
  AppendGauge("tensorcompute_serving",
              "1 while health is SERVING; 0 while preloading, draining or after a lost GPU",
              serving ? 1 : 0, out);
}

void AppendDeviceInfo(const std::string& device, const std::string& description, Families* out) {
  MetricFamily info =
      Family("tensorcompute_device_info", "Where gathers run (1): device and its description",
             MetricType::Gauge);
  info.metric.push_back(Gauge(1, {{"description", description}, {"device", device}}));
  out->push_back(std::move(info));
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
  Families families;
  AppendRequests(*metrics_, &families);
  AppendRpcStages(*metrics_, &families);
  AppendModelStages(*metrics_, registry_, &families);
  if (gpu_stages_ != nullptr) AppendGpuStages(*gpu_stages_, &families);
  if (registry_ != nullptr) AppendResidentTables(*registry_, &families);
  AppendShardCalls(*metrics_, &families);
  AppendAdmission(*metrics_, &families);
  if (budget_ != nullptr) AppendByteBudget(*budget_, &families);
  if (uploads_ != nullptr) AppendUploadBudget(*uploads_, &families);
  AppendBatching(batcher_, *metrics_, &families);
  AppendExecutors(executors_, &families);
  if (serving_) AppendServing(serving_(), &families);
  AppendDeviceInfo(device_, device_description_, &families);
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
