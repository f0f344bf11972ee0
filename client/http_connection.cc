#include "client/http_connection.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"

namespace tensorcompute::client {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// The most Beast reads at once (http::read_some asks for up to 64 KiB).
constexpr size_t kReadBytes = size_t{64} << 10;

struct HttpConnection::State {
  boost::asio::io_context io;
  std::optional<beast::tcp_stream> stream;  // connected, or empty
  beast::flat_buffer buffer;                // bytes read past the last answer
};

HttpConnection::HttpConnection(absl::string_view target, absl::Duration timeout)
    : timeout_(timeout), state_(std::make_unique<State>()) {
  absl::ConsumePrefix(&target, "http://");
  // The last colon: an IPv6 address ("[::1]:8000") has colons of its own.
  const size_t colon = target.rfind(':');
  absl::string_view host = target.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  host_ = std::string(host);
  port_ = colon == absl::string_view::npos ? "80" : std::string(target.substr(colon + 1));
}

HttpConnection::~HttpConnection() = default;

absl::Status HttpConnection::Connect() {
  state_->stream.emplace(state_->io);
  state_->buffer.clear();
  beast::error_code ec;
  tcp::resolver resolver(state_->io);
  const auto endpoints = resolver.resolve(host_, port_, ec);
  if (!ec) {
    if (timeout_ != absl::InfiniteDuration()) {
      state_->stream->expires_after(absl::ToChronoMilliseconds(timeout_));
    }
    state_->stream->connect(endpoints, ec);
  }
  if (ec) {
    state_->stream.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", host_, ":", port_, ": ", ec.message()));
  }
  // Headers and body leave in one write, but a reply must not wait on Nagle either.
  state_->stream->socket().set_option(tcp::no_delay(true), ec);
  return absl::OkStatus();
}

absl::StatusOr<int> HttpConnection::Post(absl::string_view path, const Headers& headers,
                                         std::string* body, std::string* answer) {
  const bool reused = state_->stream.has_value();
  if (!reused) {
    if (absl::Status connected = Connect(); !connected.ok()) return connected;
  }
  absl::StatusOr<int> status = Exchange(path, headers, body, answer);
  // A kept-alive connection the server has closed since (idle timeout, restart) fails before
  // any answer: once more on a fresh one.
  if (!status.ok() && reused && answer->empty()) {
    if (absl::Status connected = Connect(); !connected.ok()) return connected;
    status = Exchange(path, headers, body, answer);
  }
  return status;
}

absl::StatusOr<int> HttpConnection::Exchange(absl::string_view path, const Headers& headers,
                                             std::string* body, std::string* answer) {
  http::request<http::string_body> request(http::verb::post,
                                           beast::string_view(path.data(), path.size()), 11);
  request.set(http::field::host, host_);
  for (const auto& [name, value] : headers) request.set(name, value);
  request.keep_alive(true);
  // Swapped in and back out (after the write), not copied: a body can be megabytes.
  request.body().swap(*body);
  request.prepare_payload();

  http::response_parser<http::string_body> parser;
  // Lifts Beast's default limit on a response body (8 MB), which large answers exceed.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  answer->clear();
  // The caller's string (and its capacity) receives the answer, swapped back below.
  parser.get().body().swap(*answer);

  beast::tcp_stream& stream = *state_->stream;
  beast::error_code ec;
  if (timeout_ != absl::InfiniteDuration()) {
    stream.expires_after(absl::ToChronoMilliseconds(timeout_));
  }
  http::write(stream, request, ec);
  request.body().swap(*body);
  if (!ec) {
    if (timeout_ != absl::InfiniteDuration()) {
      stream.expires_after(absl::ToChronoMilliseconds(timeout_));
    }
    // Beast reads at most what the buffer has room for (512 bytes at least, 64 KiB at most),
    // and a buffer that the parser keeps consuming never grows: without room made first, a
    // 1 MiB answer takes 2,048 reads.
    state_->buffer.reserve(kReadBytes);
    http::read(stream, state_->buffer, parser, ec);
  }
  parser.get().body().swap(*answer);
  if (ec) {
    // A failed exchange leaves the stream in an unknown state: the next Post reconnects.
    state_->stream.reset();
    return absl::UnavailableError(
        absl::StrCat("HTTP exchange with ", host_, ":", port_, " failed: ", ec.message()));
  }
  if (!parser.get().keep_alive()) state_->stream.reset();
  return static_cast<int>(parser.get().result_int());
}

}  // namespace tensorcompute::client
