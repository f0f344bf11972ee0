// File: server/admission/call_gate.h
//
// The one way in and out for every call of every front end (native gRPC, KServe gRPC, KServe
// HTTP): Arrive when a call comes in, Admit before any work (the bearer token, the admin
// token, draining), Answer when it is answered (counted in the metrics by RPC and code with its
// latency, and a failure logged, rate-limited), and, for an answer its client does not take,
// the send limit and what happens when it passes (send_deadline.h, unsent_answers.h). The texts of
// the refusals it makes are written here once: "server is draining; retry on another replica"
// (UNAVAILABLE), and TokenAuth's.
//
// Thread-safety: every method may be called from any thread; the draining flag is atomic.

#ifndef TENSORCOMPUTE_SERVER_CALL_GATE_H_
#define TENSORCOMPUTE_SERVER_CALL_GATE_H_

#include <atomic>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/compression.h"

#include "server/admission/call_record.h"
#include "server/admission/client_identity.h"
#include "server/admission/error_log.h"
#include "server/admission/send_deadline.h"
#include "server/admission/token_auth.h"
#include "server/admission/unsent_answers.h"
#include "server/metrics/metrics.h"

namespace grpc {
class CallbackServerContext;
}  // namespace grpc

namespace tensorcompute::server {

class CallGate {
 public:
  // Not owned; must outlive the gate. `auth` (ordinary tokens) and `admin` (admin tokens) may
  // be null: no token needed, and admin calls need what other calls need.
  CallGate(Metrics* metrics, ErrorLog* errors, const TokenAuth* auth, const TokenAuth* admin);

  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // A call came in: it is in flight until its Answer (or Abandon). Returns its start time
  // (a CallRecord's `arrived`).
  absl::Time Arrive() {
    metrics_->RequestStarted();
    return absl::Now();
  }

  // OK when the call may go on: its token is accepted (an ordinary or an admin one, when tokens
  // are required) and, with `needs_admin` and admin tokens configured, it is an admin token;
  // and the server is not draining. Otherwise UNAUTHENTICATED (no token, or an unknown one),
  // PERMISSION_DENIED (an ordinary token where an admin one is needed), or UNAVAILABLE
  // (DrainingError). `authorization` is the call's "authorization" value; nullopt when it has
  // none.
  absl::Status Admit(std::optional<absl::string_view> authorization, bool needs_admin) const;
  absl::Status Admit(const grpc::CallbackServerContext& context, bool needs_admin) const;

  // The call was answered with `status`: counted under `rpc` with its stages (call_record.h)
  // in the RPC's statistics and, when it was submitted to compute, its model's; logged with its
  // request id when not OK. Call exactly once per Arrive, or Abandon instead.
  void Answer(Rpc rpc, const CallRecord& record, const absl::Status& status);
  // The same for a call that computes nothing, arrived at `start` (from Arrive).
  void Answer(Rpc rpc, absl::Time start, const absl::Status& status) {
    Answer(rpc, CallRecord(start), status);
  }

  // A call that gRPC ended before its message arrived (cancelled by its client, or its message
  // refused by gRPC's own size limit): no longer in flight, and not counted, as gRPC's own
  // answers are not.
  void Abandon() { metrics_->RequestAbandoned(); }

  // From now on Admit refuses every call (calls already admitted are not affected).
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // UNAVAILABLE "server is draining; retry on another replica".
  static absl::Status DrainingError();

  // How the compute answers are compressed (--grpc_compression): set once, before serving.
  // Per call, not the server's default, because Debian's gRPC 1.51 C++ client crashes when its
  // client-side health check (grpc.health.v1 Watch) receives a compressed message: health
  // answers stay plain.
  void set_compression(grpc_compression_algorithm algorithm) { compression_ = algorithm; }
  // Asks gRPC to compress `context`'s answer with the configured algorithm if the client
  // accepts it, else with the other one it accepts, else not at all (its grpc-accept-encoding:
  // proto::CompressionLevelFor).
  void Compress(grpc::CallbackServerContext& context) const;

  // The send limit of the gRPC front ends' answers (--answer_send_timeout_s and
  // --answer_send_min_bytes_per_s; HTTP takes the rate, with its own base): set once, before
  // serving.
  void set_send_limit(const SendLimit& limit) { send_limit_ = limit; }
  const SendLimit& send_limit() const { return send_limit_; }
  // Who a call's client is, for the share of the in-flight budget (--trusted_proxies, tokens):
  // set once, before serving.
  void set_client_identity(ClientIdentity identity) { identity_ = std::move(identity); }
  const ClientIdentity& client_identity() const { return identity_; }

  // An answer not taken within its send limit was given up: counted, and logged once per
  // client address (unsent_answers.h).
  UnsentAnswers& unsent_answers() { return unsent_; }

  Metrics& metrics() { return *metrics_; }

 private:
  absl::Status CheckToken(std::optional<absl::string_view> authorization, bool needs_admin) const;

  Metrics* const metrics_;
  ErrorLog* const errors_;
  const TokenAuth* const auth_;
  const TokenAuth* const admin_;
  std::atomic<bool> draining_{false};
  grpc_compression_algorithm compression_ = GRPC_COMPRESS_NONE;
  SendLimit send_limit_;
  ClientIdentity identity_;
  UnsentAnswers unsent_;
};

// The call's "authorization" metadata, if any.
std::optional<absl::string_view> AuthorizationOf(const grpc::CallbackServerContext& context);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_CALL_GATE_H_
