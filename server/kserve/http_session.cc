#include "server/kserve/http_session.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "server/admission/client_identity.h"
#include "server/admission/send_deadline.h"
#include "server/kserve/http_request_checks.h"

namespace tensorcompute::server::kserve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// While a request computes, what one read may take of what the client sends next (pipelined
// requests): enough to see the end of the stream, bounded so that a client cannot make the
// session buffer without limit.
constexpr size_t kPeekBytes = 4096;
// What a session buffers of the raw stream beyond a header: Beast reads a body up to 64 KiB at
// a time into the buffer (as much as its capacity allows: see BeginInfer), and the parser
// moves it into the body. The bound also holds a chunk
// header (whose line Beast does not limit): a longer one is a parse error (400). Every
// prepare(kPeekBytes) below is on an empty buffer, so within the bound.
constexpr size_t kBodyReadBytes = size_t{64} << 10;
// Asio's async_write offers the socket 64 KiB per call (transfer_all); the kernel takes what
// its send buffer has room for, so offer it up to this: a 1 MiB answer in a few sendmsg calls
// rather than 17, each a pass through the io_context.
constexpr size_t kWriteBytes = size_t{16} << 20;
// After an answer with "Connection: close" to a request whose body was not read: how long,
// and how much, the session reads and discards before it closes. A proxy that streams the
// body (nginx with proxy_request_buffering off) may go on writing for milliseconds, tens of
// MiB at loopback speed, before it reads the answer; closing on unread bytes would reset the
// connection, and the proxy would answer 502 instead of our 401 or 413. The bounds keep an
// unauthenticated sender from costing more than this.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr int64_t kLingerBytes = int64_t{32} << 20;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

