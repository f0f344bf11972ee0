// File: server/kserve/kserve_front_end.h
//
// KServe v2 (the Open Inference Protocol) as one front end of the server (server/front_end.h):
// inference.GRPCInferenceService on the main gRPC port (grpc_service.h) and, with an
// http_listen address, the same protocol over HTTP/REST on a port of its own
// (http_front_end.h). docs/kserve.md is the user's view.
//
// Thread-safety: as server/front_end.h.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_
#define TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "server/front_end.h"

namespace tensorcompute::server::kserve {

struct Options {
  // KServe v2 over HTTP/REST on "host:port"; port 0 picks a free port (the front end's
  // "http_port" tells). Empty (default): no HTTP endpoint. TLS (and mTLS) with the server's
  // tls_cert, tls_key and tls_client_ca, as on the gRPC port; auth_token_file applies (401).
  // Server::Start fails with UNAVAILABLE when it cannot be bound, INVALID_ARGUMENT when it is
  // not "host:port" (or the TLS files do not load).
  std::string http_listen;
  // I/O threads serving every HTTP connection (asynchronously: any number of connections per
  // thread; a small infer that finds the server idle is computed on one). At least 1 (smaller
  // values mean 1); default 8.
  int http_threads = 8;

  // The limits below hold before memory is spent; each answers with the status named and
  // {"error": "..."} (docs/kserve.md lists them). The body limit is the server's
  // max_message_bytes (413, for every framing, counted as the bytes arrive).

  // Connections open at once. At the limit, a new connection closes the one idle longest
  // (waiting for a request's first byte: just accepted, or kept alive between requests;
  // tensorcompute_http_idle_connections_closed_total) and is served; when none is idle it is
  // closed as soon as it is accepted (tensorcompute_rejected_connections_total). A connection
  // with a request in progress is never closed for a newcomer. At least 1; default 1024.
  int http_max_connections = 1024;
  // The request line and header fields together: larger gets 431 and the connection closed.
  // Default 16 KiB.
  int64_t http_max_header_bytes = int64_t{16} << 10;
  // Header fields of one request: more gets 431 and the connection closed. Default 100.
  int http_max_header_fields = 100;
  // From a connection's accept, or a request's first byte, to its last header byte; then the
  // connection is closed without an answer. Also bounds the TLS handshake. Default 10 s.
  absl::Duration http_header_timeout = absl::Seconds(10);
  // Longest wait for the next byte of a body: then the connection is closed. Default 10 s.
  absl::Duration http_body_progress_timeout = absl::Seconds(10);
  // Longest a whole body may take, from its header's end (a client dribbling a byte a second
  // passes the progress timeout; this closes it). Default 120 s: 64 MiB at 0.5 MiB/s.
  absl::Duration http_body_timeout = absl::Seconds(120);
  // Longest a keep-alive connection may wait for its next request: then it is closed.
  // Default 60 s.
  absl::Duration http_idle_timeout = absl::Seconds(60);
  // Longest the writing of one response may take (a client that does not read): then the
  // connection is closed. Default 60 s.
  absl::Duration http_write_timeout = absl::Seconds(60);

  // OK, or INVALID_ARGUMENT naming the first field out of range (each count and byte limit at
  // least 1, each timeout positive).
  absl::Status Validate() const;
};

// The factory to give Server::Start.
FrontEndFactory MakeFrontEnd(const Options& options);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_FRONT_END_H_
