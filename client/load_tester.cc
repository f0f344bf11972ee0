#include "client/load_tester.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "nlohmann/json.hpp"

#include "client/http_connection.h"
#include "client/latency_histogram.h"
#include "core/status_macros.h"
#include "proto/kserve_wire.h"

namespace tensorcompute::client {
namespace {

constexpr int kNumCodes = 17;  // grpc::StatusCode 0..16 (OK .. UNAUTHENTICATED)

// Everything the calls of one run share. Counters are atomics: completions run on gRPC's
// threads.
class Run {
 public:
  // gRPC: `channels`; HTTP: `http_targets` (then channels is empty).
  Run(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
      std::vector<std::string> http_targets, const LoadRequests& requests,
      const LoadOptions& options)
      : requests_(requests),
        options_(options),
        authorization_(options.auth_token.empty() ? "" : "Bearer " + options.auth_token),
        http_targets_(std::move(http_targets)) {
    for (const auto& c : channels) stubs_.push_back(std::make_unique<grpc::GenericStub>(c));
    for (auto& c : by_code_) c.store(0);
  }

  LoadReport Execute();

 private:
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer response;
    absl::Time start;  // scheduled (open loop) or actual (closed loop) start
    absl::Time deadline = absl::InfiniteFuture();  // of the call, retries included
    size_t body = 0;
    int attempt = 1;
    bool measured = false;
  };

  // Starts one call; `done` runs after it was counted.
  void Start(std::unique_ptr<Call> call, std::function<void()> done);
  // Sends one attempt of `call` on the channel after `channel`; retries UNAVAILABLE on the
  // next channel while attempts and the deadline last, then counts and runs `done`.
  void Attempt(std::unique_ptr<Call> call, uint64_t channel, std::function<void()> done);
  // Counts a measured call's answer: `code` (a grpc::StatusCode), the response's bytes.
  void Count(absl::Time start, size_t body, int code, int64_t response_bytes);
  // Claims the next call of a closed-loop slot started at `now`: false when the run's
  // duration or request count is used up; *measured says whether it counts.
  bool NextClosedLoopCall(absl::Time now, bool* measured);
  void ClosedLoopSlot();
  // One HTTP closed-loop slot on the calling thread (slot `index`), until the run is over.
  void HttpSlot(int index);
  void OpenLoop();
  void ReportProgress();
  bool Finished() const;

  const LoadRequests& requests_;
  const LoadOptions& options_;
  const std::string authorization_;  // "Bearer <token>", or empty
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  const std::vector<std::string> http_targets_;
  absl::Time begin_, measure_start_, measure_end_;

  std::atomic<uint64_t> next_{0};    // request and channel picker
  std::atomic<int64_t> tickets_{0};  // measured calls claimed (requests mode)
  std::atomic<int64_t> sent_{0}, not_sent_{0}, answered_{0}, errors_{0}, unexpected_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> bytes_sent_{0}, bytes_received_{0};
  std::array<std::atomic<int64_t>, kNumCodes> by_code_;
  LatencyHistogram latency_;

  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // every call answered
};

// One closed-loop slot: starts a call whose completion starts the next, until the run's
// duration or request count is used up.
bool Run::NextClosedLoopCall(absl::Time now, bool* measured) {
  *measured = false;
  if (now < measure_start_) return true;  // warmup
  if (options_.requests > 0) {
    if (tickets_.fetch_add(1) >= options_.requests) return false;
  } else if (now >= measure_end_) {
    return false;
  }
  *measured = true;
  return true;
}

void Run::ClosedLoopSlot() {
  auto call = std::make_unique<Call>();
  call->start = absl::Now();
  if (!NextClosedLoopCall(call->start, &call->measured)) return;  // slot ends
  Start(std::move(call), [this] { ClosedLoopSlot(); });
}

void Run::HttpSlot(int index) {
  // One keep-alive connection per target, made on first use.
  std::vector<std::unique_ptr<HttpConnection>> connections(http_targets_.size());
  auto connection_for = [&](size_t t) -> HttpConnection& {
    if (connections[t] == nullptr) {
      connections[t] = std::make_unique<HttpConnection>(http_targets_[t], options_.timeout);
    }
    return *connections[t];
  };
  // This slot's starting target: slots start spread over the targets, not all on the first.
  uint64_t turn = static_cast<uint64_t>(index);
  // The request body and the answer go through buffers kept for the slot's life, so that a
  // megabyte call does not charge fresh pages to the protocol.
  std::string send_buffer, answer;
  while (true) {
    const absl::Time start = absl::Now();
    bool measured;
    if (!NextClosedLoopCall(start, &measured)) return;
    const size_t body = next_.fetch_add(1) % requests_.http_bodies.size();
    if (measured) sent_.fetch_add(1, std::memory_order_relaxed);
    const absl::Time deadline = start + options_.timeout;
    HttpConnection::Headers headers = {
        {"Content-Type", "application/octet-stream"},
        {"Inference-Header-Content-Length", absl::StrCat(requests_.http_header_bytes[body])}};
    if (!authorization_.empty()) headers.emplace_back("Authorization", authorization_);
    send_buffer.assign(requests_.http_bodies[body]);  // Post gives it back unchanged
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<int> http_status =
          connection_for(turn % http_targets_.size())
              .Post(requests_.http_path, headers, &send_buffer, &answer);
      const int code = http_status.ok() ? static_cast<int>(proto::StatusCodeOfHttp(*http_status))
                                        : static_cast<int>(grpc::StatusCode::UNAVAILABLE);
      if (code == static_cast<int>(grpc::StatusCode::UNAVAILABLE) &&
          attempt < options_.max_attempts && absl::Now() < deadline) {
        if (measured) retries_.fetch_add(1, std::memory_order_relaxed);
        ++turn;  // the next target
        continue;
      }
      if (measured) Count(start, body, code, code == 0 ? static_cast<int64_t>(answer.size()) : 0);
      break;
    }
  }
}

