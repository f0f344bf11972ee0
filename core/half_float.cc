#include "core/half_float.h"

#include <cmath>
#include <limits>

namespace tensorcompute::core {

float DoubleToFloat(double d) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::fabs(d) > kMax) {
    const float r = std::fabs(d) >= kMax + 0x1p103 ? std::numeric_limits<float>::infinity()
                                                   : std::numeric_limits<float>::max();
    return std::signbit(d) ? -r : r;
  }
  return static_cast<float>(d);
}

}  // namespace tensorcompute::core
