#include <cstdint>

#include "core/cuda/bag_kernel.h"
#include "core/cuda/bag_unit.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/kernel_occupancy.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride over the batch's units; each runs BagUnit for its task (found by binary search
// over the descriptor table). A unit's index arithmetic is 64-bit: it is spent once per unit,
// against a whole bag of rows read. The grid is one wave (kernel_occupancy.h): this kernel
// holds every element type's code, so its register count, and with it the blocks that fit on
// a multiprocessor, is the largest of them.
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

absl::Status LaunchBagBatch(const BagLaunchArgs& args, const uint8_t* input, uint8_t* output,
                            int sm_count, cudaStream_t stream) {
  int per_sm = 0;
  const absl::Status occupancy = KernelBlocksPerSm<BagBatchKernel>(kThreads, &per_sm);
  if (!occupancy.ok()) return occupancy;
  const unsigned blocks =
      GridBlocks((args.total_units + kThreads - 1) / kThreads, sm_count, per_sm);
  BagBatchKernel<<<blocks, kThreads, 0, stream>>>(input, output, args.num_tasks, args.total_units,
                                                  args.descs_offset, args.flags_offset);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the EmbeddingBag kernel");
  return absl::OkStatus();
}

absl::Status ProbeBagKernels() {
  return ProbeKernel<BagBatchKernel>(kThreads, "probing the EmbeddingBag kernel");
}

}  // namespace tensorcompute::cuda
