#include <algorithm>

#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_kernel.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 resident threads per SM on sm_90

// Grid-stride over the batch's units; each runs GatherUnit for its task (found by binary
// search over the descriptor table, which stays in L1 across a block's units).
template <typename I>
__global__ void __launch_bounds__(kThreads)
    GatherBatchKernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out, int num_tasks,
                      I total_units, uint64_t descs_offset, uint64_t dims_offset,
                      uint64_t flags_offset) {
  const auto* descs = reinterpret_cast<const GatherDesc*>(in + descs_offset);
  const auto* dims = reinterpret_cast<const int64_t*>(in + dims_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(out + flags_offset);
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I u = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; u < total_units; u += stride) {
    const int t = FindTask(descs, num_tasks, u);
    GatherUnit<I>(descs[t], dims, u - static_cast<I>(descs[t].unit_begin), in, out, flags + t);
  }
}

}  // namespace

absl::Status ProbeGatherKernels() {
  cudaFuncAttributes attributes;
  TC_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, GatherBatchKernel<uint32_t>),
                          "probing the gather kernel");
  TC_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, GatherBatchKernel<uint64_t>),
                          "probing the gather kernel");
  return absl::OkStatus();
}

absl::Status LaunchGatherBatch(const LaunchArgs& layout, const uint8_t* input, uint8_t* output,
                               int sm_count, cudaStream_t stream) {
  const uint64_t needed = (layout.total_units + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(std::max<uint64_t>(
      1, std::min<uint64_t>(needed, uint64_t{1} * std::max(sm_count, 1) * kBlocksPerSm)));
  const int tasks = layout.num_tasks;
  if (layout.fits_32bit) {
    GatherBatchKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(
        input, output, tasks, static_cast<uint32_t>(layout.total_units), layout.descs_offset,
        layout.dims_offset, layout.flags_offset);
  } else {
    GatherBatchKernel<uint64_t><<<blocks, kThreads, 0, stream>>>(
        input, output, tasks, layout.total_units, layout.descs_offset, layout.dims_offset,
        layout.flags_offset);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the gather kernel");
  return absl::OkStatus();
}

}  // namespace tensorcompute::cuda
