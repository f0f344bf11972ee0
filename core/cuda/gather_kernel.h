// File: core/cuda/gather_kernel.h
//
// The one kernel launch of a batch (gather_batch.h): a grid-stride loop over every work unit
// of every task, each unit running gather_unit.h's steps. Host API -> launch -> kernel ->
// per-unit work, as CUB's DeviceFor; the launcher checks cudaGetLastError() after the launch.
//
// Two kernels. When every task of the batch has the same vector_bytes W
// (BatchLayout::uniform_vector_bytes), each thread takes kGatherUnroll units at once: it
// resolves them all, then issues all their W-byte loads, then all their stores, so that several
// loads per thread are in flight (one 16-byte load per thread does not keep HBM busy). Otherwise
// (or with LaunchArgs::unroll 1) the one-unit kernel: one unit per loop iteration, its width
// chosen per unit. Both run the same TC_HOST_DEVICE steps as the host twin (RunBatchOnHost) and
// write the same bytes. The grid is one wave of the chosen kernel (kernel_occupancy.h).
//
// Thread-safety: a launch is ordered on `stream`; concurrent launches on different streams are
// independent.

#ifndef TENSORCOMPUTE_CORE_CUDA_GATHER_KERNEL_H_
#define TENSORCOMPUTE_CORE_CUDA_GATHER_KERNEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include <cuda_runtime.h>

#include "core/cuda/gather_unit.h"

namespace tensorcompute::cuda {

// The units that one thread of the unrolled kernel resolves and copies together.
inline constexpr int kGatherUnroll = 4;

// The fields of a BatchLayout (gather_batch.h) that the launch needs; plain data, so that
// nvcc compiles no Abseil container code.
struct LaunchArgs {
  int num_tasks = 0;
  uint64_t total_units = 0;
  bool fits_32bit = true;
  uint64_t descs_offset = 0;          // into the input buffer
  uint64_t dims_offset = 0;           // into the input buffer
  uint64_t flags_offset = 0;          // into the output buffer
  uint32_t uniform_vector_bytes = 0;  // BatchLayout::uniform_vector_bytes (0: mixed)
  // Units per thread and iteration: kGatherUnroll (the default) takes the unrolled kernel when
  // uniform_vector_bytes is set; 1 always takes the one-unit kernel (the benchmark compares the
  // two). Other values are INVALID_ARGUMENT.
  int unroll = kGatherUnroll;
};

// Launches the kernel over device buffers `input` (input_bytes, already holding PackInput's
// bytes) and `output` (output_bytes, flags already reset to kNoBadIndex) on the current
// device, one wave for `sm_count` multiprocessors. Does not wait for the kernel.
// Returns OK; INVALID_ARGUMENT for an `unroll` other than 1 and kGatherUnroll; or INTERNAL
// naming the CUDA error of the occupancy query or of the launch.
// REQUIRES: args.total_units > 0; the buffers are 256-byte aligned device memory.
absl::Status LaunchGatherBatch(const LaunchArgs& args, const uint8_t* input, uint8_t* output,
                               int sm_count, cudaStream_t stream);

// Checks, on the calling thread's current device, every kernel that LaunchGatherBatch may
// launch (cudaFuncGetAttributes), and fills their grid-size cache. For start-up: a binary built
// without code for the device fails here rather than at the first batch.
// Returns OK, or INTERNAL naming the CUDA error (cudaErrorNoKernelImageForDevice when the
// binary has no code for the device).
absl::Status ProbeGatherKernels();

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_GATHER_KERNEL_H_
