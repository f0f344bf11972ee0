// File: server/grpc_acceptor.h
//
// The listening sockets of a grpc::Server (the main port, and the health-only port), accepted
// here and each connection handed to gRPC (ServerBuilder's external connection acceptor), rather
// than left to gRPC's own listener. Why: gRPC 1.51 (Debian 12) closes its acceptor for good the
// first time accept() fails with EMFILE ("Failed accept4: Too many open files"), so a client
// that opens as many connections as the server has descriptors takes the port down until a
// restart, while connections already open go on working and the health checks on them still
// say SERVING. This one
//   - retries a failed accept (out of descriptors, or of kernel memory) 50 ms later, for ever;
//   - keeps `descriptor_reserve` descriptors free for the rest of the server (resident tables'
//     files, the HTTP front end, TLS files re-read on SIGHUP, metrics scrapes): a connection
//     that arrives when fewer are free is closed at once, counted (`on_refused`) and logged at
//     most once a minute. Idle connections that never finish their handshake are closed by
//     gRPC after the handshake timeout, which gives their descriptors back.
// Descriptors are counted from /proc/self/fd (descriptor_headroom.h), so those held by
// anything in the process count, not only this listener's connections.
//
// Addresses are bound as gRPC binds them: "host:port" or "[v6]:port"; an empty host, 0.0.0.0 or
// :: is every interface, IPv6 and IPv4 (one dual-stack socket where the kernel has IPv6); a name
// is every address it resolves to, on one port; port 0 picks one.
//
// Thread-safety: Listen, AddTo, Start and Stop from one thread; port() from any.

#ifndef TENSORCOMPUTE_SERVER_GRPC_ACCEPTOR_H_
#define TENSORCOMPUTE_SERVER_GRPC_ACCEPTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

#include "server/descriptor_headroom.h"

namespace tensorcompute::server {

class GrpcAcceptor {
 public:
  struct Options {
    // The flag that named the address, for errors ("listen", "health_listen").
    std::string flag = "listen";
    // Descriptors left free for the rest of the process (ServerOptions::descriptor_reserve).
    int descriptor_reserve = 128;
    // A connection was closed at once for lack of free descriptors. May be empty.
    std::function<void()> on_refused;
  };

  // Binds `address` and listens; nothing is accepted before Start. UNAVAILABLE "cannot listen
  // on ADDRESS (FLAG): WHY" when no address can be bound, INVALID_ARGUMENT when it is not
  // host:port.
  static absl::StatusOr<std::unique_ptr<GrpcAcceptor>> Listen(const std::string& address,
                                                              Options options);

  // Stop().
  ~GrpcAcceptor();

  GrpcAcceptor(const GrpcAcceptor&) = delete;
  GrpcAcceptor& operator=(const GrpcAcceptor&) = delete;

  // Registers the connections with `builder`, served with `credentials`. Call once, before the
  // builder's BuildAndStart.
  void AddTo(grpc::ServerBuilder* builder, std::shared_ptr<grpc::ServerCredentials> credentials);

  // Starts accepting. REQUIRES: AddTo's builder has built and started its server (gRPC drops,
  // without closing them, connections handed to a server not yet started or shut down).
  void Start();

  // Stops accepting and closes the listening sockets (connections queued in the kernel are
  // reset); waits for the accepting thread. Call before the server's Shutdown. Idempotent.
  void Stop();

  // The port bound (the one picked, for port 0).
  int port() const { return port_; }

 private:
  GrpcAcceptor(Options options, std::vector<int> sockets, int port);

  void Run();
  // Accepts everything queued on `socket`; false when it must wait (out of descriptors).
  bool AcceptQueued(int socket);
  // Waits up to `ms` for Stop; true when stopping.
  bool WaitForStop(int ms);

  Options options_;
  std::vector<int> sockets_;  // listening
  int port_ = 0;
  int wake_ = -1;                // an eventfd: Stop writes it
  DescriptorHeadroom headroom_;  // the accepting thread's, as are the three below
  absl::Time last_failure_logged_ = absl::InfinitePast();
  absl::Time last_refusal_logged_ = absl::InfinitePast();
  int64_t refused_since_log_ = 0;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_GRPC_ACCEPTOR_H_
