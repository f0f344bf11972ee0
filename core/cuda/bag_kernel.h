// File: core/cuda/bag_kernel.h
//
// The one EmbeddingBag launch of a batch (bag_batch.h): a grid-stride loop over every work
// unit of every task, each unit running BagUnit (bag_unit.h). Host API -> launch -> kernel ->
// per-unit work, as gather_kernel.h; the launcher checks cudaGetLastError() after the launch.
//
// Thread-safety: a launch is ordered on `stream`; concurrent launches on different streams are
// independent.

#ifndef TENSORCOMPUTE_CORE_CUDA_BAG_KERNEL_H_
#define TENSORCOMPUTE_CORE_CUDA_BAG_KERNEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include <cuda_runtime.h>

namespace tensorcompute::cuda {

// The fields of a BagLayout that the launch needs; plain data, so that nvcc compiles no
// Abseil container code.
struct BagLaunchArgs {
  int num_tasks = 0;
  uint64_t total_units = 0;
  uint64_t descs_offset = 0;  // into the input buffer
  uint64_t flags_offset = 0;  // into the output buffer
};

// Launches the kernel over device buffers `input` (input_bytes, already holding
// PackBagInput's bytes) and `output` (output_bytes, flags already reset to kNoBadIndex) on the
// current device, one wave of blocks for `sm_count` multiprocessors (kernel_occupancy.h).
// Does not wait for the kernel.
// Returns OK, or INTERNAL naming the CUDA error of the occupancy query or of the launch.
// REQUIRES: args.total_units > 0; the buffers are 256-byte aligned device memory.
absl::Status LaunchBagBatch(const BagLaunchArgs& args, const uint8_t* input, uint8_t* output,
                            int sm_count, cudaStream_t stream);

// Checks, on the calling thread's current device, the kernel that LaunchBagBatch launches
// (cudaFuncGetAttributes), and fills its grid-size cache. For start-up: a binary built without
// code for the device fails here rather than at the first batch.
// Returns OK, or INTERNAL naming the CUDA error (cudaErrorNoKernelImageForDevice when the
// binary has no code for the device).
absl::Status ProbeBagKernels();

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_BAG_KERNEL_H_
