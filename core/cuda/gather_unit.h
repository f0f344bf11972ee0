// File: core/cuda/gather_unit.h
//
// What the gather kernels do for one work unit, and what one thread of the unrolled kernel does
// with its K units of a tile (GatherUnitGroup), as TC_HOST_DEVICE functions: compiled into the
// kernels (gather_kernel.cu) and, on the host, into RunBatchOnHost (gather_batch.h), which the
// CPU tests run over every unit, and into the tests' simulated grids. Only core/index_math.h and
// work_units.h (the flag and FindTask, shared with the EmbeddingBag kernel) are included, so nvcc
// sees no Abseil here.
//
// Work units. Output row r of a task has `chunks_per_row` units of `vector_bytes` each (the
// widest power of two <= 16 dividing the slice's bytes, so every access is aligned: buffers
// and regions are 256-byte aligned; so are resident tables' device copies, from cudaMalloc). Unit u
// of the batch belongs to the task whose [unit_begin, unit_begin + units) holds it. Consecutive
// units are consecutive bytes of a row (wide rows) or consecutive rows (narrow ones): coalesced
// either way.
//
// Bad indices: a unit whose index tuple has a component outside [-dim, dim) copies nothing and
// lowers its task's flag to that component's flat position in indices (atomic min); the
// flags start at kNoBadIndex. Every tuple is used by at least one unit (the executor sends
// only tasks with output rows and non-empty slices), so the lowest bad position is found.
//
// Thread-safety: pure functions; the flag update is atomic on the device.

#ifndef TENSORCOMPUTE_CORE_CUDA_GATHER_UNIT_H_
#define TENSORCOMPUTE_CORE_CUDA_GATHER_UNIT_H_

#include <cstdint>
#include <cstring>

#include "core/cuda/work_units.h"
#include "core/index_math.h"

