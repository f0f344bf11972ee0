#include "server/admission/error_log.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tensorcompute::server {

void ErrorLog::Log(absl::string_view rpc, const absl::Status& status,
                   absl::string_view request_id) {
  int64_t suppressed = 0;
  {
    absl::MutexLock lock(&mu_);
    // A fixed one-second window, opened by the first error after the last one closed
    // (window_start_ starts at InfinitePast, so the very first error opens one).
    const absl::Time now = absl::Now();
    if (now - window_start_ >= absl::Seconds(1)) {
      window_start_ = now;
      in_window_ = 0;
    }
    // Over the rate an error costs only this count: no formatting, no I/O.
    if (in_window_ >= per_second_) {
      ++suppressed_;
      return;
    }
    ++in_window_;
    suppressed = suppressed_;
    suppressed_ = 0;
  }
  // Logged without the lock: spdlog has its own.
  const std::string code = absl::StatusCodeToString(status.code());
  const std::string id = request_id.empty() ? "" : absl::StrCat(request_id, " ");
  if (suppressed > 0) {
    spdlog::warn("{}rpc={} code={} message=\"{}\" (and {} more errors not logged)", id,
                 std::string(rpc), code, std::string(status.message()), suppressed);
  } else {
    spdlog::warn("{}rpc={} code={} message=\"{}\"", id, std::string(rpc), code,
                 std::string(status.message()));
  }
}

}  // namespace tensorcompute::server
