#include "server/native/unary_reactor.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "proto/decoded_cost.h"
#include "proto/grpc_status.h"

namespace tensorcompute::server {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  // gRPC says "no deadline" with time_point::max(); InfiniteFuture is how the rest of the server
  // says it (ComputeRequest's default; the shard router sets no deadline on its sub-calls then).
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

UnaryReactor::UnaryReactor(CallGate* gate, ComputeEntry* compute,
                           grpc::CallbackServerContext* context, Rpc rpc)
    : gate_(*gate), compute_(*compute), context_(*context), rpc_(rpc), record_(gate->Arrive()) {}

void UnaryReactor::Begin() {
  const auto& metadata = context_.client_metadata();
  const auto value = [&metadata](const char* key) {
    const auto it = metadata.find(key);
    return it == metadata.end() ? absl::string_view()
                                : absl::string_view(it->second.data(), it->second.size());
  };
  // Before admission, so that a refused call's log line carries the caller's id too.
  SetRequestId(value(kTraceparentKey), value(kRequestIdKey), &record_);
  if (absl::Status admitted = gate_.Admit(context_, /*needs_admin=*/false); !admitted.ok()) {
    return Answer(admitted);
  }
  ByteBudget& budget = compute_.budget();
  // The call's client (its share of the budget) from its arrival to its end.
  reservation_ = budget.Open(gate_.client_identity().Of(context_));
  switch (budget.AcquireReceive(this, reservation_)) {
    case ByteBudget::Admission::kGranted:
      return StartRead(&message_);
    case ByteBudget::Admission::kQueued:
      return;  // OnGranted reads, or OnCancel answers
    case ByteBudget::Admission::kRefused:
      return Answer(budget.ReceiveRefusedError());
    case ByteBudget::Admission::kOverShare:
      return Answer(budget.ShareError(reservation_));
  }
}

void UnaryReactor::OnReadDone(bool ok) {
  if (!ok) {
    // Cancelled (the client, the deadline), the message refused by gRPC (over
    // max_message_bytes: the client gets gRPC's RESOURCE_EXHAUSTED), or a half-close with no
    // message. Only the last one sees this status; OnDone tells them apart for the metrics.
    (void)compute_.budget().ReceiveDone(0);  // the credit back
    read_failed_ = true;
    return Finish(proto::ToGrpcStatus(NoMessageError()));
  }
  const int64_t message_bytes = static_cast<int64_t>(message_.Length());
  record_.request_bytes = message_bytes;
  if (!ReserveDecoded()) return;
  const bool parsed = Parse(&message_);
  reservation_.Shrink(message_bytes);  // parsing frees the received bytes
  if (!parsed) return Answer(NotParsedError(message_bytes));
  Run();
}

bool UnaryReactor::ReserveDecoded() {
  ByteBudget& budget = compute_.budget();
  const int64_t message_bytes = static_cast<int64_t>(message_.Length());
  absl::StatusOr<proto::DecodedCost> cost = proto::ScanDecodedCost(RequestType(), &message_);
  absl::Status refused;
  if (!cost.ok()) {
    (void)budget.ReceiveDone(0);              // the credit back, nothing kept
    refused = NotParsedError(message_bytes);  // it would not parse either
  } else {
    refused = budget.ReserveDecoded(cost->total(), cost->Summary(), &reservation_);
    if (refused.ok()) return true;
  }
  // The credit is given back on every refusal, so the budget no longer counts the received
  // bytes: free them now, not when the answer has been sent.
  message_.Clear();
  Answer(refused);
  return false;
}

void UnaryReactor::OnCancel() {
  cancel_->Cancel();        // only marks; Submit's done still answers
  compute_.NoticeCancel();  // if it is queued, the batcher answers it now
  // True only for a call still waiting for its credit: nothing else will answer it (no read
  // was started, nothing submitted), so it is answered here. Otherwise a read or compute in
  // progress ends with the cancellation and answers, and Finish stays exactly once.
  if (compute_.budget().CancelWait(this)) {
    // gRPC's deadline timer may fire a hair before the deadline as the context reads it.
    const bool expired = absl::Now() + absl::Milliseconds(10) >= DeadlineOf(context_);
    Answer(
        absl::Status(expired ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kCancelled,
                     absl::StrCat(expired ? "deadline passed" : "call cancelled",
                                  " while waiting for room in the max_inflight_bytes budget "
                                  "to read the request message")));
  }
}

void UnaryReactor::OnDone() {
  if (send_timer_.Fired() && context_.IsCancelled()) {
    gate_.unsent_answers().Count(
        rpc_ == Rpc::kModelInfer ? FrontEndKind::kKserveGrpc : FrontEndKind::kNative, RpcName(rpc_),
        send_timer_.peer(), record_.response_bytes, gate_.send_limit().For(record_.response_bytes));
  }
  if (read_failed_) {
    if (context_.IsCancelled()) {
      gate_.Abandon();
    } else {
      gate_.Answer(rpc_, record_, NoMessageError());
    }
  }
  delete this;
}

void UnaryReactor::Submit(ComputeRequest request) {
  request.deadline = DeadlineOf(context_);
  request.cancel = cancel_;
  request.record = &record_;
  // `this` in done is safe: the call is deleted only in OnDone, which gRPC calls after Finish,
  // and nothing but done finishes a submitted call.
  compute_.Submit(std::move(request), &reservation_,
                  [this](absl::Status status) { Answer(status); });
}

void UnaryReactor::Answer(const absl::Status& status) {
  // The reply is written first: its size goes into the record, and a failure to serialize is
  // the outcome that is counted and sent.
  absl::Status outcome = status;
  if (outcome.ok()) {
    const grpc::Status written = WriteReply(&reply_);
    if (!written.ok()) {
      outcome = proto::FromGrpcStatus(written);
    }
    record_.response_bytes = static_cast<int64_t>(reply_.Length());
  }
  gate_.Answer(rpc_, record_, outcome);
  // Trailing metadata must be added before Finish sends it.
  for (const auto& [key, value] : record_.TimingTrailers(absl::Now())) {
    context_.AddTrailingMetadata(key, value);
  }
  if (!outcome.ok()) {
    if (!record_.request_id.empty()) {
      context_.AddTrailingMetadata(record_.request_id_header.first,
                                   record_.request_id_header.second);
    }
    return Finish(proto::ToGrpcStatus(outcome));
  }
  // Only an answer with a message is compressed. Write and status go as one operation.
  gate_.Compress(context_);
  // Armed before: once the answer is handed over, the call may be done and `this` deleted.
  send_timer_.Arm(context_, gate_.send_limit().For(record_.response_bytes));
  StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
}

absl::Status UnaryReactor::ReserveMore(int64_t bytes, absl::string_view what) {
  const int64_t total = reservation_.bytes() + bytes;
  TC_RETURN_IF_ERROR(compute_.budget().CheckDecoded(total, what));  // the scanned cost's rule
  return reservation_.Grow(bytes);
}

absl::Status UnaryReactor::NotParsedError(int64_t message_bytes) const {
  return absl::InvalidArgumentError(absl::StrCat("the request message (", message_bytes,
                                                 " bytes) does not parse as ", RequestName()));
}

absl::Status UnaryReactor::NoMessageError() const {
  return absl::InvalidArgumentError(absl::StrCat("the call carried no ", RequestName(),
                                                 " message (a unary RPC sends exactly one)"));
}

}  // namespace tensorcompute::server
