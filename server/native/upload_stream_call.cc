#include "server/native/upload_stream_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/proto_utils.h"

#include "core/status_macros.h"
#include "proto/decoded_cost.h"
#include "proto/grpc_status.h"

namespace tensorcompute::server {

UploadStreamCall::UploadStreamCall(const UploadStreamEnv& env, Rpc rpc,
                                   grpc::CallbackServerContext* context,
                                   const google::protobuf::Message& prototype)
    : env_(env),
      rpc_(rpc),
      context_(*context),
      message_(prototype.New()),
      start_(env.gate->Arrive()) {}

void UploadStreamCall::Begin() {
  if (absl::Status ready = Ready(); !ready.ok()) return Answer(ready);
  if (absl::Status admitted = env_.gate->Admit(context_, /*needs_admin=*/true); !admitted.ok()) {
    return Answer(admitted);
  }
  if (env_.uploads != nullptr) {
    absl::StatusOr<ByteBudget::Reservation> share = env_.uploads->Admit();
    if (!share.ok()) return Answer(share.status());
    share_ = *std::move(share);
  }
  ReadNext();
}

void UploadStreamCall::OnReadDone(bool ok) {
  alarm_.reset();  // cancels the read's idle timer, which then only calls back to Unref
  bool idled = false;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    idled = idled_;
  }
  if (idled) return Drop();  // OnIdle answered
  // A failed read is either the end of the stream (the client half-closed) or the call's
  // cancellation (its client, its deadline).
  if (!ok) {
    if (context_.IsCancelled()) {
      return Answer(absl::CancelledError(absl::StrCat(Subject(), " was cancelled; ", Ending())));
    }
    return StartComplete(messages_, [this](absl::Status status) { Answer(status); });
  }
  absl::Status parsed = Parse();
  if (!parsed.ok()) return Taken(std::move(parsed));
  StartTake(messages_++ == 0, [this](absl::Status status) { Taken(std::move(status)); });
}

// The message read was taken (or failed to parse): the next read, or the answer.
void UploadStreamCall::Taken(absl::Status status) {
  // One message in memory at a time: what the call keeps of it is copied by now. A fresh
  // message frees what parsing allocated, which Clear() would keep.
  message_.reset(message_->New());
  if (env_.uploads != nullptr) env_.uploads->ReleaseMessage(&share_);
  if (!status.ok()) return Answer(status);
  ReadNext();
}

void UploadStreamCall::OnDone() {
  alarm_.reset();
  Unref();
}

// Reads the next message, its idle timer set first (the timer needs to know a read is pending,
// and it may fire as soon as the read starts). StartRead runs no reaction inline (gRPC queues
// a read that completes at once), so holding mu_ across it cannot deadlock.
void UploadStreamCall::ReadNext() {
  absl::MutexLock lock(&mu_);
  reading_ = true;
  const uint64_t read = ++reads_;
  if (env_.idle_timeout > absl::ZeroDuration()) {
    refs_.fetch_add(1, std::memory_order_relaxed);
    alarm_ = std::make_unique<grpc::Alarm>();
    alarm_->Set(absl::ToChronoTime(absl::Now() + env_.idle_timeout),
                [this, read](bool fired) { OnIdle(read, fired); });
  }
  StartRead(&wire_);
}

// The idle timer of read number `read`: `fired` false when it was cancelled (its read
// completed, or the call ended). Answers the call if that read is still pending.
void UploadStreamCall::OnIdle(uint64_t read, bool fired) {
  bool answer = false;
  {
    absl::MutexLock lock(&mu_);
    answer = fired && reading_ && read == reads_ && !idled_;
    idled_ = idled_ || answer;
  }
  if (answer) {
    const absl::Status status = absl::DeadlineExceededError(
        absl::StrCat(Subject(), " sent no message for ", absl::FormatDuration(env_.idle_timeout),
                     " (--upload_idle_timeout_s); ", Ending()));
    env_.gate->Answer(rpc_, start_, status);
    // With the read still pending: it then fails, and OnReadDone drops what the call holds.
    Finish(proto::ToGrpcStatus(status));
  }
  Unref();
}

void UploadStreamCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

absl::Status UploadStreamCall::Parse() {
  const google::protobuf::Descriptor& descriptor = *message_->GetDescriptor();
  const int64_t wire_bytes = static_cast<int64_t>(wire_.Length());
  const absl::Status not_parsed = absl::InvalidArgumentError(
      absl::StrCat("a ", RpcName(rpc_), " message (", wire_bytes, " bytes) does not parse as ",
                   descriptor.full_name()));
  absl::StatusOr<proto::DecodedCost> cost = proto::ScanDecodedCost(descriptor, &wire_);
  if (!cost.ok()) return not_parsed;
  if (env_.uploads != nullptr) {
    TC_RETURN_IF_ERROR(env_.uploads->HoldMessage(cost->total(), cost->Summary(), &share_));
  }
  if (!grpc::SerializationTraits<google::protobuf::Message>::Deserialize(&wire_, message_.get())
           .ok()) {
    return not_parsed;
  }
  return absl::OkStatus();
}

void UploadStreamCall::Answer(const absl::Status& status) {
  env_.gate->Answer(rpc_, start_, status);
  Drop();
  Finish(proto::ToGrpcStatus(status));
}

// Whatever was not published goes now, not when gRPC gets to OnDone: the call's own, and its
// share of max_upload_bytes.
void UploadStreamCall::Drop() {
  Release();
  share_.Reset();
  wire_.Clear();
  message_->Clear();
}

}  // namespace tensorcompute::server
