// File: core/cuda/task_routing.h
//
// Which tasks of a batch the GPU computes and which go to the fallback (CPU) executor: the
// rules CudaExecutor::Run applies to every task, as pure host functions (no CUDA here), so that
// every build compiles them and the CPU tests check each rule on hand-made plans.
//
// The GPU takes a task when
//   - it is of a kind the kernels compute: a gather of a fixed-size dtype (1, 2, 4, 8 or 16
//     bytes) with output rows and non-empty slices, whose slice the kernel can count in 32-bit
//     chunks (gather_unit.h: GatherSliceFitsKernel); a lookup with bags and rows of at least one
//     element. The rest (strings, empty outputs, whose only work is checking index values)
//     is for the CPU;
//   - no bag of a lookup holds more than max_bag_length indices: one GPU thread walks a whole
//     bag (bag_unit.h), so a bag of millions of indices would hold a slot for seconds, while the
//     CPU sums it at memory speed in the same order;
//   - what travels (indices, offsets, weights, output, and params unless they are a resident
//     copy on the batch's device) fits max_task_bytes.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_CUDA_TASK_ROUTING_H_
#define TENSORCOMPUTE_CORE_CUDA_TASK_ROUTING_H_

#include <cstdint>

#include "core/batching/task.h"
#include "core/embedding_bag.h"
#include "core/tensor.h"

namespace tensorcompute::cuda {

// Whether a kernel can compute `task` at all, on any device (the first two rules above).
// REQUIRES: the task's views are those its plan was made from.
bool GpuComputes(const batching::Task& task, int64_t max_bag_length);

// Whether `task` (of GpuComputes) fits `max_task_bytes` on device `ordinal`.
bool GpuFits(const batching::Task& task, int ordinal, int64_t max_task_bytes);

// The device address of `task`'s params when they are a resident table whose copy lives on
// device `ordinal` (the kernel then reads them there, and they never travel), else nullptr.
const void* ResidentParams(const batching::Task& task, int ordinal);

// The most indices any one bag of `plan` holds (padding included): bag_size for fixed bags,
// else the largest gap between consecutive offsets (the last bag running to the end of the
// indices). 0 when there are no bags. REQUIRES: `offsets` is the view `plan` was made from
// (ignored for fixed bags).
int64_t LongestBag(const core::EmbeddingBagPlan& plan, const core::TensorView& offsets);

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_TASK_ROUTING_H_
