// File: server/kserve/http_request_checks.h
//
// The framing and encoding rules a request header must pass before the HTTP/REST front end
// does anything else with it (http_session.cc reads the header, then asks this): at most
// Options::http_max_header_fields fields (431); one Content-Length at most, and not together
// with Transfer-Encoding (400: a request smuggler's framing); no Transfer-Encoding but
// "chunked" (501); no Content-Encoding but "identity" (415). One rule for the session and for
// tests/fuzz/http_request_fuzzer.cc.
//
// Thread-safety: a pure function.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_REQUEST_CHECKS_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_REQUEST_CHECKS_H_

#include <optional>

#include <boost/beast/http/message.hpp>

#include "server/kserve/http_reply.h"
#include "server/kserve/kserve_front_end.h"

namespace tensorcompute::server::kserve {

// nullopt when `header` may be served under `options`; else the refusal to answer it with
// (an ErrorReply of status 431, 400, 501 or 415, as above).
std::optional<HttpReply> CheckRequestHeader(const boost::beast::http::request_header<>& header,
                                            const Options& options);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_REQUEST_CHECKS_H_