void Run::Start(std::unique_ptr<Call> call, std::function<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  const uint64_t n = next_.fetch_add(1);
  call->body = n % requests_.bodies.size();
  if (options_.timeout != absl::InfiniteDuration()) call->deadline = absl::Now() + options_.timeout;
  if (call->measured) sent_.fetch_add(1, std::memory_order_relaxed);
  Attempt(std::move(call), n, std::move(done));
}

void Run::Attempt(std::unique_ptr<Call> call, uint64_t channel, std::function<void()> done) {
  if (call->deadline != absl::InfiniteFuture()) {
    call->context.set_deadline(absl::ToChronoTime(call->deadline));
  }
  if (!authorization_.empty()) call->context.AddMetadata("authorization", authorization_);
  grpc::GenericStub* stub = stubs_[channel % stubs_.size()].get();
  Call* raw = call.release();
  stub->UnaryCall(&raw->context, requests_.method, grpc::StubOptions(),
                  &requests_.bodies[raw->body], &raw->response,
                  [this, raw, channel, done = std::move(done)](grpc::Status status) mutable {
                    std::unique_ptr<Call> owned(raw);
                    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                        owned->attempt < options_.max_attempts && absl::Now() < owned->deadline) {
                      // A new attempt needs a new context; the rest of the call carries over.
                      auto retry = std::make_unique<Call>();
                      retry->start = owned->start;
                      retry->deadline = owned->deadline;
                      retry->body = owned->body;
                      retry->attempt = owned->attempt + 1;
                      retry->measured = owned->measured;
                      if (retry->measured) retries_.fetch_add(1, std::memory_order_relaxed);
                      owned.reset();
                      Attempt(std::move(retry), channel + 1, std::move(done));
                      return;
                    }
                    if (owned->measured) {
                      Count(owned->start, owned->body, static_cast<int>(status.error_code()),
                            static_cast<int64_t>(owned->response.Length()));
                    }
                    owned.reset();
                    // done() before the decrement: a closed-loop slot's next call is counted
                    // (Start) before this one leaves, so outstanding_ never touches 0 while a
                    // slot goes on, and Execute's wait cannot end early. done() runs without
                    // mu_ held, since Start takes it.
                    done();
                    absl::MutexLock lock(&mu_);
                    --outstanding_;
                  });
}

