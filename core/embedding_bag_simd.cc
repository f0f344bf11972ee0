#include "core/embedding_bag_simd.h"

#include <cstring>

#include "core/compact_row.h"
#include "core/index_math.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

namespace tensorcompute::core {
namespace {

// Everything that touches a 32-byte vector is compiled for AVX2 + FMA + F16C and reached only
// after BagVectorKernelServes checked the CPU, so the rest of the binary stays baseline x86-64.
#define TC_AVX2 __attribute__((target("avx2,fma,f16c")))

typedef float F8 __attribute__((vector_size(32)));
typedef double D4 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef int64_t L4 __attribute__((vector_size(32)));

// One register of accumulator lanes (V), the integer lanes of the same width (Bits), and the
// fused multiply-add of one weighted term (one rounding, as std::fma).
template <typename Acc>
struct Lanes;
template <>
struct Lanes<float> {
  using V = F8;
  using Bits = I8;
  static constexpr int64_t kCount = 8;
  TC_AVX2 static V Fma(V w, V x, V acc) {
    return (V)_mm256_fmadd_ps((__m256)w, (__m256)x, (__m256)acc);
  }
};
template <>
struct Lanes<double> {
  using V = D4;
  using Bits = L4;
  static constexpr int64_t kCount = 4;
  TC_AVX2 static V Fma(V w, V x, V acc) {
    return (V)_mm256_fmadd_pd((__m256d)w, (__m256d)x, (__m256d)acc);
  }
};

// A register's worth of stored elements, widened to the accumulator type exactly: float16 by
// F16C, bfloat16 as the top half of a float. (A signalling NaN may come out quiet or not:
// every NaN result is written as CanonicalNan, and comparisons do not tell them apart.)
TC_AVX2 inline F8 LoadLanes(NativeElem<float>, const uint8_t* p) {
  F8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
TC_AVX2 inline D4 LoadLanes(NativeElem<double>, const uint8_t* p) {
  D4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
TC_AVX2 inline F8 LoadLanes(Float16Elem, const uint8_t* p) {
  return (F8)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TC_AVX2 inline F8 LoadLanes(BFloat16Elem, const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return (F8)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
}

// Where a register's lanes come from: a stored row read `Lanes(byte offset)` at a time.
// PlainSource<Elem>: elements of Elem, LoadLanes. Rowwise8Source: 8 codes of an 8-bit row-wise
// row (core/compact_row.h), widened exactly to float and dequantized as DequantizeRowwise8 does,
// a product and a sum each rounded (two instructions, never a fused one).
template <typename Elem>
struct PlainSource {
  using Acc = typename Elem::Acc;
  using V = typename Lanes<Acc>::V;
  static constexpr int64_t kVectorBytes = Lanes<Acc>::kCount * Elem::kSize;
  static constexpr int64_t kTrailer = 0;  // bytes after a row's elements
  struct Row {
    const uint8_t* base;
    TC_AVX2 Row(const uint8_t* row, int64_t /*dim*/) : base(row) {}
    TC_AVX2 V Lanes(int64_t offset) const { return LoadLanes(Elem{}, base + offset); }
  };
};

struct Rowwise8Source {
  using Acc = float;
  using V = F8;
  static constexpr int64_t kVectorBytes = 8;
  static constexpr int64_t kTrailer = kRowwise8Trailer;
  struct Row {
    const uint8_t* base;
    __m256 scale, bias;
    TC_AVX2 Row(const uint8_t* row, int64_t dim) : base(row) {
      float s, b;
      std::memcpy(&s, row + dim, 4);
      std::memcpy(&b, row + dim + 4, 4);
      scale = _mm256_set1_ps(s);
      bias = _mm256_set1_ps(b);
    }
    TC_AVX2 V Lanes(int64_t offset) const {
      const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(base + offset));
      const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
      return (V)_mm256_add_ps(_mm256_mul_ps(x, scale), bias);
    }
  };
};

// AccumulateMax per lane: x replaces acc only where x > acc.
template <typename Acc>
TC_AVX2 inline typename Lanes<Acc>::V MaxLanes(typename Lanes<Acc>::V acc,
                                               typename Lanes<Acc>::V x) {
  using Bits = typename Lanes<Acc>::Bits;
  const Bits greater = x > acc;
  return (typename Lanes<Acc>::V)(((Bits)x & greater) | ((Bits)acc & ~greater));
}

// CanonicalNan per lane: an unordered self-comparison finds the NaN lanes, a blend replaces
// them (two instructions where the bit test takes five).
TC_AVX2 inline F8 CanonicalLanes(F8 v) {
  const __m256 x = (__m256)v;
  return (F8)_mm256_blendv_ps(x,
                              _mm256_castsi256_ps(_mm256_set1_epi32(FloatBits<float>::kQuietNan)),
                              _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
TC_AVX2 inline D4 CanonicalLanes(D4 v) {
  const __m256d x = (__m256d)v;
  return (D4)_mm256_blendv_pd(x,
                              _mm256_castsi256_pd(_mm256_set1_epi64x(FloatBits<double>::kQuietNan)),
                              _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
}

// Rounds kChunk registers of results to the stored type (once per element) and writes them at
// dst, with non-temporal stores when `streaming` (dst is then 32-byte aligned).
template <typename Elem, int kChunk>
TC_AVX2 inline void StoreChunk(const typename Lanes<typename Elem::Acc>::V* acc, uint8_t* dst,
                               bool streaming) {
  using Acc = typename Elem::Acc;
  constexpr int64_t kLanes = kChunk * Lanes<Acc>::kCount;
  constexpr int64_t kBytes = kLanes * Elem::kSize;  // a multiple of 16
  if constexpr (Elem::kSize == sizeof(Acc)) {       // register by register, so none is spilled
    for (int k = 0; k < kChunk; ++k) {
      __m256i* const to = reinterpret_cast<__m256i*>(dst) + k;
      if (streaming) {
        _mm256_stream_si256(to, (__m256i)acc[k]);
      } else {
        _mm256_storeu_si256(to, (__m256i)acc[k]);
      }
    }
    return;
  }
  alignas(32) uint8_t bytes[kBytes];
  Acc lanes[kLanes];
  std::memcpy(lanes, acc, sizeof(lanes));
  for (int64_t j = 0; j < kLanes; ++j) Elem::Store(bytes + j * Elem::kSize, lanes[j]);
  if (streaming) {
    for (int64_t off = 0; off < kBytes; off += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + off),
                       _mm_load_si128(reinterpret_cast<const __m128i*>(bytes + off)));
    }
  } else {
    std::memcpy(dst, bytes, kBytes);
  }
}

// Reduces bags [begin, end) in passes of kChunk registers per row. The first pass prefetches
// whole rows ahead, checks every index and gathers the bag's statistics; later passes read the
// rest of the same rows, now cached. kOnePass: the row is one pass wide (its size is then a
// constant, and so is the prefetch loop). Rows are read through `Src` and the results stored
// as `Out` (which also types weights "like params"). An unpooled plan (a gather) stores each
// one-row bag's lanes as read.
template <typename Src, typename Out, Reduce kReduce, int kChunk, bool kOnePass>
TC_AVX2 int64_t ReduceChunks(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                             int64_t end, bool streaming) {
  using Acc = typename Src::Acc;
  using L = Lanes<Acc>;
  using V = typename L::V;
  constexpr int64_t kVectorBytes = Src::kVectorBytes;  // stored bytes of one register
  constexpr int64_t kChunkBytes = kChunk * kVectorBytes;
  constexpr int64_t kOutChunkBytes = kChunk * L::kCount * Out::kSize;
  const int64_t row_bytes =
      kOnePass ? kChunkBytes + Src::kTrailer : plan.dim / L::kCount * kVectorBytes + Src::kTrailer;
  const int64_t out_row_bytes = plan.dim * Out::kSize;
  const int64_t passes = kOnePass ? 1 : plan.dim / (kChunk * L::kCount);
  const bool unpooled = plan.unpooled;
  const int64_t distance = RowPrefetchDistance(row_bytes);
  const int64_t range_last = BagRange(plan, v, end - 1).last;
  for (int64_t b = begin; b < end; ++b) {
    const BagSpan span = BagRange(plan, v, b);
    BagStats<Acc> stats;
    for (int64_t pass = 0; pass < passes; ++pass) {
      const int64_t offset = pass * kChunkBytes;
      const int64_t out_offset = pass * kOutChunkBytes;
      V acc[kChunk];
      for (int k = 0; k < kChunk; ++k) acc[k] = V{};
      int64_t count = 0;  // rows reduced in this pass
      for (int64_t i = span.first; i < span.last; ++i) {
        if (pass == 0 && i + distance < range_last) {
          int64_t ahead;  // a bad value is reported when its turn comes
          if (NormalizeIndex(LoadIndex(v.indices, plan.index_dtype, i + distance), plan.rows,
                             &ahead)) {
            PrefetchRow(v.params + ahead * row_bytes, row_bytes);
          }
        }
        int64_t row;
        if (!NormalizeIndex(LoadIndex(v.indices, plan.index_dtype, i), plan.rows, &row)) {
          return i;
        }
        if (IsPaddingRow(row, plan.padding_row)) continue;
        const typename Src::Row src(v.params + row * row_bytes, plan.dim);
        if constexpr (kReduce == Reduce::kWeighted) {
          const Acc w = plan.weights_dtype == DataType::kFloat32
                            ? static_cast<Acc>(NativeElem<float>::Load(v.weights + i * 4))
                            : Out::Load(v.weights + i * Out::kSize);
          if (pass == 0) AddWeight(stats, w);
          const V weight = V{} + w;
          for (int k = 0; k < kChunk; ++k) {
            acc[k] = L::Fma(weight, src.Lanes(offset + k * kVectorBytes), acc[k]);
          }
        } else if constexpr (kReduce == Reduce::kMax) {
          for (int k = 0; k < kChunk; ++k) {
            const V x = src.Lanes(offset + k * kVectorBytes);
            acc[k] = count == 0 ? x : MaxLanes<Acc>(acc[k], x);
          }
        } else if (unpooled) {  // the bag's one row, as read
          for (int k = 0; k < kChunk; ++k) acc[k] = src.Lanes(offset + k * kVectorBytes);
        } else {
          for (int k = 0; k < kChunk; ++k) {
            acc[k] = acc[k] + src.Lanes(offset + k * kVectorBytes);
          }
        }
        ++count;
      }
      if (kReduce != Reduce::kWeighted && pass == 0) stats.count = count;
      // BagResult (embedding_bag_math.h) on every lane; an unpooled row stays as read.
      if (!unpooled) {
        if (stats.count == 0) {
          for (int k = 0; k < kChunk; ++k) acc[k] = V{};
        } else if (ModeDivides(plan.mode)) {
          const Acc divisor = BagDivisor(plan.mode, kReduce == Reduce::kWeighted, stats);
          for (int k = 0; k < kChunk; ++k) acc[k] = acc[k] / divisor;
        }
        for (int k = 0; k < kChunk; ++k) acc[k] = CanonicalLanes(acc[k]);
      }
      StoreChunk<Out, kChunk>(acc, v.output + b * out_row_bytes + out_offset, streaming);
    }
  }
  return -1;
}

// The widest pass (8, 4, 2 or 1 registers) that divides the row.
template <typename Src, typename Out, Reduce kReduce>
TC_AVX2 int64_t ForChunk(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end, bool streaming) {
  const int64_t registers = plan.dim / Lanes<typename Src::Acc>::kCount;
  switch (registers) {
    case 1:
      return ReduceChunks<Src, Out, kReduce, 1, true>(plan, v, begin, end, streaming);
    case 2:
      return ReduceChunks<Src, Out, kReduce, 2, true>(plan, v, begin, end, streaming);
    case 4:
      return ReduceChunks<Src, Out, kReduce, 4, true>(plan, v, begin, end, streaming);
    case 8:
      return ReduceChunks<Src, Out, kReduce, 8, true>(plan, v, begin, end, streaming);
  }
  if (registers % 8 == 0) {
    return ReduceChunks<Src, Out, kReduce, 8, false>(plan, v, begin, end, streaming);
  }
  if (registers % 4 == 0) {
    return ReduceChunks<Src, Out, kReduce, 4, false>(plan, v, begin, end, streaming);
  }
  if (registers % 2 == 0) {
    return ReduceChunks<Src, Out, kReduce, 2, false>(plan, v, begin, end, streaming);
  }
  return ReduceChunks<Src, Out, kReduce, 1, false>(plan, v, begin, end, streaming);
}

template <typename Src, typename Out>
TC_AVX2 int64_t ForReduce(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                          int64_t end, bool streaming) {
  switch (ReduceOf(plan)) {
    case Reduce::kWeighted:
      return ForChunk<Src, Out, Reduce::kWeighted>(plan, v, begin, end, streaming);
    case Reduce::kMax:
      return ForChunk<Src, Out, Reduce::kMax>(plan, v, begin, end, streaming);
    case Reduce::kPlain:
      break;
  }
  return ForChunk<Src, Out, Reduce::kPlain>(plan, v, begin, end, streaming);
}

template <typename Elem>
TC_AVX2 int64_t ForPlain(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end, bool streaming) {
  return ForReduce<PlainSource<Elem>, Elem>(plan, v, begin, end, streaming);
}

TC_AVX2 int64_t ForDtype(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end, bool streaming) {
  switch (plan.encoding) {
    case TableEncoding::kFloat16:
      return ForReduce<PlainSource<Float16Elem>, NativeElem<float>>(plan, v, begin, end, streaming);
    case TableEncoding::kRowwise8:
      return ForReduce<Rowwise8Source, NativeElem<float>>(plan, v, begin, end, streaming);
    case TableEncoding::kNone:
      break;
  }
  switch (plan.dtype) {
    case DataType::kFloat16:
      return ForPlain<Float16Elem>(plan, v, begin, end, streaming);
    case DataType::kBfloat16:
      return ForPlain<BFloat16Elem>(plan, v, begin, end, streaming);
    case DataType::kFloat32:
      return ForPlain<NativeElem<float>>(plan, v, begin, end, streaming);
    default:
      return ForPlain<NativeElem<double>>(plan, v, begin, end, streaming);
  }
}

bool CpuHasVectorKernel() {
  static const bool has = [] {
    __builtin_cpu_init();  // avx2 also means the OS saves the registers (XCR0)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // clang 14 knows no "f16c" for the builtin
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return has;
}

}  // namespace

bool BagVectorKernelServes(const EmbeddingBagPlan& plan) {
  const int64_t acc_size = plan.dtype == DataType::kFloat64 ? 8 : 4;
  const int64_t lanes = 32 / acc_size;
  return plan.dim > 0 && plan.dim % lanes == 0 &&
         plan.dim * acc_size <= kMaxVectorAccumulatorBytes && CpuHasVectorKernel();
}

int64_t ReduceBagsVector(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin,
                         int64_t end, bool streaming) {
  streaming = streaming && reinterpret_cast<uintptr_t>(views.output) % 32 == 0;
  const int64_t bad = ForDtype(plan, views, begin, end, streaming);
  if (streaming) _mm_sfence();  // order the streaming stores before anyone reads the output
  return bad;
}

}  // namespace tensorcompute::core

#else  // not x86-64: the generic kernel only

namespace tensorcompute::core {

bool BagVectorKernelServes(const EmbeddingBagPlan&) { return false; }

int64_t ReduceBagsVector(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin,
                         int64_t end, bool) {
  return ReduceBags(plan, views, begin, end, false, BagKernel::kGeneric);
}

}  // namespace tensorcompute::core

#endif
