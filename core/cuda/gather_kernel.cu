#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/kernel_occupancy.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;

// One-unit kernel: grid-stride over the batch's units; each runs GatherUnit for its task (found
// by binary search over the descriptor table, which stays in L1 across a block's units), its
// copy width chosen per unit. For batches whose tasks differ in vector_bytes. The minimum
// blocks per multiprocessor keep the occupancy it had before GatherUnit was split into steps
// (6 blocks of 256 with 32-bit arithmetic, 5 with 64-bit); without it ptxas gives the 32-bit
// one 44 registers instead of 40, one block fewer. Neither spills.
template <typename I>
__global__ void __launch_bounds__(kThreads, sizeof(I) == 4 ? 6 : 5)
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

// The register type of a W-byte chunk.
template <int W>
struct ChunkType;
template <>
struct ChunkType<16> {
  using T = uint4;
};
template <>
struct ChunkType<8> {
  using T = uint2;
};
template <>
struct ChunkType<4> {
  using T = unsigned int;
};
template <>
struct ChunkType<2> {
  using T = unsigned short;
};
template <>
struct ChunkType<1> {
  using T = unsigned char;
};

// GatherUnitGroup's chunk policy on the device: a W-byte chunk as one register value, loaded
// through the read-only path.
template <int W>
struct VectorChunk {
  using T = typename ChunkType<W>::T;
  __device__ static T Load(const uint8_t* from) { return __ldg(reinterpret_cast<const T*>(from)); }
  __device__ static void Store(uint8_t* to, const T& v) { *reinterpret_cast<T*>(to) = v; }
};

// Unrolled kernel, every task of vector_bytes W: block b takes tiles of K x kThreads
// consecutive units (b, b + gridDim.x, ...); thread x of a tile takes units x, x + kThreads,
// ..., so each of the K steps is coalesced across a warp, and does them as GatherUnitGroup
// says (gather_unit.h; the host tests run it over simulated grids).
// Loads: params and indices are read-only for the kernel's lifetime (the input buffer, or a
// resident table's copy, which no one writes while batches read it), so the chunks go through
// the non-coherent read-only path (__ldg: ld.global.nc); without it a resident table's address,
// made from an integer, is read with a generic load. Index reads stay plain global loads
// (cached in L1 by default on sm_90, where the units of one row share them). Loads keep the
// default caching: gathered rows may be hot and read again. Stores: plain write-back; the output is
// read next by the batch's device-to-host copy, which an evict-first (streaming) store would make
// miss in L2.
template <typename I, int W>
__global__ void __launch_bounds__(kThreads)
    GatherBatchKernelUnrolled(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                              int num_tasks, I total_units, uint64_t descs_offset,
                              uint64_t dims_offset, uint64_t flags_offset) {
  constexpr int K = kGatherUnroll;
  const auto* descs = reinterpret_cast<const GatherDesc*>(in + descs_offset);
  const auto* dims = reinterpret_cast<const int64_t*>(in + dims_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(out + flags_offset);
  // No overflow in I: on the 32-bit path total_units < 2^31, and step is at most one wave of
  // blocks (multiprocessors x blocks per multiprocessor) x K x kThreads, a few million, so
  // base + step stays below 2^32.
  const I step = static_cast<I>(gridDim.x) * (K * kThreads);
  for (I base = static_cast<I>(blockIdx.x) * (K * kThreads) + threadIdx.x; base < total_units;
       base += step) {
    GatherUnitGroup<I, K, VectorChunk<W>>(descs, num_tasks, dims, base, kThreads, total_units, in,
                                          out, flags);
  }
}

// Launches `kKernel` (one of the above, instantiated for I) with one wave of blocks for
// `units_per_block` units each.
template <auto kKernel, typename I>
absl::Status Launch(const LaunchArgs& args, uint64_t units_per_block, const uint8_t* input,
                    uint8_t* output, int sm_count, cudaStream_t stream) {
  int per_sm = 0;
  const absl::Status occupancy = KernelBlocksPerSm<kKernel>(kThreads, &per_sm);
  if (!occupancy.ok()) return occupancy;
  const unsigned blocks =
      GridBlocks((args.total_units + units_per_block - 1) / units_per_block, sm_count, per_sm);
  kKernel<<<blocks, kThreads, 0, stream>>>(input, output, args.num_tasks,
                                           static_cast<I>(args.total_units), args.descs_offset,
                                           args.dims_offset, args.flags_offset);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, "launching the gather kernel");
  return absl::OkStatus();
}

template <typename I>
absl::Status LaunchFor(const LaunchArgs& args, const uint8_t* input, uint8_t* output, int sm_count,
                       cudaStream_t stream) {
  if (args.unroll == kGatherUnroll) {
    constexpr uint64_t kTile = uint64_t{kGatherUnroll} * kThreads;
    switch (args.uniform_vector_bytes) {
      case 16:
        return Launch<GatherBatchKernelUnrolled<I, 16>, I>(args, kTile, input, output, sm_count,
                                                           stream);
      case 8:
        return Launch<GatherBatchKernelUnrolled<I, 8>, I>(args, kTile, input, output, sm_count,
                                                          stream);
      case 4:
        return Launch<GatherBatchKernelUnrolled<I, 4>, I>(args, kTile, input, output, sm_count,
                                                          stream);
      case 2:
        return Launch<GatherBatchKernelUnrolled<I, 2>, I>(args, kTile, input, output, sm_count,
                                                          stream);
      case 1:
        return Launch<GatherBatchKernelUnrolled<I, 1>, I>(args, kTile, input, output, sm_count,
                                                          stream);
      default:  // 0: tasks of different widths
        break;
    }
  }
  return Launch<GatherBatchKernel<I>, I>(args, kThreads, input, output, sm_count, stream);
}

template <typename I>
absl::Status ProbeFor() {
  const char* what = "probing the gather kernels";
  for (const absl::Status& status :
       {ProbeKernel<GatherBatchKernel<I>>(kThreads, what),
        ProbeKernel<GatherBatchKernelUnrolled<I, 16>>(kThreads, what),
        ProbeKernel<GatherBatchKernelUnrolled<I, 8>>(kThreads, what),
        ProbeKernel<GatherBatchKernelUnrolled<I, 4>>(kThreads, what),
        ProbeKernel<GatherBatchKernelUnrolled<I, 2>>(kThreads, what),
        ProbeKernel<GatherBatchKernelUnrolled<I, 1>>(kThreads, what)}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchGatherBatch(const LaunchArgs& args, const uint8_t* input, uint8_t* output,
                               int sm_count, cudaStream_t stream) {
  if (args.unroll != 1 && args.unroll != kGatherUnroll) {
    return absl::InvalidArgumentError("LaunchArgs::unroll must be 1 or kGatherUnroll");
  }
  return args.fits_32bit ? LaunchFor<uint32_t>(args, input, output, sm_count, stream)
                         : LaunchFor<uint64_t>(args, input, output, sm_count, stream);
}

absl::Status ProbeGatherKernels() {
  const absl::Status status = ProbeFor<uint32_t>();
  return status.ok() ? ProbeFor<uint64_t>() : status;
}

}  // namespace tensorcompute::cuda
