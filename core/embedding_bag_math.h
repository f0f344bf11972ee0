// File: core/embedding_bag_math.h
//
// The per-element arithmetic of EmbeddingBag (core/embedding_bag.h) as small inline functions
// that compile for the host and, under nvcc, for the device (TC_HOST_DEVICE, core/host_device.h),
// so that a CUDA kernel accumulates exactly as the CPU does and the two agree byte for byte.
//
// One output element of a bag is computed as
//   acc = 0; for each row x of the bag, in index order, skipping padding rows:
//     SUM/MEAN/SQRTN: acc = fma(w, x, acc) with weights (one rounding), acc += x without;
//     MAX:            acc = x for the bag's first row, then acc = x when x > acc (torch's CPU
//                     rule: a NaN is kept only when it is the first row; among equal values,
//                     -0 and +0 included, the first one wins);
//   then BagResult() divides (MEAN, SQRTN), CanonicalNan() replaces a NaN by the one NaN
//   every device writes, and the caller rounds once to the output dtype.
// `Acc` is float (float16, bfloat16 and float32 params) or double (float64 params).
// The element types (Float16Elem, BFloat16Elem, NativeElem<T>) load a stored element as its
// Acc and round an Acc to the stored type once (core/half_float.h), and BagBounds says which
// index positions a bag holds: the CPU (core/embedding_bag.cc) and the CUDA kernel
// (core/cuda/bag_unit.h) both use them.
// Pure functions; thread-safe.

#ifndef TENSORCOMPUTE_CORE_EMBEDDING_BAG_MATH_H_
#define TENSORCOMPUTE_CORE_EMBEDDING_BAG_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half_float.h"
#include "core/host_device.h"