void Run::Count(absl::Time start, size_t body, int code, int64_t response_bytes) {
  const absl::Time now = absl::Now();
  latency_.Record(absl::ToInt64Nanoseconds(now - start));
  code = std::clamp(code, 0, kNumCodes - 1);
  const bool ok = code == 0;
  by_code_[code].fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(requests_.http_bodies.empty()
                            ? static_cast<int64_t>(requests_.bodies[body].Length())
                            : static_cast<int64_t>(requests_.http_bodies[body].size()),
                        std::memory_order_relaxed);
  if (ok) {
    bytes_received_.fetch_add(response_bytes, std::memory_order_relaxed);
  } else {
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
  const bool valid = requests_.valid[body];
  if ((valid && code == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) || (!valid && ok)) {
    unexpected_.fetch_add(1, std::memory_order_relaxed);
  }
  answered_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  last_answer_ = std::max(last_answer_, now);
}

void Run::OpenLoop() {
  const absl::Duration interval = absl::Seconds(1) / options_.rate;
  int64_t measured = 0;
  for (int64_t k = 0;; ++k) {
    // Each call's time is computed from the start, not from the previous one, so that sleeps
    // that overrun do not add up into a slower rate.
    const absl::Time due = begin_ + interval * static_cast<double>(k);
    const bool in_measure = due >= measure_start_;
    if (in_measure &&
        (options_.requests > 0 ? measured >= options_.requests : due >= measure_end_)) {
      break;
    }
    const absl::Duration wait = due - absl::Now();
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    if (in_measure) ++measured;
    bool full;
    {
      absl::MutexLock lock(&mu_);
      full = outstanding_ >= options_.max_outstanding;
    }
    if (full) {
      if (in_measure) not_sent_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto call = std::make_unique<Call>();
    // Measured from `due`, not from the send: when this loop runs late, the delay shows in the
    // latency (no coordinated omission; load_tester.h).
    call->start = due;
    call->measured = in_measure;
    Start(std::move(call), [] {});
  }
}

void Run::ReportProgress() {
  int64_t last_done = 0;
  absl::Time last = absl::Now();
  const absl::Duration interval = std::max(options_.progress_interval, absl::Milliseconds(50));
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), interval)) return;
    }
    const absl::Time now = absl::Now();
    LoadProgress p;
    p.elapsed = now - measure_start_;
    p.warming_up = now < measure_start_;
    p.done = answered_.load();
    p.errors = errors_.load();
    p.qps = (p.done - last_done) / absl::ToDoubleSeconds(now - last);
    last_done = p.done;
    last = now;
    options_.on_progress(p);
  }
}

LoadReport Run::Execute() {
  begin_ = absl::Now();
  measure_start_ = begin_ + options_.warmup;
  measure_end_ = measure_start_ + options_.duration;
  std::thread progress;
  if (options_.on_progress) progress = std::thread([this] { ReportProgress(); });
  if (!http_targets_.empty()) {
    std::vector<std::thread> slots;
    for (int i = 0; i < options_.concurrency; ++i) slots.emplace_back([this, i] { HttpSlot(i); });
    for (std::thread& slot : slots) slot.join();
  } else if (options_.rate > 0) {
    OpenLoop();
  } else {
    // Each slot's first call; every later one is started by its predecessor's completion.
    for (int i = 0; i < options_.concurrency; ++i) ClosedLoopSlot();
  }
  absl::Time last_answer;
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outstanding_ == 0; };
    mu_.Await(absl::Condition(&idle));
    stopped_ = true;
    last_answer = last_answer_;
  }
  if (progress.joinable()) progress.join();

  LoadReport r;
  r.sent = sent_.load();
  r.not_sent = not_sent_.load();
  for (int c = 0; c < kNumCodes; ++c) {
    if (by_code_[c].load() > 0) {
      r.by_code[absl::StatusCodeToString(static_cast<absl::StatusCode>(c))] = by_code_[c].load();
    }
  }
  r.errors = errors_.load();
  r.retries = retries_.load();
  r.unexpected = unexpected_.load();
  // The measured time runs to the last answer, not to the end of the schedule: calls still in
  // flight at measure_end_ are counted, so their time is too. The floor avoids dividing by 0.
  r.seconds = std::max(absl::ToDoubleSeconds(last_answer - measure_start_), 1e-9);
  const int64_t answered = answered_.load();
  if (answered == 0) r.seconds = 0;
  r.bytes_sent = bytes_sent_.load();
  r.bytes_received = bytes_received_.load();
  if (r.seconds > 0) {
    r.qps = answered / r.seconds;
    r.sent_mb_per_s = r.bytes_sent / r.seconds / 1e6;
    r.received_mb_per_s = r.bytes_received / r.seconds / 1e6;
  }
  r.latency_us_min = latency_.min() / 1e3;
  r.latency_us_p50 = latency_.Quantile(0.5) / 1e3;
  r.latency_us_p90 = latency_.Quantile(0.9) / 1e3;
  r.latency_us_p99 = latency_.Quantile(0.99) / 1e3;
  r.latency_us_p999 = latency_.Quantile(0.999) / 1e3;
  r.latency_us_max = latency_.max() / 1e3;
  r.latency_us_mean = latency_.mean() / 1e3;
  r.mode = options_.rate > 0 ? absl::StrFormat("open (%g QPS)", options_.rate)
                             : absl::StrFormat("closed (concurrency %d)", options_.concurrency);
  r.channels = static_cast<int>(http_targets_.empty() ? stubs_.size() : http_targets_.size());
  r.targets = r.channels;
  return r;
}

}  // namespace

