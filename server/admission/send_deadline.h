// File: server/admission/send_deadline.h
//
// How long the sending of one answer may take, one rule for every front end: a fixed base plus
// the answer's bytes at a minimum rate, so that a large answer on a slow but honest link still
// arrives, while an answer its client never takes (an HTTP/2 window never opened, an HTTP
// socket never read) is given up in bounded time and its share of --max_inflight_bytes freed.
//
//   native gRPC and KServe gRPC  base --answer_send_timeout_s (10 s), from Finish to OnDone;
//                                then the call is cancelled (answer_send_timer.h)
//   KServe HTTP                  base --http_write_timeout_s (60 s), for the whole write of
//                                the response; then the connection is closed
//
// and the same rate for both, --answer_send_min_bytes_per_s (1 MiB/s: a 64 MiB answer, the
// largest by default, gets its base + 64 s). What an answer given up costs its client:
// docs/errors.md ("An answer not taken").
//
// Thread-safety: a value type; const methods may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_SEND_DEADLINE_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_SEND_DEADLINE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

struct SendLimit {
  // What any answer, however small, gets.
  absl::Duration base = absl::Seconds(10);
  // The slowest sending rate the server waits for, in bytes a second.
  int64_t min_bytes_per_s = int64_t{1} << 20;

  // base + bytes / min_bytes_per_s (bytes < 0 count as 0). Saturates to InfiniteDuration
  // instead of overflowing.
  absl::Duration For(int64_t bytes) const;

  // OK; INVALID_ARGUMENT naming `base_name` or `rate_name` (the flags) when base or the rate is
  // not positive.
  absl::Status Validate(const char* base_name, const char* rate_name) const;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_SEND_DEADLINE_H_