namespace tensorcompute::core {

// How a bag's rows are reduced. The numbers are part of the API (the wire will use them).
enum class EmbeddingBagMode : int32_t { kSum = 0, kMean = 1, kMax = 2, kSqrtn = 3 };

// What a bag contributed besides its rows: how many rows (padding rows excluded), and the sum
// of the weights and of their squares (only kept when weighted).
template <typename Acc>
struct BagStats {
  int64_t count = 0;
  Acc sum_w = 0;
  Acc sum_w2 = 0;
};

// Adds one weight to the bag's statistics (sum_w += w; sum_w2 = fma(w, w, sum_w2)).
template <typename Acc>
TC_HOST_DEVICE inline void AddWeight(BagStats<Acc>& stats, Acc w) {
  ++stats.count;
  stats.sum_w += w;
  stats.sum_w2 = std::fma(w, w, stats.sum_w2);
}

// One weighted term with a single rounding.
template <typename Acc>
TC_HOST_DEVICE inline Acc AccumulateWeighted(Acc acc, Acc w, Acc x) {
  return std::fma(w, x, acc);
}

// One unweighted term.
template <typename Acc>
TC_HOST_DEVICE inline Acc AccumulateUnweighted(Acc acc, Acc x) {
  return acc + x;
}

// MAX's update: the first row of the bag sets the value; later rows replace it only when
// strictly greater (so NaN later in a bag is ignored, and the first of equal values stays).
template <typename Acc>
TC_HOST_DEVICE inline Acc AccumulateMax(Acc acc, Acc x, bool first) {
  return (first || x > acc) ? x : acc;
}

// The bag's value from its accumulator: 0 for a bag with no (non-padding) rows in every mode;
// SUM and MAX: acc; MEAN: acc / sum_w (weighted) or acc / count; SQRTN: acc / sqrt(sum_w2)
// (weighted) or acc / sqrt(count). A weighted MEAN whose weights add up to 0 divides by 0
// (IEEE: inf or NaN), as TensorFlow's combiner does.
// Whether `mode` divides the accumulator (MEAN, SQRTN) and, if so, by what (BagDivisor, once
// per bag; every element of the bag is divided by the same value).
TC_HOST_DEVICE inline bool ModeDivides(EmbeddingBagMode mode) {
  return mode == EmbeddingBagMode::kMean || mode == EmbeddingBagMode::kSqrtn;
}

template <typename Acc>
TC_HOST_DEVICE inline Acc BagDivisor(EmbeddingBagMode mode, bool weighted,
                                     const BagStats<Acc>& stats) {
  if (mode == EmbeddingBagMode::kMean) {
    return weighted ? stats.sum_w : static_cast<Acc>(stats.count);
  }
  return std::sqrt(weighted ? stats.sum_w2 : static_cast<Acc>(stats.count));
}

template <typename Acc>
TC_HOST_DEVICE inline Acc BagResult(EmbeddingBagMode mode, bool weighted, Acc acc,
                                    const BagStats<Acc>& stats) {
  if (stats.count == 0) return Acc(0);
  return ModeDivides(mode) ? acc / BagDivisor(mode, weighted, stats) : acc;
}

// A NaN result, whatever its sign and payload, becomes the positive quiet NaN (float
// 0x7fc00000, double 0x7ff8000000000000; their float16 and bfloat16 roundings are 0x7e00 and
// 0x7fc0). Which NaN an operation makes is the hardware's choice (x86 keeps an operand's payload
// and makes -NaN of inf - inf, CUDA makes 0x7fffffff, and a compiler may swap the operands of
// a + b), so without this CPU and GPU would agree on every value but not on NaN's bytes.
// The test is made on the bits (exponent all ones, mantissa not zero), not as v != v: GCC does
// not vectorize a floating-point comparison that may trap, and a row's store loop written that
// way ran scalar (bags of 1 row: 0.6x).
template <typename Acc>
struct FloatBits;
template <>
struct FloatBits<float> {
  using Bits = int32_t;  // signed: |v|'s bits are >= 0, and SSE2 compares signed lanes only
  static constexpr Bits kAbs = 0x7fffffff, kInf = 0x7f800000, kQuietNan = 0x7fc00000;
};
template <>
struct FloatBits<double> {
  using Bits = int64_t;
  static constexpr Bits kAbs = 0x7fffffffffffffff, kInf = 0x7ff0000000000000,
                        kQuietNan = 0x7ff8000000000000;
};

template <typename Acc>
TC_HOST_DEVICE inline Acc CanonicalNan(Acc v) {
  using F = FloatBits<Acc>;
  typename F::Bits bits;
  std::memcpy(&bits, &v, sizeof(Acc));
  bits = (bits & F::kAbs) > F::kInf ? F::kQuietNan : bits;
  std::memcpy(&v, &bits, sizeof(Acc));
  return v;
}

// Whether normalised row `row` is the padding row (`padding_row` < 0: none).
TC_HOST_DEVICE inline bool IsPaddingRow(int64_t row, int64_t padding_row) {
  return row == padding_row;
}

// Element access per params dtype: Acc is the accumulation type, kSize the stored size; Load
// reads a stored element at any address (memcpy) and Store rounds once to the stored type.
struct Float16Elem {
  using Acc = float;
  static constexpr int kSize = 2;
  TC_HOST_DEVICE static float Load(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return HalfToFloat(h);
  }
  TC_HOST_DEVICE static void Store(uint8_t* p, float v) {
    const uint16_t h = FloatToHalf(v);
    std::memcpy(p, &h, 2);
  }
};
struct BFloat16Elem {
  using Acc = float;
  static constexpr int kSize = 2;
  TC_HOST_DEVICE static float Load(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return BFloat16ToFloat(h);
  }
  TC_HOST_DEVICE static void Store(uint8_t* p, float v) {
    const uint16_t h = FloatToBFloat16(v);
    std::memcpy(p, &h, 2);
  }
};
template <typename T>  // float or double
struct NativeElem {
  using Acc = T;
  static constexpr int kSize = sizeof(T);
  TC_HOST_DEVICE static T Load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  TC_HOST_DEVICE static void Store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof(T)); }
};

// Bag b's index positions [first, last).
struct BagSpan {
  int64_t first;
  int64_t last;
};

// Fixed bags (`fixed`): [b * bag_size, (b + 1) * bag_size). With offsets (`num_offsets`
// entries, offset(i) reading entry i): [offset(b), offset(b + 1)], the bag without a next
// entry running to num_indices (include_last_offset or not, the same bounds).
// REQUIRES: b < bags of a validated plan (core/embedding_bag.h).
template <typename OffsetAt>
TC_HOST_DEVICE inline BagSpan BagBounds(int64_t b, bool fixed, int64_t bag_size,
                                        int64_t num_offsets, int64_t num_indices,
                                        const OffsetAt& offset) {
  if (fixed) return BagSpan{b * bag_size, (b + 1) * bag_size};
  return BagSpan{offset(b), b + 1 < num_offsets ? offset(b + 1) : num_indices};
}

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_EMBEDDING_BAG_MATH_H_
