// File: server/prometheus_metrics.h
//
// The server's metrics in the Prometheus text format, over HTTP (GET /metrics), through
// prometheus-cpp's Exposer and serializer. MetricsCollector is a prometheus::Collectable that
// reads Metrics, the batcher and the metered executors when scraped and turns them into these
// families (names follow Prometheus conventions: base units, _total for counters):
//
//   tensorcompute_requests_total{rpc,code}              counter    answers by RPC and status
//   tensorcompute_request_duration_seconds{rpc}         histogram  arrival to answer
//   tensorcompute_queue_duration_seconds{rpc}           histogram  submitted to compute to its
//                                                                  batch's start (compute RPCs)
//   tensorcompute_compute_duration_seconds{rpc}         histogram  batch start to output written
//   tensorcompute_request_size_bytes{rpc}               histogram  request message (or body)
//   tensorcompute_response_size_bytes{rpc}              histogram  OK answer's message (or body)
//   tensorcompute_model_request_duration_seconds{model} histogram  arrival to answer, by model:
//   tensorcompute_model_queue_duration_seconds{model}   histogram    a resident table's name, or
//   tensorcompute_model_compute_duration_seconds{model} histogram    gather, gather_nd or
//                                                                    embedding_bag (params sent)
//   tensorcompute_gpu_stage_duration_seconds{device,stage}  histogram  per GPU batch: stage
//                                                                  copy_in, kernel, copy_out
//                                                                  (only with a GPU)
//   tensorcompute_inflight_requests                     gauge      accepted, not yet answered
//   tensorcompute_rejected_connections_total            counter    closed at once: at the limit,
//                                                                  none idle
//   tensorcompute_http_idle_connections_closed_total    counter    idle, closed for a newcomer
//   tensorcompute_inflight_bytes                        gauge      of max_inflight_bytes in use
//   tensorcompute_inflight_bytes_limit                  gauge      max_inflight_bytes
//   tensorcompute_queue_depth                           gauge      waiting in the batcher
//   tensorcompute_queue_capacity                        gauge      --queue_capacity
//   tensorcompute_inflight_batches                      gauge      on the executors now
//   tensorcompute_batch_size                            histogram  requests per batch
//   tensorcompute_executor_batches_total{device}        counter    batches run per executor
//   tensorcompute_executor_busy_seconds_total{device}   counter    summed batch time on it
//   tensorcompute_executor_slots{device}                gauge      batches it runs at once
//                                                                  (busy fraction: rate(busy) /
//                                                                  slots)
//   tensorcompute_device_up{device}                     gauge      1 in service, 0 lost (a GPU)
//   tensorcompute_serving                               gauge      1 when health is SERVING
//   tensorcompute_device_info{device,description}       gauge (1)  what serves the gathers
//   tensorcompute_resident_bytes{device}                gauge      resident tables' bytes
//   tensorcompute_resident_tensors                      gauge      resident tables stored
//   tensorcompute_resident_bytes_held                   gauge      of max_resident_bytes in use
//   tensorcompute_resident_lookups_total{tensor}        counter    requests answered on each
//                                                                  resident table
//   tensorcompute_shard_calls_total{shard,code}         counter    routed parts by shard, code
//   tensorcompute_shard_call_duration_seconds{shard}    histogram  a routed part's time
//
// Every duration histogram has the buckets of core::DurationBounds() (10 us to 60 s) and every
// size histogram those of core::SizeBounds() (64 B to 1 GiB), so that replicas' series add up.
//
// Thread-safety: Collect may run on the exposer's threads while the server serves; everything
// it reads is atomic or thread-safe.

#ifndef TENSORCOMPUTE_SERVER_PROMETHEUS_METRICS_H_
#define TENSORCOMPUTE_SERVER_PROMETHEUS_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"

#include "core/batching/batcher.h"
#include "core/tensor_registry.h"
#include "server/admission/byte_budget.h"
#include "server/metrics/gpu_stage_metrics.h"
#include "server/metrics/metered_executor.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

// An executor as the metrics see it: its batches and busy time, how many batches it runs at
// once, and whether it is in service.
struct ExecutorGauges {
  const MeteredExecutor* metered = nullptr;
  std::function<int()> slots;
  std::function<bool()> up;
};

class MetricsCollector final : public prometheus::Collectable {
 public:
  // Nothing is owned; everything must outlive the collector's registration (MetricsEndpoint
  // unregisters it before it goes). `batcher` and `budget` may be null (no gauges of theirs).
  MetricsCollector(const Metrics* metrics, const batching::Batcher* batcher,
                   const ByteBudget* budget, std::vector<ExecutorGauges> executors,
                   std::string device, std::string device_description);

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Also report resident tensors (bytes per device, tables). Not owned; call before the
  // collector is registered.
  void set_registry(const core::TensorRegistry* registry) { registry_ = registry; }
  // Also report whether health is SERVING. Call before the collector is registered.
  void set_serving(std::function<bool()> serving) { serving_ = std::move(serving); }
  // Also report a GPU executor's batch stages (GpuStageMetrics). Not owned; call before the
  // collector is registered.
  void set_gpu_stages(const GpuStageMetrics* stages) { gpu_stages_ = stages; }

 private:
  const core::TensorRegistry* registry_ = nullptr;
  std::function<bool()> serving_;
  const GpuStageMetrics* gpu_stages_ = nullptr;
  const Metrics* const metrics_;
  const batching::Batcher* const batcher_;
  const ByteBudget* const budget_;
  const std::vector<ExecutorGauges> executors_;
  const std::string device_;
  const std::string device_description_;
};

// The HTTP endpoint: serves `collector` at /metrics on `listen` ("host:port"; port 0 picks a
// free one) until destroyed.
class MetricsEndpoint {
 public:
  // UNAVAILABLE when `listen` cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen, std::shared_ptr<MetricsCollector> collector);
  ~MetricsEndpoint();

  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;

  std::shared_ptr<MetricsCollector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_PROMETHEUS_METRICS_H_
