// File: server/kserve/http_front_end.h
//
// KServe v2 (Open Inference Protocol) over HTTP/REST, on its own port (Options::http_listen),
// served asynchronously with Boost.Beast and Asio, plaintext or TLS:
//
//   GET  /v2/health/live                              200 (always, while the process serves)
//   GET  /v2/health/ready                             200 when ready (gRPC ServerReady), else 503
//   GET  /v2                                          server metadata
//   GET  /v2/models/{name}[/versions/{v}]             model metadata
//   GET  /v2/models/{name}[/versions/{v}]/ready       200 when ready, else 503
//   POST /v2/models/{name}[/versions/{v}]/infer       inference (JSON or binary tensor data)
//
// It is a third front end on the same compute entry: the JSON becomes an
// inference::ModelInferRequest (json_request.h), which codec.h decodes as for gRPC ModelInfer, and
// ComputeEntry::Submit runs (the same budget, batcher, executors and error texts); the
// response goes back to JSON. Every endpoint is admitted (except /v2/health/*) and answered
// through the CallGate, counted under the gRPC RPC of the same meaning (ServerLive,
// ServerReady, ServerMetadata, ModelMetadata, ModelReady, ModelInfer). Errors are
// {"error": "<the gRPC API's message>"} with the status of proto::HttpStatusOf. With tokens,
// every endpoint but /v2/health/* needs "Authorization: Bearer <token>" (else 401). While the
// server drains, everything but /v2/health/* answers 503.
//
// The pieces: this file owns the `http_threads` I/O threads, one io_context each (a connection
// stays on the one it was given when accepted, round-robin), the acceptor and the TLS context;
// http_session.h serves one connection and enforces every limit of kserve::Options
// (kserve_front_end.h) before memory is spent: header size and field count (431), framing (400,
// 501), Content-Encoding (415), Authorization before the body (401), the body limit for every
// framing (413), the body's bytes reserved in the in-flight budget before it is read (503),
// and the header, body, idle and write timeouts; http_endpoints.h and http_infer_call.h answer.
// No I/O thread waits while a request computes: Submit's callback posts the answer back.
//
// Connections (http_max_connections), nginx's rule for reusable connections: a connection
// that arrives when http_max_connections are open closes the one that has been idle longest
// and is admitted in its place. Idle means waiting for the first byte of a request: freshly
// accepted (or in its TLS handshake), or kept alive between requests; a connection with a
// request in progress (header partly read, body being read, computing, writing) is never
// closed for a newcomer. Only when none is idle is the new connection closed at once. Both
// are counted (tensorcompute_http_idle_connections_closed_total,
// tensorcompute_rejected_connections_total). So connections that send nothing cannot lock
// good clients out: they only age out one another. The idle ones are kept in an
// HttpIdleList (http_idle_list.h), oldest first, O(1) per transition; the victim is closed on
// its own strand, and counts itself out then (so the count may briefly pass the limit by the
// connections being closed).
//
// Thread-safety: Start and Stop from one thread; the sessions run on the I/O threads.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"
#include "server/kserve/kserve_front_end.h"
#include "server/server_options.h"

namespace tensorcompute::server::kserve {

class HttpFrontEnd {
 public:
  // Binds options.http_listen and starts serving on options.http_threads threads, with the
  // body limit (max_message_bytes) and the TLS files (tls_cert, tls_key, tls_client_ca: TLS
  // when tls_cert is set, mTLS with tls_client_ca) of `server`. `gate` and `compute` (not
  // owned) must outlive this; `ready` says whether the server is ready (/v2/health/ready, model
  // ready). Returns UNAVAILABLE when the address cannot be bound; INVALID_ARGUMENT when it is
  // not "host:port", an option is out of range (Options::Validate), or the TLS files do not
  // load.
  static absl::StatusOr<std::unique_ptr<HttpFrontEnd>> Start(const Options& options,
                                                             const ServerOptions& server,
                                                             CallGate* gate, ComputeEntry* compute,
                                                             std::function<bool()> ready);

  // Stop().
  ~HttpFrontEnd();

  int port() const { return port_; }

  // Closes the listener, waits (at most http_write_timeout) for the infers in flight to be
  // answered, then closes every connection and joins the I/O threads. Idempotent.
  void Stop();

 private:
  struct State;  // Asio and Beast stay out of this header

  HttpFrontEnd();

  std::unique_ptr<State> state_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_FRONT_END_H_
