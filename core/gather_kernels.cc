#include "core/gather_kernels.h"

#include <algorithm>
#include <cstring>

#include "core/index_math.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tensorcompute::core {
namespace {

constexpr int64_t kCacheLine = 64;

// Prefetches of random single elements go to L2 (hint T1) rather than L1: L2 tracks more
// misses in flight than L1's fill buffers, and a random scalar gather is bound by how many
// misses are in flight. Measured on our 2-vCPU VMs (float32, 256 MiB params): 61 -> 70 M
// elements/s on 4 KiB pages, 75 -> 95 M/s on huge pages. For slices T0 and T1 measured the
// same, and slices keep T0.
inline void PrefetchToL2(const void* p) { __builtin_prefetch(p, 0, 2); }

// Resolves the index tuple at `tuple` to a params row within its block. Returns -1 and sets
// *row, or returns the component (0..depth-1) that is out of range.
template <typename Index, bool kDepth1>
inline int64_t ResolveTuple(const Index* tuple, const int64_t* dims, int64_t depth, int64_t rows,
                            int64_t* row) {
  if constexpr (kDepth1) {
    return NormalizeIndex(tuple[0], rows, row) ? -1 : 0;
  } else {
    int64_t r = 0;
    for (int64_t k = 0; k < depth; ++k) {
      int64_t c;
      if (!NormalizeIndex(tuple[k], dims[k], &c)) return k;
      r = AccumulateRow(r, dims[k], c);
    }
    *row = r;
    return -1;
  }
}

// Walks output rows [begin, end) in order. For each row it resolves the row's index tuple and
// calls copier.Copy(out_row, src_row), where src_row numbers params' rows as if params were
// [batch * outer * rows, slice]. The row `prefetch_distance` ahead (within the same run of
// one (batch, outer) block) is resolved early and handed to copier.Prefetch, so that many
// independent loads are in flight: random rows are bound by memory latency, not bandwidth.
// Returns -1, or the flat position in indices of the first out-of-range value.
template <typename Index, bool kDepth1, typename Copier>
int64_t ForEachRow(const GatherPlan& p, const Index* idx, int64_t begin, int64_t end,
                   Copier& copier) {
  const int64_t num_indices = p.num_indices;
  const int64_t depth = kDepth1 ? 1 : p.depth;
  const int64_t rows = p.rows;
  const int64_t* dims = p.index_dims.data();
  const int64_t distance = copier.prefetch_distance();
  int64_t r = begin;
  while (r < end) {
    const RowSource src = DecomposeOutputRow(r, p.outer, num_indices);
    const int64_t run_end = std::min(end, r + (num_indices - r % num_indices));
    const int64_t block_row = src.block * rows;
    const Index* tuple = idx + src.tuple * depth;
    for (; r < run_end; ++r, tuple += depth) {
      if (distance > 0 && r + distance < run_end) {
        int64_t ahead;
        if (ResolveTuple<Index, kDepth1>(tuple + distance * depth, dims, depth, rows, &ahead) < 0) {
          copier.Prefetch(block_row + ahead);
        }
      }
      int64_t row;
      const int64_t bad = ResolveTuple<Index, kDepth1>(tuple, dims, depth, rows, &row);
      if (bad >= 0) return (tuple - idx) + bad;
      copier.Copy(r, block_row + row);
    }
  }
  return -1;
}

// One element per slice, of a fixed size: a load and a store. memcpy keeps unaligned request
// bytes legal; compilers turn it into one move.
template <size_t kSize>
struct ElementCopier {
  const uint8_t* src;
  uint8_t* dst;
  int64_t prefetch_distance() const { return 40; }
  void Prefetch(int64_t row) const { PrefetchToL2(src + row * kSize); }
  void Copy(int64_t out_row, int64_t row) const {
    std::memcpy(dst + out_row * kSize, src + row * kSize, kSize);
  }
};

// Prefetches the first `bytes` (capped) of a slice, a line at a time (the last byte too: an
// unaligned slice spans one more line).
inline void PrefetchSlice(const uint8_t* p, int64_t bytes) {
  const int64_t n = std::min<int64_t>(bytes, 2048);
  for (int64_t off = 0; off < n; off += kCacheLine) __builtin_prefetch(p + off);
  __builtin_prefetch(p + n - 1);
}

inline int64_t SlicePrefetchDistance(int64_t slice_bytes) {
  if (slice_bytes <= 256) return 8;
  if (slice_bytes <= 4096) return 4;
  return 0;  // long slices are sequential reads: the hardware prefetcher has them
}

// A multi-element slice: one memcpy.
struct SliceCopier {
  const uint8_t* src;
  uint8_t* dst;
  int64_t slice_bytes;
  int64_t prefetch_distance() const { return SlicePrefetchDistance(slice_bytes); }
  void Prefetch(int64_t row) const { PrefetchSlice(src + row * slice_bytes, slice_bytes); }
  void Copy(int64_t out_row, int64_t row) const {
    std::memcpy(dst + out_row * slice_bytes, src + row * slice_bytes, slice_bytes);
  }
};

#if defined(__SSE2__)
// A multi-element slice written with non-temporal stores. REQUIRES: dst 16-byte aligned and
// slice_bytes a multiple of 16. The caller fences (GatherRows does).
struct StreamingSliceCopier {
  const uint8_t* src;
  uint8_t* dst;
  int64_t slice_bytes;
  int64_t prefetch_distance() const { return SlicePrefetchDistance(slice_bytes); }
  void Prefetch(int64_t row) const { PrefetchSlice(src + row * slice_bytes, slice_bytes); }
  void Copy(int64_t out_row, int64_t row) const {
    const uint8_t* s = src + row * slice_bytes;
    auto* d = reinterpret_cast<__m128i*>(dst + out_row * slice_bytes);
    const int64_t n = slice_bytes / 16;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i);
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i + 1);
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i + 2);
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i + 3);
      _mm_stream_si128(d + i, a);
      _mm_stream_si128(d + i + 1, b);
      _mm_stream_si128(d + i + 2, c);
      _mm_stream_si128(d + i + 3, e);
    }
    for (; i < n; ++i) {
      _mm_stream_si128(d + i, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i));
    }
  }
};
#endif