namespace tensorcompute::cuda {

// One task as the kernel sees it. Offsets are bytes into the batch's input / output buffers.
// A task on a resident table whose copy lives on the batch's device reads its params from
// that copy: params_address is then the copy's device address (and params_offset unused), so
// the input buffer carries only its indices. params_address 0: params are in the buffer.
struct GatherDesc {
  uint64_t params_offset;
  uint64_t params_address;
  uint64_t indices_offset;
  uint64_t output_offset;
  uint64_t unit_begin;  // first work unit of this task in the batch
  uint64_t units;       // output rows x chunks_per_row
  int64_t outer;        // GatherPlan fields (output rows = batch * outer * num_indices)
  int64_t num_indices;
  int64_t depth;
  int64_t rows;
  int64_t slice_bytes;
  uint32_t dims_offset;     // first of `depth` entries in the dims table (int64)
  uint32_t vector_bytes;    // 1, 2, 4, 8 or 16
  uint32_t chunks_per_row;  // slice_bytes / vector_bytes (GatherSliceFitsKernel)
  uint32_t index_bytes;     // 4 (int32) or 8 (int64)
};
// The host writes the table that the device reads: one layout for both compilers.
static_assert(sizeof(GatherDesc) == 104, "GatherDesc must have no padding surprises");

// Whether a slice of `slice_bytes` can be gathered by the kernel: its row splits into at most
// UINT32_MAX chunks of VectorBytes(slice_bytes) (GatherDesc::chunks_per_row is 32 bits). A task
// whose slice does not fit must be computed elsewhere (the executor sends it to the CPU).
TC_HOST_DEVICE inline bool GatherSliceFitsKernel(int64_t slice_bytes) {
  return static_cast<uint64_t>(slice_bytes) / VectorBytes(slice_bytes) <= uint64_t{UINT32_MAX};
}

// A work unit is done in three steps, so that a thread may hold several units at once (the
// unrolled kernel locates a few units of one task, reads their first index components
// together, resolves them, then has all their loads in flight, then all their stores):
//   LocateGatherUnit    pure arithmetic: which output row and chunk, params block, index tuple;
//   FirstGatherIndices  the reads the rest depends on: each tuple's first component;
//   ResolveGatherSite   the other components, the range checks (a bad component lowers the
//                       flag and the unit copies nothing), and the chunk's source and target.
// ResolveGatherUnit runs the three for one unit, and GatherUnit copies its chunk too: what the
// host twin (RunBatchOnHost) runs for every unit. `I` is the type of the row and unit
// arithmetic: uint32_t when the whole batch fits (BatchLayout::fits_32bit; 64-bit division costs
// several times more on a GPU), else uint64_t. The arithmetic is core/index_math.h's, done in I.

// Where work unit u of a task sits: chunk `chunk` of output row `r`, read from params block
// `block` (b * outer + o) at the row that index tuple `tuple` (b * num_indices + n) names.
template <typename I>
struct GatherUnitSite {
  I r;
  I chunk;
  I block;
  I tuple;
};

// REQUIRES: u < d.units.
template <typename I>
TC_HOST_DEVICE inline GatherUnitSite<I> LocateGatherUnit(const GatherDesc& d, I u) {
  const I chunks = static_cast<I>(d.chunks_per_row);
  const I num_indices = static_cast<I>(d.num_indices);
  GatherUnitSite<I> s;
  // The shortcuts (one chunk per row; outer 1) skip a division each; they give the same values.
  s.r = chunks == 1 ? u : u / chunks;
  s.chunk = u - s.r * chunks;
  s.block = s.r / num_indices;  // b * outer + o
  const I n = s.r - s.block * num_indices;
  s.tuple = d.outer == 1 ? s.r : (s.block / static_cast<I>(d.outer)) * num_indices + n;
  return s;
}

// Component k of index tuple `tuple` of task d, as stored (int32 or int64).
TC_HOST_DEVICE inline int64_t GatherIndexValue(const GatherDesc& d, const uint8_t* in,
                                               uint64_t tuple, int64_t k) {
  const uint8_t* index = in + d.indices_offset + tuple * d.depth * d.index_bytes;
  return d.index_bytes == 4 ? reinterpret_cast<const int32_t*>(index)[k]
                            : reinterpret_cast<const int64_t*>(index)[k];
}

// first[i] = the first component of sites[i]'s tuple (0, and nothing read, for depth 0). The
// branches on the task's depth and index type are taken once for all N, so that the N reads
// sit together and are in flight together. REQUIRES: every site is one of task d's units.
template <typename I, int N>
TC_HOST_DEVICE inline void FirstGatherIndices(const GatherDesc& d, const uint8_t* in,
                                              const GatherUnitSite<I> (&sites)[N],
                                              int64_t (&first)[N]) {
  const uint8_t* indices = in + d.indices_offset;
  const uint64_t tuple_bytes = d.depth * d.index_bytes;
  if (d.depth == 0) {
    TC_UNROLL
    for (int i = 0; i < N; ++i) first[i] = 0;
  } else if (d.index_bytes == 4) {
    TC_UNROLL
    for (int i = 0; i < N; ++i) {
      first[i] = *reinterpret_cast<const int32_t*>(indices + sites[i].tuple * tuple_bytes);
    }
  } else {
    TC_UNROLL
    for (int i = 0; i < N; ++i) {
      first[i] = *reinterpret_cast<const int64_t*>(indices + sites[i].tuple * tuple_bytes);
    }
  }
}

// Checks the unit's index tuple (`first`: its first component, FirstGatherIndices). Returns
// true and sets *from / *to to the d.vector_bytes chunk to copy (from params, to the output
// buffer); or, on a component outside [-dim, dim), lowers *flag to its flat position and
// returns false.
template <typename I>
TC_HOST_DEVICE inline bool ResolveGatherSite(const GatherDesc& d, const int64_t* dims,
                                             const GatherUnitSite<I>& s, int64_t first,
                                             const uint8_t* in, uint8_t* out,
                                             unsigned long long* flag, const uint8_t** from,
                                             uint8_t** to) {
  int64_t row = 0;
  for (int64_t k = 0; k < d.depth; ++k) {
    const int64_t v = k == 0 ? first : GatherIndexValue(d, in, s.tuple, k);
    int64_t component;
    if (!core::NormalizeIndex(v, dims[d.dims_offset + k], &component)) {
      LowerFlag(flag, static_cast<unsigned long long>(s.tuple) * d.depth + k);
      return false;
    }
    row = core::AccumulateRow(row, dims[d.dims_offset + k], component);
  }
  const uint64_t offset = static_cast<uint64_t>(s.chunk) * d.vector_bytes;
  const uint8_t* params = d.params_address != 0 ? reinterpret_cast<const uint8_t*>(d.params_address)
                                                : in + d.params_offset;
  *from = params +
          static_cast<uint64_t>(core::ParamsSliceOffset(s.block, d.rows, row, d.slice_bytes)) +
          offset;
  *to = out + d.output_offset + static_cast<uint64_t>(s.r) * d.slice_bytes + offset;
  return true;
}

// The three steps for unit `u` (0 <= u < d.units) of task `d`. `in`/`out` are the batch's
// buffers; `dims` the dims table; `flag` the task's flag.
template <typename I>
TC_HOST_DEVICE inline bool ResolveGatherUnit(const GatherDesc& d, const int64_t* dims, I u,
                                             const uint8_t* in, uint8_t* out,
                                             unsigned long long* flag, const uint8_t** from,
                                             uint8_t** to) {
  const GatherUnitSite<I> site[1] = {LocateGatherUnit<I>(d, u)};
  int64_t first[1];
  FirstGatherIndices<I, 1>(d, in, site, first);
  return ResolveGatherSite<I>(d, dims, site[0], first[0], in, out, flag, from, to);
}

// Copies one chunk of `vector_bytes` (1, 2, 4, 8 or 16; both addresses aligned to it).
TC_HOST_DEVICE inline void CopyGatherChunk(uint32_t vector_bytes, uint8_t* to,
                                           const uint8_t* from) {
  switch (vector_bytes) {
    case 16:
      CopyChunk<16>(to, from);
      break;
    case 8:
      CopyChunk<8>(to, from);
      break;
    case 4:
      CopyChunk<4>(to, from);
      break;
    case 2:
      CopyChunk<2>(to, from);
      break;
    default:
      CopyChunk<1>(to, from);
      break;
  }
}

// Does work unit `u` (0 <= u < d.units) of task `d`: ResolveGatherUnit, then the copy.
template <typename I>
TC_HOST_DEVICE inline void GatherUnit(const GatherDesc& d, const int64_t* dims, I u,
                                      const uint8_t* in, uint8_t* out, unsigned long long* flag) {
  const uint8_t* from;
  uint8_t* to;
  if (ResolveGatherUnit<I>(d, dims, u, in, out, flag, &from, &to)) {
    CopyGatherChunk(d.vector_bytes, to, from);
  }
}

// A W-byte chunk moved with memcpy: the host's chunk policy for GatherUnitGroup (the kernel's
// moves a chunk as one typed register value through the read-only path, gather_kernel.cu). A
// policy has a value type T, `static T Load(const uint8_t*)` and `static void Store(uint8_t*,
// const T&)`.
template <int W>
struct MemcpyChunk {
  struct T {
    uint8_t bytes[W];
  };
  static T Load(const uint8_t* from) {
    T v;
    std::memcpy(v.bytes, from, W);
    return v;
  }
  static void Store(uint8_t* to, const T& v) { std::memcpy(to, v.bytes, W); }
};

// What one thread of the unrolled kernel does with one of its tiles: units base + k * spacing
// of the batch, k < K, those below total_units, every task's vector_bytes being `Chunk`'s W.
// When they all belong to one task (all but the threads whose tile straddles two tasks), it
// locates all K, reads their first index components together, resolves them, then loads all K
// chunks, then stores them: K loads in flight, and the task's descriptor read once. Units past
// total_units stand in as copies of the first, so that no read is behind a branch (a unit with
// a bad index loads from `in`, harmlessly); only their stores are skipped. Otherwise it does
// its units one by one, each with its own task. Every unit is done as GatherUnit does it.
// REQUIRES: base < total_units; spacing >= 1; (K - 1) * spacing + total_units fits in I.
template <typename I, int K, typename Chunk>
TC_HOST_DEVICE inline void GatherUnitGroup(const GatherDesc* descs, int num_tasks,
                                           const int64_t* dims, I base, I spacing, I total_units,
                                           const uint8_t* in, uint8_t* out,
                                           unsigned long long* flags) {
  const I left = total_units - base;  // the thread's units: k * spacing < left
  const I last =
      base + (left > (K - 1) * spacing ? (K - 1) * spacing : (left - 1) / spacing * spacing);
  const int t = FindTask(descs, num_tasks, base);
  const GatherDesc& d = descs[t];
  const I begin = static_cast<I>(d.unit_begin);
  if (last - begin < d.units) {  // every unit of the thread is task t's
    GatherUnitSite<I> site[K];
    bool live[K];
    TC_UNROLL
    for (int k = 0; k < K; ++k) {
      live[k] = static_cast<I>(k) * spacing < left;
      site[k] = LocateGatherUnit<I>(d, base - begin + (live[k] ? static_cast<I>(k) * spacing : 0));
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
      if (!ok[k]) from[k] = in;
    }
    typename Chunk::T value[K];
    TC_UNROLL
    for (int k = 0; k < K; ++k) value[k] = Chunk::Load(from[k]);
    TC_UNROLL
    for (int k = 0; k < K; ++k) {
      if (ok[k]) Chunk::Store(to[k], value[k]);
    }
    return;
  }
  for (int k = 0; k < K && static_cast<I>(k) * spacing < left; ++k) {
    const I u = base + static_cast<I>(k) * spacing;
    const int tk = FindTask(descs, num_tasks, u);
    const uint8_t* from;
    uint8_t* to;
    if (ResolveGatherUnit<I>(descs[tk], dims, u - static_cast<I>(descs[tk].unit_begin), in, out,
                             flags + tk, &from, &to)) {
      Chunk::Store(to, Chunk::Load(from));
    }
  }
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_GATHER_UNIT_H_
