// File: server/admission/answer_send_timer.h
//
// The send limit (send_deadline.h) of a gRPC callback call's answer: armed when the answer is
// handed to gRPC (just before Finish, or StartWriteAndFinish), it cancels the call if gRPC
// has not completed it within the limit, that is if the client has not taken the answer (an
// HTTP/2 window never opened: the answer waits in gRPC for ever, the connection kept alive by
// answered pings). The cancellation makes gRPC reset the stream and run the reactor's OnDone,
// which frees what the call holds (its reservation of --max_inflight_bytes). The client sees
// the stream reset: CANCELLED (docs/errors.md).
//
// Lifetime: the timer is owned by the reactor and destroyed in its OnDone. The alarm's callback
// never touches the reactor or its context (gRPC frees the context after OnDone): it holds its
// own reference to the core call (grpc_call_ref), so that cancelling races with nothing, and a
// call already done makes the cancellation a no-op. Destroying the timer cancels the alarm.
//
// Thread-safety: Arm and Fired from the reactor's methods; the alarm fires on a gRPC thread.

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_ANSWER_SEND_TIMER_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_ANSWER_SEND_TIMER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/server_context.h"

namespace tensorcompute::server {

class AnswerSendTimer {
 public:
  AnswerSendTimer() = default;
  AnswerSendTimer(const AnswerSendTimer&) = delete;
  AnswerSendTimer& operator=(const AnswerSendTimer&) = delete;

  // Cancels `context`'s call if it has not ended `limit` from now. Call at most once, before
  // the Finish it guards (after it, the call may already be done and the context freed).
  void Arm(grpc::CallbackServerContext& context, absl::Duration limit);

  // True once the limit passed with the call not ended, and the call was cancelled for it. In
  // OnDone, with context.IsCancelled(): the answer was given up unsent.
  bool Fired() const { return state_ != nullptr && state_->fired.load(std::memory_order_acquire); }
  // The client's address as gRPC names it ("ipv4:127.0.0.2:41234"), read when the timer fired
  // (a cancelled call no longer knows it). REQUIRES: Fired().
  const std::string& peer() const { return state_->peer; }

 private:
  // Shared with the alarm's callback, which writes `peer`, then `fired`.
  struct State {
    std::atomic<bool> fired{false};
    std::string peer;
  };
  std::optional<grpc::Alarm> alarm_;  // only when armed
  std::shared_ptr<State> state_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_ANSWER_SEND_TIMER_H_
