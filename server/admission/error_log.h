// File: server/admission/error_log.h
//
// Logs each failed RPC once (its caller's request id, RPC, code, message) through spdlog, at most
// `per_second` lines a second, so a flood of bad requests cannot fill a disk; lines over the rate
// are counted and reported in the next line that gets through.
//
// Thread-safety: Log may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_ERROR_LOG_H_
#define TENSORCOMPUTE_SERVER_ERROR_LOG_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

class ErrorLog {
 public:
  explicit ErrorLog(int64_t per_second) : per_second_(per_second) {}

  // Logs `status` of an `rpc`, prefixed with the caller's `request_id` (CallRecord's
  // "trace_id=..." or "request_id=...") when it sent one.
  // REQUIRES: !status.ok().
  void Log(absl::string_view rpc, const absl::Status& status, absl::string_view request_id = {});

 private:
  const int64_t per_second_;
  mutable absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ERROR_LOG_H_