namespace {

absl::Status CheckLoadOptions(const LoadOptions& options) {
  if (options.rate < 0 || !std::isfinite(options.rate)) {
    return absl::InvalidArgumentError("rate must be >= 0 (0: closed loop)");
  }
  if (options.rate == 0 && options.concurrency < 1) {
    return absl::InvalidArgumentError("concurrency must be >= 1");
  }
  if (options.requests < 0 || options.max_outstanding < 1 || options.max_attempts < 1 ||
      options.duration < absl::ZeroDuration() || options.warmup < absl::ZeroDuration() ||
      options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "expected requests >= 0, max_outstanding >= 1, max_attempts >= 1, duration >= 0, "
        "warmup >= 0, "
        "timeout > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadReport> RunLoad(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                   const LoadRequests& requests, const LoadOptions& options) {
  if (channels.empty()) return absl::InvalidArgumentError("no target to load");
  if (requests.bodies.empty() || requests.valid.size() != requests.bodies.size()) {
    return absl::InvalidArgumentError("no requests to send (HTTP ones go to RunHttpLoad)");
  }
  TC_RETURN_IF_ERROR(CheckLoadOptions(options));
  Run run(channels, {}, requests, options);
  return run.Execute();
}

absl::StatusOr<LoadReport> RunHttpLoad(const std::vector<std::string>& targets,
                                       const LoadRequests& requests, const LoadOptions& options) {
  if (targets.empty()) return absl::InvalidArgumentError("no target to load");
  if (requests.http_bodies.empty() || requests.valid.size() != requests.http_bodies.size() ||
      requests.http_header_bytes.size() != requests.http_bodies.size()) {
    return absl::InvalidArgumentError("no HTTP requests to send (build them with spec.http)");
  }
  if (options.rate > 0) {
    return absl::InvalidArgumentError("HTTP load is closed loop only: use concurrency, not rate");
  }
  TC_RETURN_IF_ERROR(CheckLoadOptions(options));
  Run run({}, targets, requests, options);
  return run.Execute();
}

std::string LoadReport::ToText() const {
  std::string codes;
  int64_t answered = 0;
  for (const auto& [code, count] : by_code) {
    absl::StrAppendFormat(&codes, "  %-22s %d\n", code, count);
    answered += count;
  }
  std::string update_line;
  if (updates.has_value()) {
    const UpdateLoadReport& u = *updates;
    update_line = absl::StrFormat(
        "updates       %.1f rows/s applied (target %g), %d rows in %d messages sent, %d "
        "applied, %d stream errors%s, sequence %d\n",
        u.rows_per_s, u.target_rows_per_s, u.rows_sent, u.messages_sent, u.rows_applied, u.errors,
        u.last_error.empty() ? "" : absl::StrCat(" (last: ", u.last_error, ")"), u.sequence);
  }
  return absl::StrFormat(
      "mode          %s; %d target(s), %d channel(s)\n"
      "requests      %d sent, %d answered, %d errors, %d unexpected, %d not sent, %d retries\n"
      "duration      %.3f s\n"
      "throughput    %.1f QPS, %.2f MB/s sent, %.2f MB/s received\n"
      "latency (us)  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n"
      "%s"
      "status codes\n%s",
      mode, targets, channels, sent, answered, errors, unexpected, not_sent, retries, seconds, qps,
      sent_mb_per_s, received_mb_per_s, latency_us_min, latency_us_p50, latency_us_p90,
      latency_us_p99, latency_us_p999, latency_us_max, latency_us_mean, update_line, codes);
}

std::string LoadReport::ToJson() const {
  nlohmann::json j;
  j["mode"] = mode;
  j["targets"] = targets;
  j["channels"] = channels;
  j["sent"] = sent;
  j["not_sent"] = not_sent;
  j["by_code"] = by_code;
  j["errors"] = errors;
  j["retries"] = retries;
  j["unexpected"] = unexpected;
  j["seconds"] = seconds;
  j["qps"] = qps;
  j["bytes_sent"] = bytes_sent;
  j["bytes_received"] = bytes_received;
  j["sent_mb_per_s"] = sent_mb_per_s;
  j["received_mb_per_s"] = received_mb_per_s;
  j["latency_us_min"] = latency_us_min;
  j["latency_us_p50"] = latency_us_p50;
  j["latency_us_p90"] = latency_us_p90;
  j["latency_us_p99"] = latency_us_p99;
  j["latency_us_p999"] = latency_us_p999;
  j["latency_us_max"] = latency_us_max;
  j["latency_us_mean"] = latency_us_mean;
  if (updates.has_value()) {
    const UpdateLoadReport& u = *updates;
    j["updates"] = {{"target_rows_per_s", u.target_rows_per_s},
                    {"rows_per_s", u.rows_per_s},
                    {"rows_sent", u.rows_sent},
                    {"messages_sent", u.messages_sent},
                    {"rows_applied", u.rows_applied},
                    {"messages_applied", u.messages_applied},
                    {"sequence", u.sequence},
                    {"streams", u.streams},
                    {"errors", u.errors},
                    {"error_codes", u.error_codes},
                    {"last_error", u.last_error},
                    {"seconds", u.seconds}};
  }
  return j.dump();
}

}  // namespace tensorcompute::client
