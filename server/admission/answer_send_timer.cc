#include "server/admission/answer_send_timer.h"

#include <chrono>

#include "grpc/grpc.h"
#include "grpc/support/alloc.h"

namespace tensorcompute::server {

void AnswerSendTimer::Arm(grpc::CallbackServerContext& context, absl::Duration limit) {
  state_ = std::make_shared<State>();
  // The core call, not the context: the callback may run after OnDone, when gRPC has freed
  // the context (c_call is there for such framework-level extensions). The reference keeps
  // the call alive until the callback has run, which it does exactly once: expired, or
  // cancelled when the timer is destroyed.
  grpc_call* call = context.c_call();
  grpc_call_ref(call);
  alarm_.emplace();
  alarm_->Set(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(limit),
              [call, state = state_](bool expired) {
                if (expired) {
                  char* peer = grpc_call_get_peer(call);
                  state->peer = peer;
                  gpr_free(peer);
                  // Before the cancel: OnDone, which it brings, reads them.
                  state->fired.store(true, std::memory_order_release);
                  grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED,
                                               "the answer was not taken within its send limit",
                                               nullptr);
                }
                grpc_call_unref(call);
              });
}

}  // namespace tensorcompute::server
