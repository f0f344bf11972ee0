// File: server/kserve/http_session.h
//
// One HTTP/1.1 connection of the KServe v2 REST front end (http_front_end.h accepts them), on
// Boost.Beast, plaintext or TLS. A session reads its requests one after the other (keep-alive;
// pipelined requests wait in its buffer and are answered in order) and enforces the limits of
// kserve::Options before it spends memory:
//
//   header   at most http_max_header_bytes and http_max_header_fields (431), received within
//            http_header_timeout of the request's first byte (of the accept, for the first);
//            framing checked: two Content-Lengths or Content-Length with Transfer-Encoding
//            400, a Transfer-Encoding other than chunked 501, a Content-Encoding other than
//            identity 415. Range is ignored.
//   admit    the endpoint (404), then Authorization and draining (401, 503) before one byte of
//            body is read; for an infer, a Content-Length over max_body_bytes is 413 and the
//            body's bytes are reserved in the in-flight budget (no room: 503 with
//            ByteBudget::NeedsError's text). A chunked body reserves max_body_bytes, its size
//            being unknown, and gives back what it did not use once read.
//   body     read as it arrives, counted against max_body_bytes for every framing (413 once
//            it passes; a malformed chunk 400); each read waits at most
//            http_body_progress_timeout and the whole body at most http_body_timeout.
//   compute  ComputeEntry::Submit through HttpInferCall; no thread waits for it. Meanwhile
//            the session reads on (at most one 4 KiB read; none when pipelined bytes are
//            already buffered): end of stream or an error there means the client went away,
//            and its request is cancelled (a queued one is answered CANCELLED through the
//            gate, and not written). A client that half-closes after its request is therefore
//            taken as gone.
//   write    the answer within its send limit (server/admission/send_deadline.h:
//            http_write_timeout + its bytes / --answer_send_min_bytes_per_s), else the
//            connection closes, the infer's budget is freed, and the answer is counted and
//            logged as not taken (CallGate::unsent_answers); then the next request within
//            http_idle_timeout.
//   idle     while it waits for a request's first byte (from the accept, through a TLS
//            handshake, and between keep-alive requests), the session is in context->idle:
//            a connection arriving at http_max_connections may close it (http_idle_list.h).
//            With a request in progress it never is.
//
// A request refused before its body was read is answered with "Connection: close", and the
// session then stops sending, discards what the client still sends for up to 1 s (4 MiB), and
// closes: so the client reads the answer instead of a reset. A timeout closes the connection
// without an answer.
//
// Thread-safety: each session runs on its own strand; `context` is shared by all of them.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_SESSION_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_SESSION_H_

#include <atomic>
#include <cstdint>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "server/kserve/http_endpoints.h"
#include "server/kserve/http_idle_list.h"
#include "server/kserve/http_infer_call.h"
#include "server/kserve/kserve_front_end.h"

namespace tensorcompute::server::kserve {

// What every session of one front end shares. Outlives the sessions.
struct HttpContext {
  Options options;             // the limits
  int64_t max_body_bytes = 0;  // the server's max_message_bytes
  HttpEndpoints* endpoints = nullptr;
  HttpInferCallPool* infer_calls = nullptr;
  std::atomic<int64_t> connections{0};  // sessions alive (the acceptor counts them in)
  std::atomic<int64_t> answering{0};    // infers from body read to answer written or dropped
  HttpIdleList idle;                    // sessions waiting for a request's first byte
};

// Serves the accepted `socket` until the connection closes. The caller has counted it in
// context->connections; the session counts it out when it ends.
// REQUIRES: socket's executor is a strand of its own.
void StartHttpSession(boost::asio::ip::tcp::socket socket, HttpContext* context);
// The same over TLS with `tls` (not owned; outlives the session): the handshake first, within
// http_header_timeout.
void StartHttpsSession(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                       HttpContext* context);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_SESSION_H_
