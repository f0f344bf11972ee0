// File: server/metrics/gpu_stage_metrics.h
//
// Where a GPU batch's time goes, per device: histograms (core::DurationBounds()) of its
// copy_in, kernel and copy_out stages as CudaExecutorOptions::on_batch_stages reports them
// (CUDA events on the batch's stream). prometheus_metrics.h serves them as
// tensorcompute_gpu_stage_duration_seconds{device="cuda:N",stage}.
//
// Thread-safety: Record may be called from any thread (relaxed atomic adds, no lock); the
// devices are fixed at construction.

#ifndef TENSORCOMPUTE_SERVER_GPU_STAGE_METRICS_H_
#define TENSORCOMPUTE_SERVER_GPU_STAGE_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "core/cuda/cuda_executor.h"
#include "core/request_stats.h"

namespace tensorcompute::server {

class GpuStageMetrics {
 public:
  struct Device {
    Device();
    std::string name;  // "cuda:N"
    core::Histogram copy_in;
    core::Histogram kernel;
    core::Histogram copy_out;
  };

  // Devices 0 .. device_count - 1.
  explicit GpuStageMetrics(int device_count);

  // A batch on device `ordinal` took `stages`; ignored for a device out of range.
  void Record(int ordinal, const cuda::GpuBatchStages& stages);

  // The devices that have recorded at least one batch, in ordinal order.
  std::vector<const Device*> active() const;

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_GPU_STAGE_METRICS_H_