// A Beast error of the request's form (not of the transport, and not the client's end of
// stream): answered 400.
bool IsMalformed(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

std::optional<absl::string_view> FieldOf(const http::request_header<>& header, http::field field) {
  const auto it = header.find(field);
  if (it == header.end()) return std::nullopt;
  return absl::string_view(it->value().data(), it->value().size());
}

std::optional<absl::string_view> FieldOf(const http::request_header<>& header,
                                         absl::string_view name) {
  const auto it = header.find(beast::string_view(name.data(), name.size()));
  if (it == header.end()) return std::nullopt;
  return absl::string_view(it->value().data(), it->value().size());
}

// Every x-forwarded-for field of `header`, in order, joined by commas (RFC 9110: the same as one
// field with those values).
std::string ForwardedFor(const http::request_header<>& header) {
  std::string joined;
  const auto [begin, end] = header.equal_range(kForwardedForKey);
  for (auto it = begin; it != end; ++it) {
    if (!joined.empty()) joined += ',';
    joined.append(it->value().data(), it->value().size());
  }
  return joined;
}

absl::string_view ReasonOf(int status) {
  const beast::string_view reason =
      http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return absl::string_view(reason.data(), reason.size());
}

std::string TooLargeError(int64_t max_body_bytes) {
  return absl::StrCat("the request body is larger than max_message_bytes (", max_body_bytes,
                      " bytes)");
}

template <class Stream>
class Session final : public std::enable_shared_from_this<Session<Stream>>,
                      public HttpIdleList::Member {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Stream stream, HttpContext* context)
      : stream_(std::move(stream)),
        context_(*context),
        options_(context->options),
        idle_timer_(stream_.get_executor()),
        buffer_(static_cast<size_t>(options_.http_max_header_bytes) + kBodyReadBytes) {}

  ~Session() {
    context_.idle.Leave(&idle_node_);
    FinishInfer();
    context_.connections.fetch_sub(1);
  }

  void Run() {
    beast::error_code ec;
    Tcp().socket().set_option(tcp::no_delay(true), ec);
    header_deadline_ = Clock::now() + ToClock(options_.http_header_timeout);
    idle_node_.owner = this->weak_from_this();
    if constexpr (kTls) {
      EnterIdle();  // the handshake: nothing is asked of the server yet
      Tcp().expires_at(header_deadline_);
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!self->LeaveIdle() || ec) return self->Close();
                                self->ReadRequest();
                              });
    } else {
      ReadRequest();
    }
  }

 private:
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // The next request: wait for its first byte (the idle timeout; the header timeout for a
  // connection's first), then its header.
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options_.http_max_header_bytes));
    // No body limit yet: Beast would refuse a large Content-Length while parsing the header,
    // before Authorization is checked. OnHeader checks it, and sets the limit for the body.
    parser_->body_limit(boost::none);
    if (buffer_.size() > 0) {  // pipelined: already here
      if (!first_) header_deadline_ = Clock::now() + ToClock(options_.http_header_timeout);
      return ReadHeader();
    }
    if (first_) {
      Tcp().expires_at(header_deadline_);
    } else {
      Tcp().expires_after(ToClock(options_.http_idle_timeout));
    }
    EnterIdle();
    stream_.async_read_some(buffer_.prepare(kPeekBytes), [self = this->shared_from_this()](
                                                             beast::error_code ec, size_t n) {
      self->buffer_.commit(n);
      if (!self->LeaveIdle() || ec) return self->Close();
      if (!self->first_) {
        self->header_deadline_ = Clock::now() + ToClock(self->options_.http_header_timeout);
      }
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    Tcp().expires_at(header_deadline_);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    first_ = false;
    route_ = Route();  // none until matched: an answer before that is of no endpoint
    head_only_ = false;
    if (ec == http::error::header_limit) {
      return Write(ErrorReply(431, absl::StrCat("the request header is larger than ",
                                                options_.http_max_header_bytes,
                                                " bytes (http_max_header_bytes)")),
                   /*body_pending=*/true);
    }
    if (IsMalformed(ec)) {
      return Write(ErrorReply(400, absl::StrCat("malformed HTTP request: ", ec.message())),
                   /*body_pending=*/true);
    }
    if (ec) return Close();  // timeout, end of stream, reset
    const http::request<http::string_body>& request = parser_->get();
    keep_alive_ = request.keep_alive();
    http10_ = request.version() < 11;
    head_only_ = request.method() == http::verb::head;
    const bool body_pending = !parser_->is_done();
    if (std::optional<HttpReply> refused = CheckRequestHeader(parser_->get().base(), options_)) {
      return Write(*std::move(refused), /*body_pending=*/true);
    }
    const absl::string_view method(request.method_string().data(), request.method_string().size());
    const absl::string_view target(request.target().data(), request.target().size());
    route_ = MatchRoute(method, target);
    if (route_.endpoint == Endpoint::kNone) {
      return Write(ErrorReply(404, NoSuchEndpointError(method, target)), body_pending);
    }
    HttpEndpoints& endpoints = *context_.endpoints;
    const absl::Time start = endpoints.gate().Arrive();
    if (absl::Status admitted =
            endpoints.Admit(route_, FieldOf(request, http::field::authorization), start);
        !admitted.ok()) {
      return Write(StatusReply(admitted), body_pending);
    }
    if (route_.endpoint != Endpoint::kInfer) {
      return Write(endpoints.Serve(route_, start), body_pending);
    }
    BeginInfer(start, body_pending);
  }

  // An admitted infer: the body's size checked and reserved, then read.
  void BeginInfer(absl::Time start, bool body_pending) {
    CallGate& gate = context_.endpoints->gate();
    const int64_t max_body = context_.max_body_bytes;
    const boost::optional<uint64_t> length = parser_->content_length();
    if (length.has_value() && *length > static_cast<uint64_t>(max_body)) {
      gate.Answer(Rpc::kModelInfer, start, absl::ResourceExhaustedError(TooLargeError(max_body)));
      return Write(ErrorReply(413, TooLargeError(max_body)), body_pending);
    }
    const int64_t bytes = parser_->chunked() ? max_body : static_cast<int64_t>(length.value_or(0));
    ByteBudget& budget = context_.endpoints->compute().budget();
    absl::StatusOr<ByteBudget::Reservation> reservation = budget.Reserve(bytes, ClientOf());
    if (!reservation.ok()) {
      gate.Answer(Rpc::kModelInfer, start, reservation.status());
      return Write(StatusReply(reservation.status()), body_pending);
    }
    infer_ = context_.infer_calls->Take();
    infer_->Begin(start, *std::move(reservation),
                  FieldOf(parser_->get(), kTraceparentKey).value_or(absl::string_view()),
                  FieldOf(parser_->get(), kRequestIdKey).value_or(absl::string_view()));
    parser_->get().body().swap(infer_->body());  // read into the call's buffer, capacity kept
    parser_->body_limit(static_cast<uint64_t>(max_body));
    // Beast reads as much as the buffer has room for (at least 512 bytes): 64 KiB reads, not
    // 512-byte ones. Kept for the connection's next bodies (at most kBodyReadBytes above the
    // header limit, per connection).
    if (body_pending) buffer_.reserve(kBodyReadBytes);
    body_deadline_ = Clock::now() + ToClock(options_.http_body_timeout);
    const std::optional<absl::string_view> expect = FieldOf(parser_->get(), http::field::expect);
    if (!body_pending || !expect.has_value() || !absl::EqualsIgnoreCase(*expect, "100-continue")) {
      return ReadBody();
    }
    Tcp().expires_after(ToClock(options_.http_write_timeout));
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->DropInfer();
                       self->ReadBody();
                     });
  }

  void ReadBody() {
    if (parser_->is_done()) return OnBodyRead();
    Tcp().expires_at(
        std::min(Clock::now() + ToClock(options_.http_body_progress_timeout), body_deadline_));
    http::async_read_some(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnBodySome(ec); });
  }

  void OnBodySome(beast::error_code ec) {
    if (!ec) return ReadBody();
    if (ec == http::error::body_limit || IsMalformed(ec)) {
      const absl::Status status =
          ec == http::error::body_limit
              ? absl::ResourceExhaustedError(TooLargeError(context_.max_body_bytes))
              : absl::InvalidArgumentError(
                    absl::StrCat("malformed HTTP request body: ", ec.message()));
      context_.endpoints->gate().Answer(Rpc::kModelInfer, infer_->start(), status);
      FinishInfer();
      return Write(ErrorReply(ec == http::error::body_limit ? 413 : 400, status.message()),
                   /*body_pending=*/true);
    }
    DropInfer();  // a timeout, the end of the stream, a reset
  }

  // The body was not read to its end and nothing will be answered.
  void DropInfer() {
    context_.endpoints->gate().Abandon();
    FinishInfer();
    Close();
  }

  void OnBodyRead() {
    std::string& body = parser_->get().body();
    infer_->body().swap(body);
    ByteBudget::Reservation& reservation = infer_->reservation();
    const int64_t size = static_cast<int64_t>(infer_->body().size());
    if (reservation.bytes() > size) reservation.Shrink(reservation.bytes() - size);
    keep_alive_ = parser_->get().keep_alive();
    computing_ = true;
    answering_ = true;
    context_.answering.fetch_add(1);
    StartPeek();
    infer_->Start(route_.model, route_.version, FieldOf(parser_->get(), kHeaderLengthField),
                  [self = this->shared_from_this()](absl::Status status) mutable {
                    // Back to the strand, the session moved along: this callback keeps nothing
                    // (the front end's Stop waits for `answering`, then ends the io_context).
                    auto executor = self->stream_.get_executor();
                    net::post(executor, [self = std::move(self), status = std::move(status)] {
                      self->OnInferDone(status);
                    });
                  });
  }

  // While a request computes: one read, to see the client go away. Not when the next
  // request's bytes are already here (pipelined): that read could wait for bytes that will
  // never come, while what is here waits for it.
  void StartPeek() {
    if (buffer_.size() > 0) return;
    peek_pending_ = true;
    Tcp().expires_never();
    stream_.async_read_some(
        buffer_.prepare(kPeekBytes),
        [self = this->shared_from_this()](beast::error_code ec, size_t n) { self->OnPeek(ec, n); });
  }

  void OnPeek(beast::error_code ec, size_t n) {
    peek_pending_ = false;
    buffer_.commit(n);
    if (!LeaveIdle()) return Close();
    if (ec) {
      peer_gone_ = true;
      if (computing_) return infer_->Cancel();  // OnInferDone answers it, and closes
      if (writing_) return;                     // OnWritten closes
      return Close();
    }
    if (computing_ || writing_) return;  // the next request waits in buffer_
    idle_timer_.cancel();
    ReadRequest();
  }

  void OnInferDone(const absl::Status& status) {
    computing_ = false;
    HttpReply reply = infer_->Answer(status);
    if (peer_gone_) {
      FinishInfer();
      return Close();
    }
    Write(std::move(reply), /*body_pending=*/false);
  }

  // The infer call is over: its reservation given back, the call back in the pool.
  void FinishInfer() {
    if (infer_ == nullptr) return;
    infer_->Finish();
    context_.infer_calls->Give(std::move(infer_));
    if (answering_) context_.answering.fetch_sub(1);
    answering_ = false;
  }

  // Writes `reply`; `body_pending`: the request's body was not read, so the connection closes.
  void Write(HttpReply reply, bool body_pending) {
    reply_ = std::move(reply);
    close_after_ = reply_.close || body_pending || !keep_alive_;
    linger_ = body_pending;
    size_t length = reply_.body.size();
    for (absl::string_view part : reply_.binary) length += part.size();
    head_ = absl::StrCat("HTTP/1.1 ", reply_.status, " ", ReasonOf(reply_.status),
                         "\r\nContent-Type: ", reply_.content_type, "\r\nContent-Length: ", length,
                         "\r\n");
    if (reply_.header_length.has_value()) {
      absl::StrAppend(&head_, kHeaderLengthField, ": ", *reply_.header_length, "\r\n");
    }
    for (const auto& [name, value] : reply_.headers) {
      absl::StrAppend(&head_, name, ": ", value, "\r\n");
    }
    if (close_after_) {
      absl::StrAppend(&head_, "Connection: close\r\n");
    } else if (http10_) {
      absl::StrAppend(&head_, "Connection: keep-alive\r\n");
    }
    absl::StrAppend(&head_, "\r\n");
    buffers_.clear();
    buffers_.push_back(net::buffer(head_));
    if (!head_only_) {
      if (!reply_.body.empty()) buffers_.push_back(net::buffer(reply_.body));
      for (absl::string_view part : reply_.binary) {
        if (!part.empty()) buffers_.push_back(net::buffer(part.data(), part.size()));
      }
    }
    writing_ = true;
    write_bytes_ = static_cast<int64_t>(head_.size() + (head_only_ ? 0 : length));
    write_limit_ = SendLimit{options_.http_write_timeout,
                             context_.endpoints->gate().send_limit().min_bytes_per_s}
                       .For(write_bytes_);
    Tcp().expires_after(ToClock(write_limit_));
    net::async_write(
        stream_, buffers_,
        [](const beast::error_code& ec, size_t) -> size_t { return ec ? 0 : kWriteBytes; },
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    if (ec == beast::error::timeout) CountNotTaken();
    FinishInfer();
    reply_ = HttpReply();
    if (ec || peer_gone_) return Close();
    if (close_after_) return linger_ && !peek_pending_ ? Linger() : Close();
    if (peek_pending_) {  // the next request's first byte, within the idle timeout
      EnterIdle();
      idle_timer_.expires_after(ToClock(options_.http_idle_timeout));
      idle_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (!ec && self->peek_pending_) self->Close();
      });
      return;
    }
    ReadRequest();
  }

  // The request's client (client_identity.h), for its share of the budget.
  std::string ClientOf() {
    const ClientIdentity& identity = context_.endpoints->gate().client_identity();
    beast::error_code ec;
    const tcp::endpoint peer = Tcp().socket().remote_endpoint(ec);
    const http::request_header<>& header = parser_->get().base();
    return identity.Of(ec ? "unknown" : peer.address().to_string(),
                       identity.trusts_proxies() ? ForwardedFor(header) : std::string(),
                       FieldOf(header, http::field::authorization));
  }

  // The answer was not taken within its send limit: the connection closes, and the infer's
  // budget is given back.
  void CountNotTaken() {
    beast::error_code ec;
    const tcp::endpoint peer = Tcp().socket().remote_endpoint(ec);
    context_.endpoints->gate().unsent_answers().Count(
        FrontEndKind::kKserveHttp,
        route_.endpoint == Endpoint::kNone ? "HTTP" : RpcName(RpcOf(route_.endpoint)),
        ec ? "unknown" : peer.address().to_string(), write_bytes_, write_limit_);
  }

  // Stops sending, and discards what the client still sends (bounded), before closing: a
  // close with unread bytes would reset the connection, and the client could lose the answer.
  void Linger() {
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    Tcp().expires_after(kLingerTime);
    buffer_.clear();
    Discard();
  }

  void Discard() {
    Tcp().async_read_some(buffer_.prepare(kPeekBytes),
                          [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                            self->lingered_ += static_cast<int64_t>(n);
                            if (ec || self->lingered_ > kLingerBytes) return self->Close();
                            self->Discard();
                          });
  }

  // Idle (http_idle_list.h): waiting for a request's first byte, so that a new connection
  // arriving at http_max_connections may close this one. Idempotent.
  void EnterIdle() {
    if (idle_) return;
    idle_ = true;
    context_.idle.Enter(&idle_node_);
  }

  // No longer idle. Returns false if an eviction took the session first: it must close.
  bool LeaveIdle() {
    if (!idle_) return true;
    idle_ = false;
    return context_.idle.Leave(&idle_node_);
  }

  // HttpIdleList::Member: from the accepting thread; the close runs on the strand.
  void Evict() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    LeaveIdle();
    idle_timer_.cancel();
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    Tcp().close();
  }

  Stream stream_;
  HttpContext& context_;
  const Options& options_;
  net::steady_timer idle_timer_;
  HttpIdleList::Node idle_node_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Route route_;
  std::unique_ptr<HttpInferCall> infer_;  // during an infer call; from the pool
  HttpReply reply_;
  std::string head_;
  std::vector<net::const_buffer> buffers_;
  Clock::time_point header_deadline_;
  Clock::time_point body_deadline_;
  int64_t write_bytes_ = 0;     // the answer being written
  absl::Duration write_limit_;  // and its send limit
  int64_t lingered_ = 0;
  bool first_ = true;        // no request read yet
  bool keep_alive_ = false;  // the current request's
  bool http10_ = false;
  bool head_only_ = false;  // the current request is HEAD: no body in the answer      // the
                            // current request is HTTP/1.0
  bool answering_ = false;  // read and submitted: counted in context_.answering
  bool computing_ = false;  // Submitted, `done` not yet here
  bool peek_pending_ = false;
  bool peer_gone_ = false;
  bool writing_ = false;
  bool close_after_ = false;
  bool linger_ = false;
  bool closed_ = false;
  bool idle_ = false;  // entered in context_.idle (and maybe evicted since)
};

}  // namespace

void StartHttpSession(tcp::socket socket, HttpContext* context) {
  std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), context)
      ->Run();
}

void StartHttpsSession(tcp::socket socket, net::ssl::context* tls, HttpContext* context) {
  std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
      beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls), context)
      ->Run();
}

}  // namespace tensorcompute::server::kserve
