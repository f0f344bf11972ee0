#include "server/grpc_acceptor.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tensorcompute::server {
namespace {

constexpr int kRetryAfterMs = 50;  // after an accept that failed for lack of resources

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

absl::StatusOr<HostPort> ParseHostPort(const std::string& address, const std::string& flag) {
  const size_t colon = address.rfind(':');
  HostPort parsed;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &parsed.port) ||
      parsed.port < 0 || parsed.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", address, "' is not host:port (or [v6]:port)"));
  }
  parsed.host = address.substr(0, colon);
  if (parsed.host.size() >= 2 && parsed.host.front() == '[' && parsed.host.back() == ']') {
    parsed.host = parsed.host.substr(1, parsed.host.size() - 2);
  }
  return parsed;
}

int PortOf(int socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(socket, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// A listening socket bound to `address`, or -1 with errno set. `dual_stack`: an IPv6 socket
// that takes IPv4 too (the wildcard); other IPv6 sockets are IPv6 only, so that a name's IPv4
// and IPv6 addresses can share a port.
int ListenOn(const sockaddr* address, socklen_t length, bool dual_stack) {
  const int fd = socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int on = 1;
  const int v6_only = dual_stack ? 0 : 1;
  // TCP_NODELAY is inherited by the accepted connections, as gRPC's own listener sets it.
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) != 0 ||
      (address->sa_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only)) != 0) ||
      bind(fd, address, length) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// The wildcard: one dual-stack IPv6 socket, or IPv4 alone where the kernel has no IPv6.
absl::StatusOr<std::vector<int>> ListenEverywhere(int port) {
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr = in6addr_any;
  v6.sin6_port = htons(static_cast<uint16_t>(port));
  int fd = ListenOn(reinterpret_cast<const sockaddr*>(&v6), sizeof(v6), /*dual_stack=*/true);
  if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL)) {
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_addr.s_addr = htonl(INADDR_ANY);
    v4.sin_port = htons(static_cast<uint16_t>(port));
    fd = ListenOn(reinterpret_cast<const sockaddr*>(&v4), sizeof(v4), /*dual_stack=*/false);
  }
  if (fd < 0) return absl::UnavailableError(std::strerror(errno));
  return std::vector<int>{fd};
}

// Every address `host` resolves to, on one port (the first one's, when `port` is 0). An address
// that cannot be bound is skipped (a name may resolve to ::1 on a host without IPv6) unless
// none can be.
absl::StatusOr<std::vector<int>> ListenOnName(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return absl::UnavailableError(gai_strerror(rc));
  std::vector<int> sockets;
  std::string error = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, a->ai_addr, a->ai_addrlen);
    if (!sockets.empty() && port == 0) {  // the port the first one picked
      const auto picked = htons(static_cast<uint16_t>(PortOf(sockets.front())));
      if (a->ai_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = picked;
      } else {
        reinterpret_cast<sockaddr_in*>(&address)->sin_port = picked;
      }
    }
    const int fd = ListenOn(reinterpret_cast<const sockaddr*>(&address), a->ai_addrlen,
                            /*dual_stack=*/false);
    if (fd >= 0) {
      sockets.push_back(fd);
    } else {
      error = std::strerror(errno);
    }
  }
  freeaddrinfo(found);
  if (sockets.empty()) return absl::UnavailableError(error);
  return sockets;
}

bool OutOfResources(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcAcceptor>> GrpcAcceptor::Listen(const std::string& address,
                                                                   Options options) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address, options.flag);
  if (!parsed.ok()) return parsed.status();
  const bool everywhere = parsed->host.empty() || parsed->host == "0.0.0.0" || parsed->host == "::";
  absl::StatusOr<std::vector<int>> sockets =
      everywhere ? ListenEverywhere(parsed->port) : ListenOnName(parsed->host, parsed->port);
  if (!sockets.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, " (", options.flag,
                                               "): ", sockets.status().message()));
  }
  const int port = PortOf(sockets->front());
  return std::unique_ptr<GrpcAcceptor>(
      new GrpcAcceptor(std::move(options), *std::move(sockets), port));
}

GrpcAcceptor::GrpcAcceptor(Options options, std::vector<int> sockets, int port)
    : options_(std::move(options)),
      sockets_(std::move(sockets)),
      port_(port),
      wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      headroom_(options_.descriptor_reserve) {}

GrpcAcceptor::~GrpcAcceptor() {
  Stop();
  if (wake_ >= 0) close(wake_);
}

void GrpcAcceptor::AddTo(grpc::ServerBuilder* builder,
                         std::shared_ptr<grpc::ServerCredentials> credentials) {
  acceptor_ = builder->experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
}

void GrpcAcceptor::Start() {
  thread_ = std::thread([this] { Run(); });
}

void GrpcAcceptor::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    // An eventfd write of 8 bytes cannot be short; it fails only when the counter would overflow.
    [[maybe_unused]] const ssize_t written = write(wake_, &one, sizeof(one));
    thread_.join();
  }
  for (const int fd : sockets_) close(fd);
  sockets_.clear();
}

bool GrpcAcceptor::WaitForStop(int ms) {
  pollfd wake{wake_, POLLIN, 0};
  return poll(&wake, 1, ms) > 0;
}

void GrpcAcceptor::Run() {
  std::vector<pollfd> watched;
  for (const int fd : sockets_) watched.push_back({fd, POLLIN, 0});
  watched.push_back({wake_, POLLIN, 0});
  for (;;) {
    if (poll(watched.data(), watched.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("{}: poll failed ({}); retrying", options_.flag, std::strerror(errno));
      if (WaitForStop(kRetryAfterMs)) return;
      continue;
    }
    if (watched.back().revents != 0) return;  // Stop
    for (size_t i = 0; i + 1 < watched.size(); ++i) {
      if (watched[i].revents == 0) continue;
      // Out of descriptors the connection stays queued in the kernel and the socket readable:
      // wait rather than spin, then try again.
      if (!AcceptQueued(watched[i].fd) && WaitForStop(kRetryAfterMs)) return;
    }
  }
}

bool GrpcAcceptor::AcceptQueued(int socket) {
  // Refusals are logged at most once a minute (a flood would log a line per connection).
  static constexpr absl::Duration kLogEvery = absl::Minutes(1);
  for (;;) {
    const int fd = accept4(socket, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return true;
      const absl::Time now = absl::Now();
      if (now - last_failure_logged_ >= kLogEvery) {
        last_failure_logged_ = now;
        spdlog::warn("{}: accept failed ({}); retrying every {} ms{}", options_.flag,
                     std::strerror(error), kRetryAfterMs,
                     OutOfResources(error) ? " until descriptors or memory are given back" : "");
      }
      return false;
    }
    if (!headroom_.Admit()) {
      close(fd);
      if (options_.on_refused) options_.on_refused();
      ++refused_since_log_;
      const absl::Time now = absl::Now();
      if (now - last_refusal_logged_ >= kLogEvery) {
        last_refusal_logged_ = now;
        spdlog::warn(
            "{}: {} connection(s) closed at once: fewer than --descriptor_reserve={} file "
            "descriptors were free (the soft limit is {}; see `ulimit -n`)",
            options_.flag, refused_since_log_, options_.descriptor_reserve, DescriptorLimit());
        refused_since_log_ = 0;
      }
      continue;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
    connection.listener_fd = socket;
    connection.fd = fd;  // gRPC owns it from here
    acceptor_->HandleNewConnection(&connection);
  }
}

}  // namespace tensorcompute::server
