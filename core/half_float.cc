#include "core/half_float.h"

#include <bit>
#include <cmath>
#include <limits>

namespace tensorcompute::core {
namespace {

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
float BitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

float DoubleToFloat(double d) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::fabs(d) > kMax) {
    const float r = std::fabs(d) >= kMax + 0x1p103 ? std::numeric_limits<float>::infinity()
                                                   : std::numeric_limits<float>::max();
    return std::signbit(d) ? -r : r;
  }
  return static_cast<float>(d);
}

float HalfToFloat(uint16_t h) {
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

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00 | ((a >> 13) & 0x3FF);  // NaN: quiet, top payload
  // 65520 lies halfway between 65504 (the largest half) and 2^16; the tie goes to the even
  // neighbour, infinity.
  if (a >= 0x477FF000) return sign | 0x7C00;
  if (a >= 0x38800000) {  // normal half: round the 13 dropped bits to nearest even
    const uint32_t rounded = a + 0xFFF + ((a >> 13) & 1);
    return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
  }
  if (a <= 0x33000000) return sign;  // at most 2^-25, half the smallest subnormal: zero
  // Subnormal half: the value in units of 2^-24 is mant x 2^(e - 126), e in [102, 112].
  const uint32_t mant = (a & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - (a >> 23);
  const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  uint32_t h = mant >> shift;
  if (rem > halfway || (rem == halfway && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float BFloat16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  if ((x & 0x7FFFFFFF) > 0x7F800000) x |= 0x400000;  // NaN stays NaN, made quiet
  return BitsFloat(x);
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  // Round to nearest even; a carry out of the mantissa bumps the exponent, up to infinity.
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

}  // namespace tensorcompute::core
