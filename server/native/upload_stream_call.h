// File: server/native/upload_stream_call.h
//
// What the client-streamed calls that change resident tables (PutTensor, UpdateRows) share: a
// reactor that admits the call, reads its messages one at a time, parses each only once its
// decoded cost is held in the uploads' share, hands it to the call, and answers when the
// client half-closes, with an idle timer on every read.
//
//   admission   CallGate::Admit with the admin token when configured, then a slot in the
//               uploads' share (UploadBudget::Admit: UNAVAILABLE when there is none), before
//               any message is read.
//   each read   its decoded cost (proto::ScanDecodedCost) held in the share
//               (RESOURCE_EXHAUSTED, unparsed, beyond the whole share), then parsed
//               (INVALID_ARGUMENT when it does not parse), then Take(); one message in memory
//               at a time.
//   idle        a read that gets no message within idle_timeout answers DEADLINE_EXCEEDED,
//               "<Subject()> sent no message for 2m (--upload_idle_timeout_s); <Ending()>",
//               and drops what the call holds: a stalled client cannot keep its slot.
//   the end     the client half-closes: Complete() answers; a cancelled call answers
//               CANCELLED "<Subject()> was cancelled; <Ending()>". Any error answers at once
//               and Release() drops what was not published.
// Why uploads have their own share rather than the compute calls' budget: put_tensor_call.h.
//
// Every path calls Finish once: an answer from a reaction, or the idle timer's while a read is
// pending (mu_ tells them apart: the timer answers only a read still pending, and the read's
// OnReadDone, which must come, then only drops what it holds). The call deletes itself when
// gRPC is done with it (OnDone) and every idle timer it set has called back (refs_).
//
// Thread-safety: gRPC calls the reactor from its threads, one at a time.

#ifndef TENSORCOMPUTE_SERVER_NATIVE_UPLOAD_STREAM_CALL_H_
#define TENSORCOMPUTE_SERVER_NATIVE_UPLOAD_STREAM_CALL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/alarm.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

#include "server/admission/byte_budget.h"
#include "server/admission/call_gate.h"
#include "server/admission/upload_budget.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

struct UploadStreamEnv {
  CallGate* gate = nullptr;         // not owned
  UploadBudget* uploads = nullptr;  // not owned; null: uploads are not charged
  // The longest wait for the next message (ServerOptions::upload_idle_timeout); zero: none.
  absl::Duration idle_timeout = absl::ZeroDuration();
};

class UploadStreamCall : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // Each read is parsed into a new message of `prototype`'s type (message()).
  UploadStreamCall(const UploadStreamEnv& env, Rpc rpc, grpc::CallbackServerContext* context,
                   const google::protobuf::Message& prototype);

  // Admits the call and starts reading; or answers Ready()'s error.
  void Begin();

  void OnReadDone(bool ok) override;
  void OnDone() override;
  // Nothing to do: a read is pending until the answer, except while a StartTake or
  // StartComplete is, and a cancelled call's read completes with ok false, so OnReadDone
  // answers it (Finish exactly once). A call whose StartTake or StartComplete waits on other
  // calls overrides this to cancel them, so that its `done` comes.
  void OnCancel() override {}

 protected:
  ~UploadStreamCall() override = default;

  // OK if the call can be served at all (checked before admission).
  virtual absl::Status Ready() { return absl::OkStatus(); }
  // The message just parsed into message(); the first one when `first`.
  virtual absl::Status Take(bool first) = 0;
  // The client half-closed after `messages` messages: the answer.
  virtual absl::Status Complete(int64_t messages) = 0;
  // Take and Complete for a call that finishes a message, or its answer, later (UpdateRows
  // forwarding a sharded table's messages to its shards): `done` is called exactly once, from
  // any thread, possibly before this returns. No message is read until it is, so what the call
  // does with a message stays within its slot, one message at a time. The defaults call Take
  // and Complete.
  using Then = absl::AnyInvocable<void(absl::Status) &&>;
  virtual void StartTake(bool first, Then done) { std::move(done)(Take(first)); }
  virtual void StartComplete(int64_t messages, Then done) { std::move(done)(Complete(messages)); }
  // Drops whatever the call holds that was not published (on any answer but OK's, and after).
  virtual void Release() = 0;
  // For the idle and cancel errors: "the upload of tensor 'T'", and what became of it,
  // "nothing was stored". Read from the idle timer with no reaction running.
  virtual std::string Subject() const = 0;
  virtual std::string Ending() const = 0;

  grpc::CallbackServerContext& context() { return context_; }
  // The message read, during Take. REQUIRES: M is the prototype's type.
  template <typename M>
  M& message() {
    return static_cast<M&>(*message_);
  }
  // The uploads' share this call holds (its slot), for what it holds beyond its messages.
  ByteBudget::Reservation& share() { return share_; }
  UploadBudget* uploads() const { return env_.uploads; }

 private:
  void ReadNext();
  void Taken(absl::Status status);
  void OnIdle(uint64_t read, bool fired);
  void Unref();
  absl::Status Parse();
  void Answer(const absl::Status& status);
  void Drop();

  const UploadStreamEnv& env_;
  const Rpc rpc_;
  grpc::CallbackServerContext& context_;
  std::unique_ptr<google::protobuf::Message> message_;
  const absl::Time start_;
  grpc::ByteBuffer wire_;  // the message read
  int64_t messages_ = 0;   // messages taken
  ByteBudget::Reservation share_;
  // The pending read's idle timer, touched by reactions only; destroying it cancels it.
  std::unique_ptr<grpc::Alarm> alarm_;
  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // a read is pending
  uint64_t reads_ ABSL_GUARDED_BY(mu_) = 0;    // reads started
  bool idled_ ABSL_GUARDED_BY(mu_) = false;    // OnIdle answered the call
  std::atomic<int> refs_{1};                   // OnDone's, and one per timer set
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_NATIVE_UPLOAD_STREAM_CALL_H_
