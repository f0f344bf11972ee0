#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/kernel_occupancy.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;

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

// Launches GatherBatchKernel<I> with one wave of blocks.
template <typename I>
absl::Status LaunchFor(const LaunchArgs& args, const uint8_t* input, uint8_t* output, int sm_count,
                       cudaStream_t stream) {
  int per_sm = 0;
  const absl::Status occupancy = KernelBlocksPerSm<GatherBatchKernel<I>>(kThreads, &per_sm);
  if (!occupancy.ok()) return occupancy;
  const unsigned blocks =
      GridBlocks((args.total_units + kThreads - 1) / kThreads, sm_count, per_sm);
  GatherBatchKernel<I><<<blocks, kThreads, 0, stream>>>(
      input, output, args.num_tasks, static_cast<I>(args.total_units), args.descs_offset,
      args.dims_offset, args.flags_offset);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the gather kernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchGatherBatch(const LaunchArgs& args, const uint8_t* input, uint8_t* output,
                               int sm_count, cudaStream_t stream) {
  return args.fits_32bit ? LaunchFor<uint32_t>(args, input, output, sm_count, stream)
                         : LaunchFor<uint64_t>(args, input, output, sm_count, stream);
}

absl::Status ProbeGatherKernels() {
  const char* what = "probing the gather kernels";
  const absl::Status status = ProbeKernel<GatherBatchKernel<uint32_t>>(kThreads, what);
  return status.ok() ? ProbeKernel<GatherBatchKernel<uint64_t>>(kThreads, what) : status;
}

}  // namespace tensorcompute::cuda
