#include "server/kserve/http_front_end.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "core/status_macros.h"
#include "server/kserve/http_endpoints.h"
#include "server/kserve/http_infer_call.h"
#include "server/kserve/http_session.h"

namespace tensorcompute::server::kserve {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// The TLS context of `server`'s files: TLS 1.2 and later; with tls_client_ca, client
// certificates signed by it are required.
absl::StatusOr<std::unique_ptr<net::ssl::context>> MakeTlsContext(const ServerOptions& server) {
  auto tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                   net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                   net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
  boost::system::error_code ec;
  tls->use_certificate_chain_file(server.tls_cert, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load tls_cert ", server.tls_cert, ": ", ec.message()));
  }
  tls->use_private_key_file(server.tls_key, net::ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load tls_key ", server.tls_key, ": ", ec.message()));
  }
  if (!server.tls_client_ca.empty()) {
    tls->load_verify_file(server.tls_client_ca, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load tls_client_ca ", server.tls_client_ca, ": ", ec.message()));
    }
    tls->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
  }
  return tls;
}

}  // namespace

// Declared in the order of destruction that the sessions need: the io_context (whose pending
// handlers hold the sessions) goes before the context, endpoints and TLS context they use.
struct HttpFrontEnd::State {
  State(const Options& options, CallGate* gate, ComputeEntry* compute, std::function<bool()> ready)
      : endpoints(gate, compute, std::move(ready)),
        infer_calls(gate, compute, std::max(1, options.http_threads)),
        metrics(&gate->metrics()),
        ios(MakeIoContexts(options.http_threads)),
        acceptor(*ios.front()),
        retry(*ios.front()) {}

  // One io_context per I/O thread (Asio's "io_context per CPU"): all of a connection's
  // handlers run on the thread of the io_context it was given at accept, so that a handler posted
  // by another (its write's next part, a read, the answer from compute) never wakes an idle I/O
  // thread to run it. With one io_context for all threads, every posted handler woke one: at 1 MiB
  // answers, 160 futex calls and 75 context switches per request, and half the requests per second.
  static std::vector<std::unique_ptr<net::io_context>> MakeIoContexts(int threads) {
    std::vector<std::unique_ptr<net::io_context>> ios;
    for (int i = 0; i < std::max(1, threads); ++i) {
      ios.push_back(std::make_unique<net::io_context>(1));
    }
    return ios;
  }

  void Accept();
  void OnAccept(boost::system::error_code ec, tcp::socket socket);

  HttpEndpoints endpoints;
  HttpInferCallPool infer_calls;
  HttpContext context;
  Metrics* metrics;
  std::unique_ptr<net::ssl::context> tls;             // null: plaintext
  std::vector<std::unique_ptr<net::io_context>> ios;  // the acceptor's is the first
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
  size_t next_io = 0;  // who gets the next connection; only Accept, on the first one's thread
  tcp::acceptor acceptor;
  net::steady_timer retry;  // after a failed accept (out of file descriptors)
};

void HttpFrontEnd::State::Accept() {
  net::io_context& io = *ios[next_io];
  next_io = (next_io + 1) % ios.size();
  acceptor.async_accept(net::make_strand(io),
                        [this](boost::system::error_code ec, tcp::socket socket) {
                          OnAccept(ec, std::move(socket));
                        });
}

void HttpFrontEnd::State::OnAccept(boost::system::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {  // e.g. EMFILE: try again shortly rather than spin
    // Out of descriptors, an idle connection gives its own back (the rule of the limit,
    // below), and the next accept comes soon; else wait for a timeout or a client to leave.
    const bool out_of_files = ec == net::error::no_descriptors || ec.value() == ENFILE;
    const bool evicted = out_of_files && context.idle.EvictOldest();
    if (evicted) metrics->CountIdleConnectionClosed();
    retry.expires_after(std::chrono::milliseconds(evicted ? 5 : 50));
    retry.async_wait([this](boost::system::error_code wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  // At the limit, the connection idle longest makes room (http_idle_list.h); it counts itself
  // out once closed on its strand, so the count may pass the limit by the connections being
  // closed.
  bool admit = context.connections.load() < context.options.http_max_connections;
  if (!admit && context.idle.EvictOldest()) {
    metrics->CountIdleConnectionClosed();
    admit = true;
  }
  if (!admit) {
    metrics->CountRejectedConnection();
    boost::system::error_code ignored;
    socket.close(ignored);
  } else {
    context.connections.fetch_add(1);
    if (tls != nullptr) {
      StartHttpsSession(std::move(socket), tls.get(), &context);
    } else {
      StartHttpSession(std::move(socket), &context);
    }
  }
  Accept();
}

HttpFrontEnd::HttpFrontEnd() = default;

absl::StatusOr<std::unique_ptr<HttpFrontEnd>> HttpFrontEnd::Start(const Options& options,
                                                                  const ServerOptions& server,
                                                                  CallGate* gate,
                                                                  ComputeEntry* compute,
                                                                  std::function<bool()> ready) {
  TC_RETURN_IF_ERROR(options.Validate());
  const size_t colon = options.http_listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(options.http_listen).substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_listen '", options.http_listen, "' is not host:port"));
  }
  std::string host = options.http_listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<HttpFrontEnd> http(new HttpFrontEnd());
  http->state_ = std::make_unique<State>(options, gate, compute, std::move(ready));
  State& state = *http->state_;
  state.context.options = options;
  state.context.max_body_bytes = server.max_message_bytes;
  state.context.endpoints = &state.endpoints;
  state.context.infer_calls = &state.infer_calls;
  if (!server.tls_cert.empty()) {
    TC_ASSIGN_OR_RETURN(state.tls, MakeTlsContext(server));
  }
  const auto cannot_listen = [&options](const boost::system::error_code& ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.http_listen, " (http_listen): ", ec.message()));
  };
  boost::system::error_code ec;
  tcp::resolver resolver(*state.ios.front());
  const tcp::resolver::results_type endpoints = resolver.resolve(
      host.empty() ? "0.0.0.0" : host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return cannot_listen(ec);
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  state.acceptor.open(endpoint.protocol(), ec);
  if (!ec) state.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) state.acceptor.bind(endpoint, ec);
  if (!ec) state.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return cannot_listen(ec);
  http->port_ = state.acceptor.local_endpoint().port();
  for (const std::unique_ptr<net::io_context>& io : state.ios) {
    state.work.push_back(net::make_work_guard(*io));
  }
  state.Accept();
  for (const std::unique_ptr<net::io_context>& io : state.ios) {
    http->threads_.emplace_back([io = io.get()] { io->run(); });
  }
  return http;
}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

void HttpFrontEnd::Stop() {
  if (threads_.empty()) return;
  State& state = *state_;
  absl::Notification closed;
  net::post(*state.ios.front(), [&state, &closed] {
    boost::system::error_code ignored;
    state.acceptor.close(ignored);
    state.retry.cancel();
    closed.Notify();
  });
  closed.WaitForNotification();
  // The server drains compute before it stops front ends: what is left is answers being
  // written, each bounded by the write timeout.
  const absl::Time give_up = absl::Now() + state.context.options.http_write_timeout;
  while (state.context.answering.load() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  state.work.clear();
  for (const std::unique_ptr<net::io_context>& io : state.ios) io->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

}  // namespace tensorcompute::server::kserve
