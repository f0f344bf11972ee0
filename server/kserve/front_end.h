// File: server/kserve/front_end.h
//
// KServe v2 (the Open Inference Protocol) as one front end of the server (server/front_end.h):
// inference.GRPCInferenceService on the main gRPC port (grpc_service.h) and, with an
// http_listen address, the same protocol over HTTP/REST on a port of its own
// (http_front_end.h). docs/kserve.md is the user's view.
//
// Thread-safety: as server/front_end.h.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_
#define TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_

#include <string>

#include "server/front_end.h"

namespace tensorcompute::server::kserve {

struct Options {
  // KServe v2 over HTTP/REST on "host:port"; port 0 picks a free port (the front end's
  // "http_port" tells). Empty (default): no HTTP endpoint. Plaintext, whatever tls_cert says;
  // request bodies over max_message_bytes get 413, and auth_token_file applies (401).
  // Server::Start fails with UNAVAILABLE when it cannot be bound, INVALID_ARGUMENT when it is
  // not "host:port".
  std::string http_listen;
  // Threads serving HTTP connections, each one connection (and one infer) at a time; further
  // connections wait to be accepted. At least 1 (smaller values mean 1); default 8.
  int http_threads = 8;
};

// The factory to give Server::Start.
FrontEndFactory MakeFrontEnd(const Options& options);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_
