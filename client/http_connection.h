// File: client/http_connection.h
//
// One HTTP/1.1 keep-alive connection to one server, blocking, on Boost.Beast: what the load
// tester's HTTP mode (load_tester.h, --protocol kserve-http) sends its requests through. It
// connects on first use and again after any failed exchange; a server that closes a kept-alive
// connection costs the next request one reconnect, not an error.
//
// Plaintext only (no TLS): the load tester refuses TLS flags in HTTP mode.
//
// Thread-safety: none; one thread uses a connection.

#ifndef TENSORCOMPUTE_CLIENT_HTTP_CONNECTION_H_
#define TENSORCOMPUTE_CLIENT_HTTP_CONNECTION_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorcompute::client {

class HttpConnection {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // `target` is "host:port" or "http://host:port" (an IPv6 host in brackets). `timeout`
  // bounds each of connecting, sending a request and reading its answer; InfiniteDuration for
  // none. Nothing is connected until the first Post.
  HttpConnection(absl::string_view target, absl::Duration timeout);
  ~HttpConnection();

  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // POSTs `*body` to `path` with `headers` (Host, Content-Length and keep-alive are added) and
  // reads the answer's body into `*answer`. `*body` and `*answer` are the caller's buffers,
  // lent for the call and given back with their capacity (so a slot that reuses them does not
  // allocate per call); `*body` comes back unchanged.
  // Returns the HTTP status, or UNAVAILABLE when the connection could not be made or the
  // exchange failed (the connection is then closed; the next Post reconnects).
  absl::StatusOr<int> Post(absl::string_view path, const Headers& headers, std::string* body,
                           std::string* answer);

 private:
  struct State;
  absl::Status Connect();
  // One request and its answer on the connected stream.
  absl::StatusOr<int> Exchange(absl::string_view path, const Headers& headers, std::string* body,
                               std::string* answer);

  std::string host_, port_;
  absl::Duration timeout_;
  std::unique_ptr<State> state_;
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_HTTP_CONNECTION_H_
