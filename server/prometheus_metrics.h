// File: server/prometheus_metrics.h
//
// The server's metrics in the Prometheus text format, over HTTP (GET /metrics), through
// prometheus-cpp's Exposer and serializer. MetricsCollector is a prometheus::Collectable that
// reads Metrics, the batcher, the byte budget, the metered executors and, when set, the
// resident tables, the uploads' share, the GPU stages and health when scraped, and turns them
// into families named by Prometheus conventions (tensorcompute_*, base units, _total for
// counters). The .cc names, types and describes each family once, a function per group;
// docs/deploy.md ("Metrics") is the operator's table of them, and tests/deploy/monitoring_test.py
// checks that the two list the same families.
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
#include "server/admission/upload_budget.h"
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
  // Also report the uploads' share (max_upload_bytes). Not owned; call before the collector is
  // registered.
  void set_upload_budget(const UploadBudget* uploads) { uploads_ = uploads; }
  // Also report whether health is SERVING. Call before the collector is registered.
  void set_serving(std::function<bool()> serving) { serving_ = std::move(serving); }
  // Also report a GPU executor's batch stages (GpuStageMetrics). Not owned; call before the
  // collector is registered.
  void set_gpu_stages(const GpuStageMetrics* stages) { gpu_stages_ = stages; }

 private:
  const core::TensorRegistry* registry_ = nullptr;
  const UploadBudget* uploads_ = nullptr;
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
