// File: core/cuda/scatter_kernel.h
//
// The launch that writes one staged window of a row update into a resident table's device copy
// (CudaExecutor::UpdateRows; the window and its units are scatter_unit.h's): a grid-stride loop
// over the window's units, each running ScatterUnit. Host API -> launch -> kernel -> per-unit
// work, as gather_kernel.h; the launcher checks cudaGetLastError() after the launch.
//
// Thread-safety: a launch is ordered on `stream`; concurrent launches on different streams are
// independent.

#ifndef TENSORCOMPUTE_CORE_CUDA_SCATTER_KERNEL_H_
#define TENSORCOMPUTE_CORE_CUDA_SCATTER_KERNEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include <cuda_runtime.h>

#include "core/cuda/scatter_unit.h"

namespace tensorcompute::cuda {

// Launches the scatter of window `args` from device buffer `staged` (already holding
// StageScatterWindow's bytes) into `table` on the current device, one wave of blocks for
// `sm_count` multiprocessors (kernel_occupancy.h). Does not wait for the kernel.
// Returns OK, or INTERNAL naming the CUDA error of the occupancy query or of the launch.
// REQUIRES: args.total_units > 0; `staged` and `table` are 256-byte aligned device memory of the
// current device; every staged row number is a row of the table.
absl::Status LaunchScatterRows(const ScatterArgs& args, const uint8_t* staged, uint8_t* table,
                               int sm_count, cudaStream_t stream);

// Checks, on the calling thread's current device, every kernel LaunchScatterRows may launch
// (cudaFuncGetAttributes), and fills their grid-size cache: a binary without code for the device
// fails at start-up rather than at the first update.
// Returns OK, or INTERNAL naming the CUDA error (cudaErrorNoKernelImageForDevice).
absl::Status ProbeScatterKernels();

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_SCATTER_KERNEL_H_
