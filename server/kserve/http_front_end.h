// File: server/kserve/http_front_end.h
//
// KServe v2 (Open Inference Protocol) over HTTP/REST, on its own port (ServerOptions::
// http_listen), served with cpp-httplib:
//
//   GET  /v2/health/live                              200 (always, while the process serves)
//   GET  /v2/health/ready                             200 when ready (gRPC ServerReady), else 503
//   GET  /v2                                          server metadata
//   GET  /v2/models/{name}[/versions/{v}]             model metadata
//   GET  /v2/models/{name}[/versions/{v}]/ready       200 when ready, else 503
//   POST /v2/models/{name}[/versions/{v}]/infer       inference (JSON or binary tensor data)
//
// It is a third front end on the same compute entry: the JSON becomes an
// inference::ModelInferRequest (json.h), which codec.h decodes as for gRPC ModelInfer, and
// ComputeService::Submit runs (the same budget, batcher, executors and error texts); the
// response goes back to JSON. Every endpoint is admitted (except /v2/health/*) and answered
// through the CallGate, counted under the gRPC RPC of the same meaning (ServerLive,
// ServerReady, ServerMetadata, ModelMetadata, ModelReady, ModelInfer). Errors are
// {"error": "<the gRPC API's message>"} with the status of proto::HttpStatusOf; a body over
// max_body_bytes gets 413. With tokens, every endpoint but /v2/health/* needs
// "Authorization: Bearer <token>" (else 401). While the server drains, everything but
// /v2/health/live answers 503.
//
// Threads: httplib accepts on one thread of its own and serves each connection on a pool of
// `threads`; an infer blocks its pool thread until its task is done. A request body is read
// whole (up to max_body_bytes) before the in-flight byte budget sees it, so bodies being read
// can hold up to threads × max_body_bytes outside the budget.
//
// Thread-safety: Start and Stop from one thread; the handlers run concurrently.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference/grpc_predict_v2.pb.h"

#include "server/call_gate.h"
#include "server/compute_service.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace tensorcompute::server::kserve {

class HttpFrontEnd {
 public:
  struct Options {
    // "host:port" (IPv6 hosts in brackets); port 0 picks a free one (port() tells).
    std::string listen;
    // Connections served at once (httplib's pool). Default 8.
    int threads = 8;
    // Largest request body in bytes; larger ones get 413. Default 64 MiB.
    int64_t max_body_bytes = int64_t{64} << 20;
  };

  // Binds options.listen and starts serving on a thread of its own. `gate` and `compute` (not
  // owned) must outlive this; `ready` says whether the server is ready (/v2/health/ready, model
  // ready). Returns UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT when it is
  // not "host:port".
  static absl::StatusOr<std::unique_ptr<HttpFrontEnd>> Start(const Options& options, CallGate* gate,
                                                             ComputeService* compute,
                                                             std::function<bool()> ready);

  // Stop().
  ~HttpFrontEnd();

  int port() const { return port_; }

  // Closes the listener and waits for the requests in flight to be answered. Idempotent.
  void Stop();

 private:
  HttpFrontEnd() = default;
  void Route();
  // Counts `status` for `rpc` and makes it the response.
  void Answer(httplib::Response& res, Rpc rpc, absl::Time start, const absl::Status& status);
  // An infer request, decoded and computed: the calling thread waits for the answer.
  // `message_bytes` (the body's size) is held in the budget with the output's bytes until this
  // returns. Fills `*response` as CompleteInferResponse leaves it, or returns the error.
  absl::Status Infer(const inference::ModelInferRequest& request, int64_t message_bytes,
                     absl::Time deadline, inference::ModelInferResponse* response);

  CallGate* gate_ = nullptr;
  ComputeService* compute_ = nullptr;
  std::function<bool()> ready_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
  size_t payload_max_ = 0;  // max_body_bytes
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_
