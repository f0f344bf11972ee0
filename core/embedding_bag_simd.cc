#include "core/embedding_bag_simd.h"

#include <cstring>

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
// constant, and so is the prefetch loop).
template <typename Elem, Reduce kReduce, int kChunk, bool kOnePass>
TC_AVX2 int64_t ReduceChunks(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                             int64_t end, bool streaming) {
  using Acc = typename Elem::Acc;
  using L = Lanes<Acc>;
  using V = typename L::V;
  constexpr int64_t kVectorBytes = L::kCount * Elem::kSize;  // stored bytes of one register
  constexpr int64_t kChunkBytes = kChunk * kVectorBytes;
  const int64_t row_bytes = kOnePass ? kChunkBytes : plan.dim * Elem::kSize;
  const int64_t passes = kOnePass ? 1 : row_bytes / kChunkBytes;
  const int64_t distance = RowPrefetchDistance(row_bytes);
  const int64_t range_last = BagRange(plan, v, end - 1).last;
  for (int64_t b = begin; b < end; ++b) {
    const BagSpan span = BagRange(plan, v, b);
    BagStats<Acc> stats;
    for (int64_t pass = 0; pass < passes; ++pass) {
      const int64_t offset = pass * kChunkBytes;
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
        const uint8_t* src = v.params + row * row_bytes + offset;
        if constexpr (kReduce == Reduce::kWeighted) {
          const Acc w = plan.weights_dtype == DataType::kFloat32
                            ? static_cast<Acc>(NativeElem<float>::Load(v.weights + i * 4))
                            : Elem::Load(v.weights + i * Elem::kSize);
          if (pass == 0) AddWeight(stats, w);
          const V weight = V{} + w;
          for (int k = 0; k < kChunk; ++k) {
            acc[k] = L::Fma(weight, LoadLanes(Elem{}, src + k * kVectorBytes), acc[k]);
          }
        } else if constexpr (kReduce == Reduce::kMax) {
          for (int k = 0; k < kChunk; ++k) {
            const V x = LoadLanes(Elem{}, src + k * kVectorBytes);
            acc[k] = count == 0 ? x : MaxLanes<Acc>(acc[k], x);
          }
        } else {
          for (int k = 0; k < kChunk; ++k) {
            acc[k] = acc[k] + LoadLanes(Elem{}, src + k * kVectorBytes);
          }
        }
        ++count;
      }
      if (kReduce != Reduce::kWeighted && pass == 0) stats.count = count;
      // BagResult (embedding_bag_math.h) on every lane.
      if (stats.count == 0) {
        for (int k = 0; k < kChunk; ++k) acc[k] = V{};
      } else if (ModeDivides(plan.mode)) {
        const Acc divisor = BagDivisor(plan.mode, kReduce == Reduce::kWeighted, stats);
        for (int k = 0; k < kChunk; ++k) acc[k] = acc[k] / divisor;
      }
      for (int k = 0; k < kChunk; ++k) acc[k] = CanonicalLanes(acc[k]);
      StoreChunk<Elem, kChunk>(acc, v.output + b * row_bytes + offset, streaming);
    }
  }
  return -1;
}

// The widest pass (8, 4, 2 or 1 registers) that divides the row.
template <typename Elem, Reduce kReduce>
TC_AVX2 int64_t ForChunk(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end, bool streaming) {
  const int64_t registers = plan.dim / Lanes<typename Elem::Acc>::kCount;
  switch (registers) {
    case 1:
      return ReduceChunks<Elem, kReduce, 1, true>(plan, v, begin, end, streaming);
    case 2:
      return ReduceChunks<Elem, kReduce, 2, true>(plan, v, begin, end, streaming);
    case 4:
      return ReduceChunks<Elem, kReduce, 4, true>(plan, v, begin, end, streaming);
    case 8:
      return ReduceChunks<Elem, kReduce, 8, true>(plan, v, begin, end, streaming);
  }
  if (registers % 8 == 0) {
    return ReduceChunks<Elem, kReduce, 8, false>(plan, v, begin, end, streaming);
  }
  if (registers % 4 == 0) {
    return ReduceChunks<Elem, kReduce, 4, false>(plan, v, begin, end, streaming);
  }
  if (registers % 2 == 0) {
    return ReduceChunks<Elem, kReduce, 2, false>(plan, v, begin, end, streaming);
  }
  return ReduceChunks<Elem, kReduce, 1, false>(plan, v, begin, end, streaming);
}

template <typename Elem>
TC_AVX2 int64_t ForReduce(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                          int64_t end, bool streaming) {
  switch (ReduceOf(plan)) {
    case Reduce::kWeighted:
      return ForChunk<Elem, Reduce::kWeighted>(plan, v, begin, end, streaming);
    case Reduce::kMax:
      return ForChunk<Elem, Reduce::kMax>(plan, v, begin, end, streaming);
    case Reduce::kPlain:
      break;
  }
  return ForChunk<Elem, Reduce::kPlain>(plan, v, begin, end, streaming);
}

TC_AVX2 int64_t ForDtype(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end, bool streaming) {
  switch (plan.dtype) {
    case DataType::kFloat16:
      return ForReduce<Float16Elem>(plan, v, begin, end, streaming);
    case DataType::kBfloat16:
      return ForReduce<BFloat16Elem>(plan, v, begin, end, streaming);
    case DataType::kFloat32:
      return ForReduce<NativeElem<float>>(plan, v, begin, end, streaming);
    default:
      return ForReduce<NativeElem<double>>(plan, v, begin, end, streaming);
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
  if (plan.encoding != TableEncoding::kNone || plan.unpooled) return false;
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
