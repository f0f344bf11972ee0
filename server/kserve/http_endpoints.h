// File: server/kserve/http_endpoints.h
//
// The KServe v2 REST endpoints that answer at once (health, readiness, metadata, and Triton's
// model configuration and statistics), and the
// admission every endpoint but /v2/health/* passes first (the bearer token, draining; the
// CallGate's). The infer endpoint computes: http_infer_call.h.
//
// Every call is counted through the CallGate under the gRPC RPC of the same meaning
// (http_route.h RpcOf): the session calls gate->Arrive when the header is complete, and
// Admit/Serve (or the infer call) Answer exactly once.
//
// Thread-safety: every method may be called from any thread; not owned state is thread-safe.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_ENDPOINTS_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_ENDPOINTS_H_

#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"
#include "server/kserve/http_reply.h"
#include "server/kserve/http_route.h"

namespace tensorcompute::server::kserve {

class HttpEndpoints {
 public:
  // Not owned; each must outlive this. `ready`: whether the server is ready (health SERVING).
  HttpEndpoints(CallGate* gate, ComputeEntry* compute, std::function<bool()> ready)
      : gate_(*gate), compute_(*compute), ready_(std::move(ready)) {}

  // OK when `route` may be served: always for /v2/health/*; otherwise CallGate::Admit with
  // `authorization` (the request's Authorization field, nullopt without one): UNAUTHENTICATED
  // (401) or UNAVAILABLE while draining (503). A refusal has been Answered (counted).
  // REQUIRES: route.endpoint is not kNone; `start` is the call's gate->Arrive().
  absl::Status Admit(const Route& route, std::optional<absl::string_view> authorization,
                     absl::Time start);

  // The answer of an admitted endpoint that computes nothing, Answered through the gate.
  // REQUIRES: route.endpoint is neither kNone nor kInfer.
  HttpReply Serve(const Route& route, absl::Time start);

  CallGate& gate() { return gate_; }
  ComputeEntry& compute() { return compute_; }

 private:
  CallGate& gate_;
  ComputeEntry& compute_;
  const std::function<bool()> ready_;
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_ENDPOINTS_H_
