#include "core/cuda/task_routing.h"

#include <algorithm>

#include "core/cuda/gather_unit.h"
#include "core/embedding_bag_kernels.h"

namespace tensorcompute::cuda {

bool GpuComputes(const batching::Task& task, int64_t max_bag_length) {
  if (const core::EmbeddingBagPlan* bag = task.bag()) {
    // No rows to reduce: only the index values need checking, which the CPU does at once.
    if (bag->bags <= 0 || bag->dim <= 0) return false;
    return LongestBag(*bag, task.offsets) <= max_bag_length;
  }
  const core::GatherPlan& plan = *task.gather();
  switch (plan.element_size) {
    case 1:
    case 2:
    case 4:
    case 8:
    case 16:
      break;
    default:  // strings (0)
      return false;
  }
  // Nothing to copy: only the index values need checking, which the CPU does at once.
  return plan.output_rows() > 0 && plan.slice > 0 && GatherSliceFitsKernel(plan.slice_bytes());
}

bool GpuFits(const batching::Task& task, int ordinal, int64_t max_task_bytes) {
  int64_t bytes = static_cast<int64_t>(task.indices.data.size() + task.offsets.data.size() +
                                       task.weights.data.size()) +
                  batching::OutputBytes(task.plan);
  if (ResidentParams(task, ordinal) == nullptr) {
    bytes += static_cast<int64_t>(task.params.data.size());
  }
  return bytes <= max_task_bytes;
}

const void* ResidentParams(const batching::Task& task, int ordinal) {
  if (task.table == nullptr) return nullptr;
  const core::DeviceCopy& copy = task.table->device_copy;
  return copy.gpu == ordinal ? copy.data : nullptr;
}

int64_t LongestBag(const core::EmbeddingBagPlan& plan, const core::TensorView& offsets) {
  if (plan.bags <= 0) return 0;
  if (plan.fixed_bags()) return plan.bag_size;
  core::BagViews views;
  views.offsets = offsets.data.data();
  views.num_offsets = static_cast<int64_t>(offsets.data.size()) /
                      static_cast<int64_t>(core::ElementSize(plan.offsets_dtype));
  int64_t longest = 0;
  for (int64_t b = 0; b < plan.bags; ++b) {
    const core::BagSpan span = core::BagRange(plan, views, b);
    longest = std::max(longest, span.last - span.first);
  }
  return longest;
}

}  // namespace tensorcompute::cuda
