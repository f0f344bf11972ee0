#include <algorithm>

#include "core/cuda/bag_kernel.h"
#include "core/cuda/bag_unit.h"
#include "core/cuda/cuda_status.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 resident threads per SM on sm_90

// Grid-stride over the batch's units; each runs BagUnit for its task (found by binary search
// over the descriptor table). A unit's index arithmetic is 64-bit: it is spent once per unit,
// against a whole bag of rows read.
__global__ void __launch_bounds__(kThreads)
    BagBatchKernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out, int num_tasks,
                   uint64_t total_units, uint64_t descs_offset, uint64_t flags_offset) {
  const auto* descs = reinterpret_cast<const BagDesc*>(in + descs_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(out + flags_offset);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t u = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total_units;
       u += stride) {
    const int t = FindTask(descs, num_tasks, u);
    BagUnit(descs[t], u - descs[t].unit_begin, in, out, flags + t);
  }
}

}  // namespace

absl::Status ProbeBagKernels() {
  cudaFuncAttributes attributes;
  TC_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, BagBatchKernel),
                          "probing the EmbeddingBag kernel");
  return absl::OkStatus();
}

absl::Status LaunchBagBatch(const BagLaunchArgs& args, const uint8_t* input, uint8_t* output,
                            int sm_count, cudaStream_t stream) {
  const uint64_t needed = (args.total_units + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(std::max<uint64_t>(
      1, std::min<uint64_t>(needed, uint64_t{1} * std::max(sm_count, 1) * kBlocksPerSm)));
  BagBatchKernel<<<blocks, kThreads, 0, stream>>>(input, output, args.num_tasks, args.total_units,
                                                  args.descs_offset, args.flags_offset);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the EmbeddingBag kernel");
  return absl::OkStatus();
}

}  // namespace tensorcompute::cuda
