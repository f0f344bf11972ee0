// File: client/load_tester.h
//
// The load tester behind `tensorcompute load`: drives Gather, GatherNd or EmbeddingBag calls at
// one or more servers and reports throughput, latency percentiles and answers by status code.
// The requests it sends are built once, up front, by BuildLoadRequests (client/load_requests.h).
//
//   RunLoad(channels, ...)   closed loop (`concurrency` calls always outstanding) or open loop
//                            (`rate` calls per second on a fixed schedule, latency measured
//                            from each call's scheduled time so a slow server cannot hide
//                            queueing: no coordinated omission), after a warmup, for a
//                            duration or a number of requests, round-robin over the channels.
//                            Responses are counted and sized, not parsed.
//
// Every measured call is counted exactly once: sent = the sum of by_code (every started call
// is answered, by the server or by its deadline); in open loop, calls the schedule wanted
// but `max_outstanding` refused are not_sent, apart from sent. A retried call is counted once,
// by its last answer, with its latency from the first attempt; `retries` counts the extra
// attempts.
// Thread-safety: RunLoad may run concurrently with other RunLoad calls; the progress callback
// runs on one reporter thread.

#ifndef TENSORCOMPUTE_CLIENT_LOAD_TESTER_H_
#define TENSORCOMPUTE_CLIENT_LOAD_TESTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

#include "client/load_requests.h"
#include "client/update_writer.h"

namespace tensorcompute::client {

struct LoadProgress {
  absl::Duration elapsed;  // since measuring began (negative during warmup)
  bool warming_up = false;
  int64_t done = 0;    // measured calls answered so far
  int64_t errors = 0;  // of which not OK
  double qps = 0;      // over the last progress interval
};

struct LoadOptions {
  int concurrency = 1;  // closed loop: calls outstanding at all times
  double rate = 0;      // > 0: open loop at this many calls per second (concurrency ignored)
  int64_t max_outstanding = 10000;  // open loop: calls in flight at most; more are not_sent
  absl::Duration duration = absl::Seconds(10);  // measured time, when requests == 0
  int64_t requests = 0;                         // > 0: measure exactly this many calls
  absl::Duration warmup = absl::Seconds(1);     // unmeasured time first
  absl::Duration timeout = absl::Seconds(10);   // deadline of each call, retries included
  // Attempts per call, the first included: an UNAVAILABLE answer is retried at once on the
  // next channel (another replica when there are several) while attempts and the deadline
  // last. 1 (default): no retries.
  int max_attempts = 1;
  // Sent on every call as "authorization: Bearer <auth_token>"; empty: none. (TLS comes with
  // the channels, e.g. a Client's.)
  std::string auth_token;
  absl::Duration progress_interval = absl::Seconds(1);
  std::function<void(const LoadProgress&)> on_progress;  // optional
};

struct LoadReport {
  int64_t sent = 0;                        // measured calls started
  int64_t not_sent = 0;                    // open loop: refused by max_outstanding
  std::map<std::string, int64_t> by_code;  // "OK", "UNAVAILABLE", ... -> count
  int64_t errors = 0;                      // answered, not OK
  int64_t retries = 0;                     // attempts beyond the first (max_attempts > 1)
  // Answers inconsistent with the request: OK for one with a bad index, INVALID_ARGUMENT for
  // a valid one (overload or deadline errors are not unexpected).
  int64_t unexpected = 0;
  double seconds = 0;            // measured wall time
  double qps = 0;                // answered calls per second
  double sent_mb_per_s = 0;      // request bytes (serialized) per second, 1 MB = 1e6 B
  double received_mb_per_s = 0;  // response bytes per second
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  // Latency of answered calls in microseconds (all codes).
  double latency_us_min = 0, latency_us_p50 = 0, latency_us_p90 = 0, latency_us_p99 = 0,
         latency_us_p999 = 0, latency_us_max = 0, latency_us_mean = 0;
  // The run's settings, echoed in the reports.
  std::string mode;  // "closed (concurrency 16)" / "open (1000 QPS)"
  int targets = 0;   // RunLoad sets it to `channels`; the CLI to the number of targets
  int channels = 0;
  // The writer's report when updates streamed beside the lookups (`load --update-rate`,
  // client/update_writer.h); RunLoad leaves it unset, the CLI sets it.
  std::optional<UpdateLoadReport> updates;

  std::string ToText() const;  // a few aligned lines for people (an "updates" line with them)
  // One JSON object with every field above; `updates`, when set, is an object of its fields.
  std::string ToJson() const;
};

// Runs the load and returns the report, or INVALID_ARGUMENT for bad options / no channels.
absl::StatusOr<LoadReport> RunLoad(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                   const LoadRequests& requests, const LoadOptions& options);

// The same over HTTP/1.1 (requests built with spec.http) to `targets` ("host:port" or
// "http://host:port", round-robin per connection): closed loop only, each of `concurrency`
// threads with one keep-alive connection per target and one call outstanding. An answer's
// HTTP status is counted as the gRPC code the server mapped to it (200 OK, 400
// INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 413 and 429
// RESOURCE_EXHAUSTED, 501 UNIMPLEMENTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, others
// INTERNAL); no answer (connection refused or reset, or `timeout` passed) is UNAVAILABLE.
// INVALID_ARGUMENT for rate > 0, no targets, or requests without HTTP bodies.
absl::StatusOr<LoadReport> RunHttpLoad(const std::vector<std::string>& targets,
                                       const LoadRequests& requests, const LoadOptions& options);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_LOAD_TESTER_H_
