// File: server/kserve_http.h
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
// It is a third front end on the same service: the JSON becomes an inference::ModelInferRequest
// (kserve_json.h), which runs through ComputeService::InferBlocking (the same codec, budget,
// batcher, executors, metrics and error texts as gRPC ModelInfer), and the response goes back
// to JSON. Errors are {"error": "<the gRPC API's message>"} with the status of
// kserve::HttpStatusOf; a body over max_body_bytes gets 413. With a TokenAuth, every endpoint
// but /v2/health/* needs "Authorization: Bearer <token>" (else 401). While the service drains,
// everything but /v2/health/live answers 503.
//
// Threads: httplib accepts on one thread of its own and serves each connection on a pool of
// `threads`; an infer blocks its pool thread until its task is done. A request body is read
// whole (up to max_body_bytes) before the in-flight byte budget sees it, so bodies being read
// can hold up to threads × max_body_bytes outside the budget.
//
// Thread-safety: Start and Stop from one thread; the handlers run concurrently.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

#include "server/compute_service.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tensorcompute::server {

class KserveHttp {
 public:
  struct Options {
    // "host:port" (IPv6 hosts in brackets); port 0 picks a free one (port() tells).
    std::string listen;
    // Connections served at once (httplib's pool). Default 8.
    int threads = 8;
    // Largest request body in bytes; larger ones get 413. Default 64 MiB.
    int64_t max_body_bytes = int64_t{64} << 20;
  };

  // Binds options.listen and starts serving on a thread of its own. `service` (not owned) must
  // outlive this; `ready` says whether the server is ready (/v2/health/ready, model ready).
  // Returns UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT when it is not
  // "host:port".
  static absl::StatusOr<std::unique_ptr<KserveHttp>> Start(const Options& options,
                                                           ComputeService* service,
                                                           std::function<bool()> ready);

  // Stop().
  ~KserveHttp();

  int port() const { return port_; }

  // Closes the listener and waits for the requests in flight to be answered. Idempotent.
  void Stop();

 private:
  KserveHttp() = default;
  void Route();

  ComputeService* service_ = nullptr;
  std::function<bool()> ready_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
  size_t payload_max_ = 0;  // max_body_bytes
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_H_
