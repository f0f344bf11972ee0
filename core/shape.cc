#include "core/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorcompute::core {

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<int64_t> CheckedNumElements(absl::Span<const int64_t> dims) {
  int64_t nonzero = 1;
  bool has_zero = false;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      has_zero = true;
      continue;
    }
    auto next = CheckedMul(nonzero, d);
    if (!next) return std::nullopt;
    nonzero = *next;
  }
  return has_zero ? 0 : nonzero;
}

int64_t Product(absl::Span<const int64_t> dims, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= dims[i];
  return n;
}

std::string ShapeToString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

std::string FlatPositionToString(int64_t flat, absl::Span<const int64_t> dims) {
  if (dims.empty()) return "";
  absl::InlinedVector<int64_t, 8> pos(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t d = dims[i] > 0 ? dims[i] : 1;
    pos[i] = flat % d;
    flat /= d;
  }
  return ShapeToString(pos);
}

}  // namespace tensorcompute::core
