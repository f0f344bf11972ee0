#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/kernel_occupancy.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kThreads = 256;

// One-unit kernel: grid-stride over the batch's units; each runs GatherUnit for its task (found
// by binary search over the descriptor table, which stays in L1 across a block's units), its
// copy width chosen per unit. For batches whose tasks differ in vector_bytes.
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

// A W-byte chunk as one register value.
template <int W>
struct Chunk;
template <>
struct Chunk<16> {
  using T = uint4;
};
template <>
struct Chunk<8> {
  using T = uint2;
};
template <>
struct Chunk<4> {
  using T = unsigned int;
};
template <>
struct Chunk<2> {
  using T = unsigned short;
};
template <>
struct Chunk<1> {
  using T = unsigned char;
};

// Copies one resolved W-byte chunk.
template <int W>
__device__ __forceinline__ void CopyResolvedChunk(uint8_t* to, const uint8_t* from) {
  using T = typename Chunk<W>::T;
  *reinterpret_cast<T*>(to) = __ldg(reinterpret_cast<const T*>(from));
}

// Unrolled kernel, every task of vector_bytes W: block b takes tiles of K x kThreads
// consecutive units (b, b + gridDim.x, ...); thread x of a tile takes units x, x + kThreads,
// ..., so each of the K steps is coalesced across a warp. When its K units belong to one task
// (all but the threads whose tile straddles two tasks), a thread resolves all K (their first
// index reads issued together), then loads all K chunks, then stores them: K loads in flight
// per thread instead of one, and the task's descriptor read once. Otherwise it does its units
// one by one, each with its own task.
// Loads: params and indices are read-only for the kernel's lifetime (the input buffer, or a
// resident table's copy, which no one writes while batches read it), so the chunks go through
// the non-coherent read-only path (__ldg: ld.global.nc); without it a resident table's address,
// made from an integer, is read with a generic load. Loads keep the default caching: gathered
// rows may be hot and read again. Stores: plain write-back; the output is read next by the
// batch's device-to-host copy, which an evict-first (streaming) store would make miss in L2.
template <typename I, int W>
__global__ void __launch_bounds__(kThreads)
    GatherBatchKernelUnrolled(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                              int num_tasks, I total_units, uint64_t descs_offset,
                              uint64_t dims_offset, uint64_t flags_offset) {
  constexpr int K = kGatherUnroll;
  using T = typename Chunk<W>::T;
  const auto* descs = reinterpret_cast<const GatherDesc*>(in + descs_offset);
  const auto* dims = reinterpret_cast<const int64_t*>(in + dims_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(out + flags_offset);
  // No overflow in I: on the 32-bit path total_units < 2^31, and step is at most one wave of
  // blocks (multiprocessors x blocks per multiprocessor) x K x kThreads, a few million, so
  // base + step stays below 2^32.
  const I step = static_cast<I>(gridDim.x) * (K * kThreads);
  for (I base = static_cast<I>(blockIdx.x) * (K * kThreads) + threadIdx.x; base < total_units;
       base += step) {
    const I left = total_units - base;  // units of this thread: those with k * kThreads < left
    const I last =
        base + (left > (K - 1) * kThreads ? (K - 1) * kThreads : (left - 1) / kThreads * kThreads);
    const int t = FindTask(descs, num_tasks, base);
    const GatherDesc& d = descs[t];
    const I begin = static_cast<I>(d.unit_begin);
    if (last - begin < d.units) {  // every unit of the thread is task t's
      // Units past the end (the last tile's) stand in as copies of the first, so that every
      // read below is of a real unit and none is guarded by a branch; only their stores are
      // skipped.
      GatherUnitSite<I> site[K];
      bool live[K];
      TC_UNROLL
      for (int k = 0; k < K; ++k) {
        live[k] = static_cast<I>(k * kThreads) < left;
        site[k] =
            LocateGatherUnit<I>(d, base - begin + (live[k] ? static_cast<I>(k * kThreads) : 0));
      }
      int64_t first[K];
      FirstGatherIndices<I, K>(d, in, site, first);
      const uint8_t* from[K];
      uint8_t* to[K];
      bool ok[K];
      TC_UNROLL
      for (int k = 0; k < K; ++k) {
        ok[k] = live[k] && ResolveGatherSite<I>(d, dims, site[k], first[k], in, out, flags + t,
                                                &from[k], &to[k]);
        if (!ok[k]) from[k] = in;  // aligned and harmless to read
      }
      T value[K];
      TC_UNROLL
      for (int k = 0; k < K; ++k) value[k] = __ldg(reinterpret_cast<const T*>(from[k]));
      TC_UNROLL
      for (int k = 0; k < K; ++k) {
        if (ok[k]) *reinterpret_cast<T*>(to[k]) = value[k];
      }
    } else {
      for (int k = 0; k < K && static_cast<I>(k * kThreads) < left; ++k) {
        const I u = base + static_cast<I>(k * kThreads);
        const int tk = FindTask(descs, num_tasks, u);
        const uint8_t* from;
        uint8_t* to;
        if (ResolveGatherUnit<I>(descs[tk], dims, u - static_cast<I>(descs[tk].unit_begin), in, out,
                                 flags + tk, &from, &to)) {
          CopyResolvedChunk<W>(to, from);
        }
      }
    }
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
