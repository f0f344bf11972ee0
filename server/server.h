// File: server/server.h
//
// tensorcompute-server as a library: builds the gRPC server (message limits, the standard
// health service, reflection) and owns what serves it: the CPU thread pool, the CPU executor,
// the dynamic batcher and the TensorCompute service. main.cc only parses flags, starts one,
// and calls Drain() on SIGTERM/SIGINT. Tests start one in process on 127.0.0.1:0.
//
// Thread-safety: every method may be called from any thread; Drain() is idempotent.

#ifndef TENSORCOMPUTE_SERVER_SERVER_H_
#define TENSORCOMPUTE_SERVER_SERVER_H_

#include <memory>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/server.h"

#include "core/batching/batcher.h"
#include "core/batching/cpu_executor.h"
#include "core/thread_pool.h"
#include "server/compute_service.h"
#include "server/error_log.h"
#include "server/metrics.h"
#include "server/server_options.h"

namespace tensorcompute::server {

class Server {
 public:
  // Starts serving: health reports SERVING once this returns OK. Returns UNAVAILABLE when
  // the address cannot be bound, INVALID_ARGUMENT for inconsistent options.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);

  // Drain(), then releases everything.
  ~Server();

  // The bound port (the chosen one when options.listen asked for port 0).
  int port() const { return port_; }

  // Graceful drain: health turns NOT_SERVING, new RPCs get UNAVAILABLE, every accepted RPC is
  // answered (those still running after drain_timeout are cancelled), then the server stops.
  // Blocks until done. Later calls return at once.
  void Drain();

  // Blocks until Drain() has finished (from another thread).
  void Wait() { drained_.WaitForNotification(); }

  const Metrics& metrics() const { return metrics_; }
  const batching::Batcher& batcher() const { return *batcher_; }
  const ServerOptions& options() const { return options_; }
  // Threads of the CPU executor (options().cpu_threads resolved).
  int cpu_threads() const { return pool_->size(); }

 private:
  explicit Server(const ServerOptions& options);
  void DoDrain();

  const ServerOptions options_;
  Metrics metrics_;
  ErrorLog errors_;
  std::unique_ptr<core::ThreadPool> pool_;
  std::unique_ptr<batching::CpuExecutor> executor_;
  std::unique_ptr<batching::Batcher> batcher_;
  std::unique_ptr<ComputeService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::once_flag drain_once_;
  absl::Notification drained_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_SERVER_H_
