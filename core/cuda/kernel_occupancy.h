// File: core/cuda/kernel_occupancy.h
//
// Grid sizing for the batch kernels (gather_kernel.cu, bag_kernel.cu): a grid-stride kernel is
// launched with as many blocks as fit on the device at once (one wave: multiprocessors x the
// blocks of THAT kernel that one multiprocessor holds, which its register count decides), and
// never more than its work needs. A grid of a fixed 8 blocks per multiprocessor, when only 3 to
// 6 fit, ran as 1.3 to 2.7 waves: the last, partial wave left the device part idle.
//
// KernelBlocksPerSm asks cudaOccupancyMaxActiveBlocksPerMultiprocessor once per kernel instance
// and device ordinal (the calling thread's current device) and keeps the answer in a static
// cache: lock-free, filled lazily, safe to call from any thread (two threads racing on an empty
// entry both ask and store the same value).
//
// Only core/cuda/'s .cu files include this (it uses the CUDA runtime).

#ifndef TENSORCOMPUTE_CORE_CUDA_KERNEL_OCCUPANCY_H_
#define TENSORCOMPUTE_CORE_CUDA_KERNEL_OCCUPANCY_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include <cuda_runtime.h>

#include "core/cuda/cuda_status.h"

namespace tensorcompute::cuda {

// Device ordinals below this have a cache entry; others ask the runtime on every launch.
inline constexpr int kOccupancyCachedDevices = 64;

// Sets *blocks to how many blocks of `kKernel` (a __global__ function), launched with
// `threads` threads and no dynamic shared memory, one multiprocessor of the current device
// holds (at least 1). Returns OK, or INTERNAL naming the CUDA error (cudaGetDevice or the
// occupancy query; e.g. cudaErrorNoKernelImageForDevice); the runtime's last error is cleared
// then, so that it is not reported again by a later launch's cudaGetLastError().
template <auto kKernel>
absl::Status KernelBlocksPerSm(int threads, int* blocks) {
  static std::atomic<int> cache[kOccupancyCachedDevices];  // zero (static): not asked yet
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  const bool cached = error == cudaSuccess && device >= 0 && device < kOccupancyCachedDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known > 0) {
      *blocks = known;
      return absl::OkStatus();
    }
  }
  int fit = 0;
  if (error == cudaSuccess) {
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kKernel, threads, 0);
  }
  if (error != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return CudaError(error, "asking how many blocks of a kernel fit on a multiprocessor");
  }
  fit = std::max(fit, 1);
  if (cached) cache[device].store(fit, std::memory_order_relaxed);
  *blocks = fit;
  return absl::OkStatus();
}

// Checks that the binary has code for `kKernel` on the current device (cudaFuncGetAttributes)
// and fills its KernelBlocksPerSm entry. Returns OK, or INTERNAL naming the CUDA error
// (cudaErrorNoKernelImageForDevice when the binary has no code for the device); the runtime's
// last error is cleared.
template <auto kKernel>
absl::Status ProbeKernel(int threads, const char* name) {
  cudaFuncAttributes attributes;
  const cudaError_t error = cudaFuncGetAttributes(&attributes, kKernel);
  if (error != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return CudaError(error, name);
  }
  int blocks = 0;
  return KernelBlocksPerSm<kKernel>(threads, &blocks);
}

// Blocks of a grid-stride launch: one wave (sm_count x blocks_per_sm), never more than the
// `needed` blocks that give every thread work, at least 1.
inline unsigned GridBlocks(uint64_t needed, int sm_count, int blocks_per_sm) {
  const uint64_t wave = uint64_t{1} * std::max(sm_count, 1) * std::max(blocks_per_sm, 1);
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min(needed, wave)));
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_KERNEL_OCCUPANCY_H_
