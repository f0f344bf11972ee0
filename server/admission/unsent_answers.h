// File: server/admission/unsent_answers.h
//
// What the server does when an answer was not taken by its client within its send limit
// (send_deadline.h) and its call was given up: counts it in
// tensorcompute_answers_cancelled_unsent_total{front_end} and logs it, as a warning, the first
// time for each client address, so that a client holding many calls, or coming back, costs one
// line. Its lines have their own limit, kLinesPerSecond, apart from the error log's: an attack
// that fills the budget also fills the error log with the refusals of other clients' calls,
// which would drown them. The addresses already logged are kept up to kMaxPeers; past that
// the set starts again (each address may then be logged once more), so that many addresses
// cannot grow it without bound.
//
// Thread-safety: Count may be called from any thread (one mutex, held for a set lookup).

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_UNSENT_ANSWERS_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_UNSENT_ANSWERS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "server/admission/error_log.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

class UnsentAnswers {
 public:
  static constexpr int64_t kMaxPeers = 4096;
  static constexpr int64_t kLinesPerSecond = 20;

  // `metrics` is not owned and must outlive this.
  explicit UnsentAnswers(Metrics* metrics) : metrics_(*metrics), log_(kLinesPerSecond) {}

  // The answer of `rpc` (its name; "HTTP" for an HTTP answer of no endpoint) of `bytes` to `peer`
  // (gRPC's "ipv4:ADDRESS:PORT" or "ipv6:[ADDRESS]:PORT", or "ADDRESS:PORT") on `front_end` was not
  // taken within `limit` and was given up.
  void Count(FrontEndKind front_end, absl::string_view rpc, absl::string_view peer, int64_t bytes,
             absl::Duration limit);

 private:
  Metrics& metrics_;
  ErrorLog log_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> logged_ ABSL_GUARDED_BY(mu_);
};

// The client's address in `peer` (forms as in Count): without the "ipv4:"/"ipv6:" scheme and
// the port, so that a client's connections are one peer.
absl::string_view PeerAddress(absl::string_view peer);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_UNSENT_ANSWERS_H_
