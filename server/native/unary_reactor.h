// File: server/native/unary_reactor.h
//
// A unary gRPC call read after admission: the reactor that the compute RPCs (native Gather and
// GatherNd, KServe's ModelInfer) share. A subclass parses its message type, decodes it into a
// ComputeRequest and writes its reply; this class does the rest, the same way for each:
//
//   Begin      CallGate::Admit (token, draining), then the call's client (ClientIdentity, for
//              its share of the budget: ByteBudget::Open) and a receive credit of the byte
//              budget (granted: read now; queued: read when OnGranted; refused: UNAVAILABLE at
//              once, ByteBudget::ReceiveRefusedError, or ShareError when its client holds its
//              share while others use the budget). A refused, unauthenticated or draining call
//              is answered without its message ever being buffered.
//   read       before it is parsed, the message's wire bytes are scanned for what it will
//              cost decoded (proto/decoded_cost.h: the received bytes, the parsed message,
//              its conversion to core tensors), and its receive credit becomes a reservation
//              of that (ByteBudget::ReserveDecoded). A cost beyond the whole budget is
//              RESOURCE_EXHAUSTED (ByteBudget::DecodedTooLargeError), one beyond its room now
//              UNAVAILABLE (NeedsError), both without parsing. Then Parse (a message that does
//              not parse is INVALID_ARGUMENT; a call without a message, INVALID_ARGUMENT); the
//              received bytes, freed by parsing, leave the reservation.
//   Run        the subclass decodes and calls Submit (ComputeEntry::Submit, with the call's
//              deadline, cancel flag and reservation), or Answer with its error.
//   Answer     exactly once on every path: WriteReply when OK, then CallGate::Answer (metrics,
//              statistics, error log) with the call's record (server/admission/call_record.h), then
//              its timing as trailing metadata (tc-queue-us, tc-compute-us, tc-server-us) and, for
//              an error, the caller's traceparent or x-request-id echoed; then Finish with the
//              error, or the reply.
//   send       an OK answer's send limit (server/admission/send_deadline.h: --answer_send_timeout_s
//              + its bytes / --answer_send_min_bytes_per_s) is armed with its Finish: a client that
//              never takes the answer (an HTTP/2 window never opened) has its call cancelled then
//              (server/admission/answer_send_timer.h), and OnDone frees it, counted and logged
//              (CallGate::unsent_answers) instead of waiting for the connection to die.
//
// Why read after admission: Gather, GatherNd and ModelInfer are unary on the wire, but the
// services register them as streamed (Service::MarkMethodStreamed), so gRPC calls the handler
// when the call's headers arrive and reads the message only when the handler asks for it.
// Clients see ordinary unary RPCs.
//
// Lifetime: a call is created per RPC (with new) and deletes itself in OnDone, which gRPC calls
// after Finish completed. Until then it owns its request and response, so the views Submit
// passes on stay valid, and its reservation, given back when it is deleted (once the answer
// has been sent). OnCancel marks the cancel flag (the batcher or executor then answers
// CANCELLED through Submit's done, exactly once), or takes a call waiting for its receive
// credit out of the budget's line and answers it.
//
// Thread-safety: gRPC calls the reactor methods from its threads, one at a time per call,
// except OnCancel, which may run concurrently with the others; Submit's done may run on an
// executor's thread.

#ifndef TENSORCOMPUTE_SERVER_UNARY_CALL_H_
#define TENSORCOMPUTE_SERVER_UNARY_CALL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

#include "core/batching/task.h"
#include "server/admission/answer_send_timer.h"
#include "server/admission/byte_budget.h"
#include "server/admission/call_gate.h"
#include "server/admission/call_record.h"
#include "server/compute/compute_entry.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

class UnaryReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                     public ByteBudget::Waiter {
 public:
  // Starts the call (see above). Call once, right after construction.
  void Begin();

 protected:
  // `gate` and `compute` are not owned and must outlive the call. `rpc` names it in metrics.
  UnaryReactor(CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context,
               Rpc rpc);

  // Parses `message` into the subclass's request: false when it is not a valid message.
  virtual bool Parse(grpc::ByteBuffer* message) = 0;
  // The request message's type, e.g. tensorcompute.v1.GatherRequest: what the scan of its
  // decoded cost walks, and its full name for errors.
  virtual const google::protobuf::Descriptor& RequestType() const = 0;
  // The request was parsed: decode it and Submit, or Answer with the error.
  virtual void Run() = 0;
  // The answer is OK: the serialized response into `reply`. A response the client may be slow
  // to take should be freed here once serialized, so that it is held once, not twice.
  virtual grpc::Status WriteReply(grpc::ByteBuffer* reply) = 0;

  // Computes `request` with this call's deadline, cancel flag, reservation and record; its
  // outcome is the answer. `request.builtin` names the model of params sent inline.
  void Submit(ComputeRequest request);
  // Answers the call. Called exactly once.
  void Answer(const absl::Status& status);
  // Adds `bytes` that decoding the parsed request will hold (beyond what the scan counted) to the
  // call's reservation, by the scanned cost's rule. Returns OK; RESOURCE_EXHAUSTED
  // (ByteBudget::CheckDecoded, naming `what`) when the reservation would exceed the whole
  // budget; UNAVAILABLE (NeedsError) when the budget has no room for it now.
  absl::Status ReserveMore(int64_t bytes, absl::string_view what);

  ComputeEntry& compute() { return compute_; }
  const grpc::CallbackServerContext& context() const { return context_; }

 private:
  void OnGranted() override { StartRead(&message_); }
  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Reserves what the message read will cost decoded, or answers the call: true to parse it.
  bool ReserveDecoded();
  const std::string& RequestName() const { return RequestType().full_name(); }
  absl::Status NotParsedError(int64_t message_bytes) const;
  absl::Status NoMessageError() const;

  CallGate& gate_;
  ComputeEntry& compute_;
  grpc::CallbackServerContext& context_;
  const Rpc rpc_;
  CallRecord record_;
  const std::shared_ptr<batching::CancelFlag> cancel_ = std::make_shared<batching::CancelFlag>();
  grpc::ByteBuffer message_;
  grpc::ByteBuffer reply_;
  ByteBudget::Reservation reservation_;  // the message's and the output's bytes
  bool read_failed_ = false;
  AnswerSendTimer send_timer_;  // armed with an OK answer's Finish
};

// The call's deadline (InfiniteFuture without one).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_UNARY_CALL_H_
