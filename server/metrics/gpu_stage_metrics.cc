#include "server/metrics/gpu_stage_metrics.h"

#include "absl/strings/str_cat.h"

namespace tensorcompute::server {

GpuStageMetrics::Device::Device()
    : copy_in(core::DurationBounds()),
      kernel(core::DurationBounds()),
      copy_out(core::DurationBounds()) {}

GpuStageMetrics::GpuStageMetrics(int device_count) {
  // Each Device behind a pointer: its histograms hold atomics (not movable), and active() hands
  // out pointers that must stay valid.
  for (int i = 0; i < device_count; ++i) {
    devices_.push_back(std::make_unique<Device>());
    devices_.back()->name = absl::StrCat("cuda:", i);
  }
}

void GpuStageMetrics::Record(int ordinal, const cuda::GpuBatchStages& stages) {
  if (ordinal < 0 || ordinal >= static_cast<int>(devices_.size())) return;
  Device& device = *devices_[ordinal];
  device.copy_in.ObserveDuration(stages.copy_in);
  device.kernel.ObserveDuration(stages.kernel);
  device.copy_out.ObserveDuration(stages.copy_out);
}

std::vector<const GpuStageMetrics::Device*> GpuStageMetrics::active() const {
  std::vector<const Device*> out;
  for (const auto& device : devices_) {
    // Record fills the three histograms together, so one count says whether a batch ran.
    if (device->kernel.count() > 0) out.push_back(device.get());
  }
  return out;
}

}  // namespace tensorcompute::server
