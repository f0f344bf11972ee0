// File: core/half_float.h
//
// float16 and bfloat16 <-> float conversions: for the tensor file formats and the KServe JSON
// (which carry these types as numbers), and for EmbeddingBag's arithmetic on the CPU and in
// the CUDA kernel (core/embedding_bag_math.h). Pure bit manipulation, round to nearest even;
// NaN stays NaN (made quiet), values beyond the range become infinity, subnormals are exact.
// The four conversions are TC_HOST_DEVICE (core/host_device.h): the host and the device run
// this very code, so both give the same bits for every input.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_HALF_FLOAT_H_
#define TENSORCOMPUTE_CORE_HALF_FLOAT_H_

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace tensorcompute::core {

TC_HOST_DEVICE inline float HalfToFloat(uint16_t h);
TC_HOST_DEVICE inline uint16_t FloatToHalf(float f);
TC_HOST_DEVICE inline float BFloat16ToFloat(uint16_t b);
TC_HOST_DEVICE inline uint16_t FloatToBFloat16(float f);

// Rounds a double to float, to nearest even, without the undefined behaviour of converting an
// out-of-range value: magnitudes from halfway between FLT_MAX and 2^128 on become infinity.
// (Host only.)
float DoubleToFloat(double d);

// --- implementation details below ---

namespace half_float_internal {

// std::bit_cast without C++20 (nvcc compiles C++17); memcpy is the portable bit copy on the
// host and the device alike.
TC_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
TC_HOST_DEVICE inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace half_float_internal

TC_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
  using half_float_internal::BitsFloat;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) {  // inf, or NaN with its payload, made quiet
    return BitsFloat(sign | 0x7F800000 | (mant << 13) | (mant != 0 ? 0x400000 : 0));
  }
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // Subnormal: mant x 2^-24. Normalise so that the implicit bit (0x400) is set.
    int e = -14;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --e;
    }
    return BitsFloat(sign | static_cast<uint32_t>(e + 127) << 23 | (mant & 0x3FF) << 13);
  }
  return BitsFloat(sign | (exp + 127 - 15) << 23 | mant << 13);
}

TC_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  const uint32_t x = half_float_internal::FloatBits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) {  // NaN: quiet, top payload
    return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));
  }
  // 65520 lies halfway between 65504 (the largest half) and 2^16; the tie goes to the even
  // neighbour, infinity.
  if (a >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);
  if (a >= 0x38800000) {  // normal half: round the 13 dropped bits to nearest even
    const uint32_t rounded = a + 0xFFF + ((a >> 13) & 1);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13));
  }
  if (a <= 0x33000000) return sign;  // at most 2^-25, half the smallest subnormal: zero
  // Subnormal half: the value in units of 2^-24 is mant x 2^(e - 126), e in [102, 112].
  const uint32_t mant = (a & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - (a >> 23);
  const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  uint32_t h = mant >> shift;
  if (rem > halfway || (rem == halfway && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(h));
}

TC_HOST_DEVICE inline float BFloat16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  if ((x & 0x7FFFFFFF) > 0x7F800000) x |= 0x400000;  // NaN stays NaN, made quiet
  return half_float_internal::BitsFloat(x);
}

TC_HOST_DEVICE inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = half_float_internal::FloatBits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  // Round to nearest even; a carry out of the mantissa bumps the exponent, up to infinity.
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_HALF_FLOAT_H_
