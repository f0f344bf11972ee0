#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "core/cuda/kernel_occupancy.h"
#include "core/cuda/scatter_kernel.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride over the window's units, W bytes each. No overflow in 32 bits: a window has far
// fewer than 2^31 units (scatter_unit.h), and the stride is one wave of blocks, a few million.
template <int W>
__global__ void __launch_bounds__(kThreads)
    ScatterRowsKernel(ScatterArgs args, const uint8_t* __restrict__ staged,
                      uint8_t* __restrict__ table) {
  const uint32_t stride = gridDim.x * kThreads;
  for (uint32_t u = blockIdx.x * kThreads + threadIdx.x; u < args.total_units; u += stride) {
    ScatterUnit<W>(args, staged, table, u);
  }
}

template <int W>
absl::Status Launch(const ScatterArgs& args, const uint8_t* staged, uint8_t* table, int sm_count,
                    cudaStream_t stream) {
  int per_sm = 0;
  const absl::Status occupancy = KernelBlocksPerSm<ScatterRowsKernel<W>>(kThreads, &per_sm);
  if (!occupancy.ok()) return occupancy;
  const unsigned blocks =
      GridBlocks((uint64_t{args.total_units} + kThreads - 1) / kThreads, sm_count, per_sm);
  ScatterRowsKernel<W><<<blocks, kThreads, 0, stream>>>(args, staged, table);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the row scatter kernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchScatterRows(const ScatterArgs& args, const uint8_t* staged, uint8_t* table,
                               int sm_count, cudaStream_t stream) {
  switch (args.vector_bytes) {
    case 16:
      return Launch<16>(args, staged, table, sm_count, stream);
    case 8:
      return Launch<8>(args, staged, table, sm_count, stream);
    case 4:
      return Launch<4>(args, staged, table, sm_count, stream);
    case 2:
      return Launch<2>(args, staged, table, sm_count, stream);
    default:
      return Launch<1>(args, staged, table, sm_count, stream);
  }
}

absl::Status ProbeScatterKernels() {
  const char* what = "probing the row scatter kernel";
  for (const absl::Status& status : {ProbeKernel<ScatterRowsKernel<16>>(kThreads, what),
                                     ProbeKernel<ScatterRowsKernel<8>>(kThreads, what),
                                     ProbeKernel<ScatterRowsKernel<4>>(kThreads, what),
                                     ProbeKernel<ScatterRowsKernel<2>>(kThreads, what),
                                     ProbeKernel<ScatterRowsKernel<1>>(kThreads, what)}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::cuda
