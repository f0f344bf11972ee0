// File: core/half_float.h
//
// float16 and bfloat16 <-> float conversions for the tensor file formats and the KServe JSON
// carry these types as numbers). Pure bit manipulation, round to nearest even; NaN stays NaN
// (made quiet), values beyond the range become infinity, subnormals are exact.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_HALF_FLOAT_H_
#define TENSORCOMPUTE_CORE_HALF_FLOAT_H_

#include <cstdint>

namespace tensorcompute::core {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// Rounds a double to float, to nearest even, without the undefined behaviour of converting an
// out-of-range value: magnitudes from halfway between FLT_MAX and 2^128 on become infinity.
float DoubleToFloat(double d);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_HALF_FLOAT_H_