// A slice of a fixed size of at most kMaxFixedSliceBytes (embedding rows: 16 to 256 B), with the
// copy unrolled at compile time: a call to memcpy and its size dispatch cost as much as the copy
// of one line. Small random rows are bound by how many misses are in flight, as single elements
// are, so they are prefetched as far ahead, into L2 (PrefetchToL2's reasons), one line at a time.
// With kStreaming the stores are non-temporal (REQUIRES: dst 16-byte aligned; the caller fences).
inline constexpr int64_t kMaxFixedSliceBytes = 256;

template <int64_t kBytes, bool kStreaming>
struct FixedSliceCopier {
  static_assert(kBytes % 16 == 0 && kBytes <= kMaxFixedSliceBytes);
  const uint8_t* src;
  uint8_t* dst;
  int64_t prefetch_distance() const { return kBytes <= 64 ? 32 : 16; }
  void Prefetch(int64_t row) const {
    const uint8_t* p = src + row * kBytes;
    for (int64_t off = 0; off < kBytes; off += kCacheLine) PrefetchToL2(p + off);
    PrefetchToL2(p + kBytes - 1);  // an unaligned slice spans one more line
  }
  void Copy(int64_t out_row, int64_t row) const {
    const uint8_t* s = src + row * kBytes;
    uint8_t* d = dst + out_row * kBytes;
#if defined(__SSE2__)
    if constexpr (kStreaming) {
      for (int64_t i = 0; i < kBytes; i += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
      }
      return;
    }
#endif
    std::memcpy(d, s, kBytes);
  }
};

struct StringCopier {
  const std::string* const* src;
  std::string* const* dst;
  int64_t slice;
  int64_t prefetch_distance() const { return 0; }
  void Prefetch(int64_t) const {}
  void Copy(int64_t out_row, int64_t row) const {
    for (int64_t j = 0; j < slice; ++j) *dst[out_row * slice + j] = *src[row * slice + j];
  }
};

struct StringSizer {
  const std::string* const* src;
  int64_t slice;
  int64_t bytes = 0;
  int64_t prefetch_distance() const { return 0; }
  void Prefetch(int64_t) const {}
  void Copy(int64_t, int64_t row) {
    for (int64_t j = 0; j < slice; ++j) bytes += static_cast<int64_t>(src[row * slice + j]->size());
  }
};

template <typename Index, typename Copier>
int64_t Walk(const GatherPlan& p, const TensorView& indices, int64_t begin, int64_t end,
             Copier& copier) {
  const Index* idx = reinterpret_cast<const Index*>(indices.data.data());
  return p.depth == 1 ? ForEachRow<Index, true>(p, idx, begin, end, copier)
                      : ForEachRow<Index, false>(p, idx, begin, end, copier);
}

template <typename Copier>
int64_t WalkAnyIndex(const GatherPlan& p, const TensorView& indices, int64_t begin, int64_t end,
                     Copier& copier) {
  return p.index_dtype == DataType::kInt32 ? Walk<int32_t>(p, indices, begin, end, copier)
                                           : Walk<int64_t>(p, indices, begin, end, copier);
}

