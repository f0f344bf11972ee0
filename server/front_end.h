// File: server/front_end.h
//
// The seam for protocol front ends beyond the native service, such as KServe v2 (server/kserve/,
// which depends on this folder, never the reverse). Server::Start is given factories; each
// makes its front end from what every front end shares (FrontEndContext), and the server
// registers its gRPC services on the main port, starts its listeners once that port is bound,
// and stops them in the drain.
//
// Thread-safety: the server calls the methods from the thread that starts or drains it.

#ifndef TENSORCOMPUTE_SERVER_FRONT_END_H_
#define TENSORCOMPUTE_SERVER_FRONT_END_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "server/server_options.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace tensorcompute::server {

class CallGate;      // server/admission/call_gate.h
class ComputeEntry;  // compute_entry.h

// What a front end is given. Everything outlives the front end.
struct FrontEndContext {
  const ServerOptions* options = nullptr;
  CallGate* gate = nullptr;         // admission and answers (server/admission/call_gate.h)
  ComputeEntry* compute = nullptr;  // the compute entry (compute_entry.h)
  // Whether the server is ready: health SERVING (preloading done, no lost GPU, not draining).
  std::function<bool()> ready;
};

class FrontEnd {
 public:
  virtual ~FrontEnd() = default;

  // gRPC services to serve on the main port. Called once, before the port is bound.
  virtual std::vector<grpc::Service*> Services() { return {}; }
  // Starts listeners of its own, once the main port is bound: an error fails Server::Start.
  virtual absl::Status Start() { return absl::OkStatus(); }
  // In the drain, once compute is idle and before the gRPC server shuts down: stops the
  // listeners, answering what is in flight. Idempotent.
  virtual void Stop() {}
  // Named ports for the server's start-up line, e.g. {"http_port", 8000}.
  virtual std::vector<std::pair<std::string, int>> Ports() const { return {}; }
};

using FrontEndFactory =
    std::function<absl::StatusOr<std::unique_ptr<FrontEnd>>(const FrontEndContext& context)>;

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_FRONT_END_H_
