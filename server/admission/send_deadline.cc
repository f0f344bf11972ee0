#include "server/admission/send_deadline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tensorcompute::server {

absl::Duration SendLimit::For(int64_t bytes) const {
  // Whole seconds and the remainder apart, in integers: exact, and no int64 overflow for any
  // byte count (a Duration saturates on its own when added to).
  const int64_t n = std::max<int64_t>(bytes, 0);
  const int64_t rate = std::max<int64_t>(min_bytes_per_s, 1);
  return base + absl::Seconds(n / rate) + absl::Nanoseconds((n % rate) * 1'000'000'000.0 / rate);
}

absl::Status SendLimit::Validate(const char* base_name, const char* rate_name) const {
  if (base <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(base_name, " must be positive"));
  }
  if (min_bytes_per_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(rate_name, " must be positive"));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
