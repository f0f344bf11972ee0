// File: server/health_listener.h
//
// The plaintext health-only listener (ServerOptions::health_listen): a second grpc::Server that
// serves grpc.health.v1 and nothing else (no reflection; any other method is answered
// UNIMPLEMENTED), for probes that cannot speak TLS or present tokens (Kubernetes gRPC probes).
// Server sets its health together with the main server's.
//
// Thread-safety: health() may be used from any thread until Shutdown; Start and Shutdown from
// one thread.

#ifndef TENSORCOMPUTE_SERVER_HEALTH_LISTENER_H_
#define TENSORCOMPUTE_SERVER_HEALTH_LISTENER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"

#include "server/grpc_acceptor.h"

namespace tensorcompute::server {

class HealthListener {
 public:
  // Listens on `address` ("host:port"; port 0 picks one) through a GrpcAcceptor that leaves
  // `descriptor_reserve` descriptors free. UNAVAILABLE "cannot listen on ADDRESS
  // (health_listen): WHY" when it cannot be bound. REQUIRES: gRPC's default health service is
  // enabled (grpc::EnableDefaultHealthCheckService(true)).
  static absl::StatusOr<std::unique_ptr<HealthListener>> Start(const std::string& address,
                                                               int descriptor_reserve);

  // Shutdown().
  ~HealthListener();

  int port() const { return port_; }
  grpc::HealthCheckServiceInterface* health() { return server_->GetHealthCheckService(); }

  // Stops serving (calls in flight get a second) and waits. Idempotent.
  void Shutdown();

 private:
  HealthListener() = default;

  std::unique_ptr<grpc::CallbackGenericService> fallback_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAcceptor> acceptor_;  // hands its connections to server_
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_HEALTH_LISTENER_H_