// Runs the walk with FixedSliceCopier<slice_bytes> when there is one for that size (storing the
// walk's result in *bad) and returns true; returns false, having done nothing, otherwise.
template <bool kStreaming>
bool WalkFixedSlice(const GatherPlan& p, const TensorView& indices, const uint8_t* src,
                    uint8_t* dst, int64_t slice_bytes, int64_t begin, int64_t end, int64_t* bad) {
  const auto walk = [&](auto copier) {
    *bad = WalkAnyIndex(p, indices, begin, end, copier);
    return true;
  };
  switch (slice_bytes) {
    case 16:
      return walk(FixedSliceCopier<16, kStreaming>{src, dst});
    case 32:
      return walk(FixedSliceCopier<32, kStreaming>{src, dst});
    case 64:
      return walk(FixedSliceCopier<64, kStreaming>{src, dst});
    case 128:
      return walk(FixedSliceCopier<128, kStreaming>{src, dst});
    case 256:
      return walk(FixedSliceCopier<256, kStreaming>{src, dst});
    default:
      return false;
  }
}

template <typename Index>
int64_t CheckTuples(const GatherPlan& p, const Index* idx, int64_t begin, int64_t end) {
  const int64_t* dims = p.index_dims.data();
  for (int64_t t = begin; t < end; ++t) {
    const Index* tuple = idx + t * p.depth;
    int64_t row;
    const int64_t bad = ResolveTuple<Index, false>(tuple, dims, p.depth, p.rows, &row);
    if (bad >= 0) return t * p.depth + bad;
  }
  return -1;
}

}  // namespace

int64_t GatherRows(const GatherPlan& plan, const TensorView& params, const TensorView& indices,
                   const MutableTensorView& output, int64_t begin, int64_t end, bool streaming) {
  if (plan.dtype == DataType::kString) {
    StringCopier c{params.strings.data(), output.strings.data(), plan.slice};
    return WalkAnyIndex(plan, indices, begin, end, c);
  }
  const uint8_t* src = params.data.data();
  uint8_t* dst = output.data.data();
  const int64_t slice_bytes = plan.slice_bytes();
  // A slice of 1, 2, 4 or 8 bytes is one element's load and store, whatever its dtype and
  // element count ([rows, 2] float32 as much as [rows] float64): it costs one random line, as a
  // single element does, so it takes the single element's copier and prefetch, not memcpy's.
  switch (slice_bytes) {
    case 1: {
      ElementCopier<1> c{src, dst};
      return WalkAnyIndex(plan, indices, begin, end, c);
    }
    case 2: {
      ElementCopier<2> c{src, dst};
      return WalkAnyIndex(plan, indices, begin, end, c);
    }
    case 4: {
      ElementCopier<4> c{src, dst};
      return WalkAnyIndex(plan, indices, begin, end, c);
    }
    case 8: {
      ElementCopier<8> c{src, dst};
      return WalkAnyIndex(plan, indices, begin, end, c);
    }
    default:
      if (plan.slice == 1) {
        ElementCopier<16> c{src, dst};
        return WalkAnyIndex(plan, indices, begin, end, c);
      }
  }
  int64_t bad = -1;
#if defined(__SSE2__)
  if (streaming && slice_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    if (!WalkFixedSlice<true>(plan, indices, src, dst, slice_bytes, begin, end, &bad)) {
      StreamingSliceCopier c{src, dst, slice_bytes};
      bad = WalkAnyIndex(plan, indices, begin, end, c);
    }
    _mm_sfence();  // order the streaming stores before anyone reads the output
    return bad;
  }
#else
  (void)streaming;
#endif
  if (WalkFixedSlice<false>(plan, indices, src, dst, slice_bytes, begin, end, &bad)) return bad;
  SliceCopier c{src, dst, slice_bytes};
  return WalkAnyIndex(plan, indices, begin, end, c);
}

int64_t CheckIndexTuples(const GatherPlan& plan, const TensorView& indices, int64_t begin,
                         int64_t end) {
  return plan.index_dtype == DataType::kInt32
             ? CheckTuples(plan, reinterpret_cast<const int32_t*>(indices.data.data()), begin, end)
             : CheckTuples(plan, reinterpret_cast<const int64_t*>(indices.data.data()), begin, end);
}

int64_t StringRowBytes(const GatherPlan& plan, const TensorView& params, const TensorView& indices,
                       int64_t begin, int64_t end, int64_t* bytes) {
  StringSizer s{params.strings.data(), plan.slice};
  const int64_t bad = WalkAnyIndex(plan, indices, begin, end, s);
  *bytes = s.bytes;
  return bad;
}

}  // namespace tensorcompute::core
