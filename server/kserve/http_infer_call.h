// File: server/kserve/http_infer_call.h
//
// POST /v2/models/{name}[/versions/{v}]/infer, from a body already read to its answer: the
// JSON (and binary data) decoded by json_request.h into an inference::ModelInferRequest, planned by
// codec.h as for gRPC ModelInfer, computed through ComputeEntry::Submit without blocking,
// and the ModelInferResponse written back as JSON (or JSON and binary data).
//
// Objects are reused, one call after the other, through HttpInferCallPool: their buffers (the
// body, the decoded request and the response) keep their pages from call to call, so that a
// steady stream of large requests does not fault in fresh memory each time (a fresh 1 MiB
// buffer costs several times its copy to fault in); a call that moved more than kKeepBytes
// releases them when finished. The pool keeps a few idle ones (one per I/O thread), so that
// idle connections hold none.
//
// A call's life: Begin (the body's reservation in the in-flight budget) -> the session reads
// the body into body() -> Start -> `done` (any thread) -> Answer (counted through the gate,
// exactly once) -> the reply written -> Finish (reservation given back). Cancel may come
// between Start and `done` (the client went away).
//
// Thread-safety: one thread at a time (the session's strand); `done` is called from any
// thread and must only post back to it.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_INFER_CALL_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_INFER_CALL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/batching/task.h"
#include "server/admission/byte_budget.h"
#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"
#include "server/kserve/codec.h"
#include "server/kserve/http_reply.h"
#include "server/kserve/json_request.h"

namespace tensorcompute::server::kserve {

class HttpInferCall {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  // A call that moved more bytes than this (body or output) releases its buffers when done.
  static constexpr size_t kKeepBytes = size_t{4} << 20;

  // Not owned; each must outlive this.
  HttpInferCall(CallGate* gate, ComputeEntry* compute) : gate_(*gate), compute_(*compute) {}

  // A new call, arrived at `start` (gate->Arrive), holding `reservation` (its body's bytes),
  // with the request's traceparent and x-request-id header values (empty: none).
  void Begin(absl::Time start, ByteBudget::Reservation reservation, absl::string_view traceparent,
             absl::string_view request_id);

  // Where the session reads the body; empty after Begin, its capacity kept.
  std::string& body() { return body_; }
  ByteBudget::Reservation& reservation() { return reservation_; }
  absl::Time start() const { return record_.arrived; }

  // Decodes body() for model `model` (version `version`, empty: any) and submits it. What the
  // decode holds beside the body (json_request.h's held bytes) and what the BYTES inputs become
  // (BytesInputsConversion) are added to the reservation first, by ByteBudget::CheckDecoded's
  // rule: RESOURCE_EXHAUSTED beyond the whole budget, UNAVAILABLE when it does not fit now.
  // `header_length` is the Inference-Header-Content-Length field (nullopt without one).
  // `done` is called exactly once, from any thread, possibly before Start returns: OK when the
  // output is computed, else the error (INVALID_ARGUMENT for a bad body or header, the plan's,
  // the budget's or batcher's UNAVAILABLE, CANCELLED after Cancel, ...).
  void Start(absl::string_view model, absl::string_view version,
             std::optional<absl::string_view> header_length, Done done);

  // The client went away: a queued request is dropped (answered CANCELLED).
  void Cancel();

  // Answers the call with `status` (`done`'s, or a failure before Start): counted through the
  // gate with its record (server/admission/call_record.h), and the reply to write, with a
  // Server-Timing header and, for an error, the caller's traceparent or x-request-id echoed. An OK
  // reply views the response's bytes (binary output): keep this call unchanged until it is written.
  HttpReply Answer(const absl::Status& status);

  // The reply was written (or dropped): the reservation is given back, large buffers released.
  void Finish();

 private:
  absl::Status Submit(absl::string_view model, absl::string_view version,
                      std::optional<absl::string_view> header_length, Done* done);

  CallGate& gate_;
  ComputeEntry& compute_;
  CallRecord record_;
  ByteBudget::Reservation reservation_;
  std::shared_ptr<batching::CancelFlag> cancel_;
  std::string body_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  HttpInferOptions options_;
  InferJob job_;
  size_t call_bytes_ = 0;  // the larger of the body and the output
};

// Idle HttpInferCalls, kept for reuse. Thread-safe (one mutex, held for a push or a pop).
class HttpInferCallPool {
 public:
  // Calls for `gate` and `compute` (not owned; outlive the pool); at most `max_idle` kept.
  HttpInferCallPool(CallGate* gate, ComputeEntry* compute, int max_idle)
      : gate_(gate), compute_(compute), max_idle_(static_cast<size_t>(max_idle)) {}

  // An idle call, or a new one.
  std::unique_ptr<HttpInferCall> Take();
  // Back for reuse (or freed when enough are idle). REQUIRES: `call` is Finished.
  void Give(std::unique_ptr<HttpInferCall> call);

 private:
  CallGate* const gate_;
  ComputeEntry* const compute_;
  const size_t max_idle_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<HttpInferCall>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_INFER_CALL_H_
