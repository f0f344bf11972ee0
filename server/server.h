// File: server/server.h
//
// tensorcompute-server as a library: builds the gRPC server (builder_options.h: message
// limits and transport settings; the standard health service; reflection) and owns what serves
// it: the CPU thread pool, the CPU executor, the GPU executor when options.device allows one
// and a GPU is found (it falls back to the CPU executor for what it does not serve), the
// dynamic batcher, the in-flight byte budget, the CallGate and the ComputeEntry that every
// front end goes through, the native TensorCompute service, and the front ends it is given
// (front_end.h; tensorcompute-server gives it KServe v2, server/kserve/). main.cc only parses
// flags, starts one, and calls Drain() on SIGTERM/SIGINT. Tests start one in process on
// 127.0.0.1:0.
//
// Security: TLS or mTLS on the main port (credentials.h), bearer tokens checked by the
// CallGate (server/admission/token_auth.h; reflection is then not served), optionally a
// plaintext health-only listener (health_listener.h), whose status is set with the main one's,
// and the shard router's credentials for its peers (a token, server/admission/peer_token.h;
// TLS or mTLS, credentials.h).
//
// A GPU taken out of service by a sticky CUDA error is logged; with device "gpu" health then
// turns NOT_SERVING for good (only a new process can use the GPU again, so the orchestrator
// should replace this one), with "auto" the server goes on serving from what is left.
//
// Thread-safety: every method may be called from any thread; Drain() is idempotent.

#ifndef TENSORCOMPUTE_SERVER_SERVER_H_
#define TENSORCOMPUTE_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#include "server/admission/error_log.h"
#include "server/front_end.h"
#include "server/metrics/metrics.h"
#include "server/server_options.h"

// Only named here (held by pointer, or returned by reference): a file that uses one includes
// its header, so that including server.h costs little (it is in every server and client test).
namespace grpc {
class HealthCheckServiceInterface;
class Server;
class ServerCredentials;
}  // namespace grpc
namespace tensorcompute::batching {
class Batcher;
class CpuExecutor;
class TableLeaseExecutor;
}  // namespace tensorcompute::batching
namespace tensorcompute::core {
class TensorRegistry;
class ThreadPool;
struct DeviceCopy;
class Tensor;
}  // namespace tensorcompute::core
namespace tensorcompute::cuda {
class CudaExecutor;
}  // namespace tensorcompute::cuda

namespace tensorcompute::server {

class ByteBudget;       // server/admission/byte_budget.h
class GpuStageMetrics;  // server/metrics/gpu_stage_metrics.h
class GrpcAcceptor;     // grpc_acceptor.h
class HealthListener;   // health_listener.h
class MemoryTrimmer;    // memory_trimmer.h
class MeteredExecutor;  // server/metrics/metered_executor.h
class ShardRouter;      // server/compute/shard_router.h
class ShardUpdater;     // server/compute/shard_updater.h
class NativeService;    // server/native/native_service.h
class PeerToken;        // server/admission/peer_token.h
class TokenAuth;        // server/admission/token_auth.h
class UploadBudget;     // server/admission/upload_budget.h
class MetricsEndpoint;  // prometheus_metrics.h

class Server {
 public:
  // Starts serving, with the front ends `front_ends` make beside the native service: health
  // reports SERVING once this returns OK. Returns UNAVAILABLE when an address cannot be bound
  // or device "gpu" finds no usable GPU, UNIMPLEMENTED for device "gpu" in a build without
  // CUDA, INVALID_ARGUMENT for inconsistent options (ServerOptions::Validate) or unreadable
  // security files, and a front end's own errors.
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options, const std::vector<FrontEndFactory>& front_ends = {});

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

  // The Prometheus endpoint's port; 0 when options.metrics_listen is empty.
  int metrics_port() const;

  // The plaintext health-only listener's port; 0 when options.health_listen is empty.
  int health_port() const;

  // The front ends' named ports (FrontEnd::Ports), in order.
  std::vector<std::pair<std::string, int>> front_end_ports() const;

  // Re-reads options.auth_token_file, admin_token_file and shard_peer_token_file, in that
  // order: returns how many tokens are now accepted, or the first error (that file's old tokens
  // stay, and the files after it are not re-read).
  // FAILED_PRECONDITION when the server was started without any of them.
  absl::StatusOr<int> ReloadAuthTokens();

  const Metrics& metrics() const { return metrics_; }
  // Resident tensors (PutTensor, --preload).
  core::TensorRegistry& registry();
  // The max_inflight_bytes budget and what is reserved of it.
  const ByteBudget& inflight_budget() const;
  // The max_upload_bytes share of uploads in progress.
  const UploadBudget& upload_budget() const;
  const batching::Batcher& batcher() const;
  const ServerOptions& options() const { return options_; }
  // Threads of the CPU executor (options().cpu_threads resolved).
  int cpu_threads() const;
  // Where gathers run: "cpu", or the GPU executor's name ("cuda:0", "cuda:0,1").
  const std::string& device() const { return device_; }
  // "cpu", or each GPU's description ("NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)"), '; '-joined.
  const std::string& device_description() const { return device_description_; }

 private:
  explicit Server(const ServerOptions& options);
  // The steps of Start, in order.
  absl::Status LoadTokens();
  absl::Status SetUpCompute();
  absl::Status StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials,
                         const std::vector<FrontEndFactory>& front_ends);
  absl::Status StartSideListeners();
  absl::Status BecomeReady();
  // Makes cuda_executor_ as options_.device asks; OK with no GPU executor for "auto" when
  // none can be had (logged), the reason otherwise.
  absl::Status SetUpGpu();
  void OnDeviceLost(int ordinal, const absl::Status& error);
  // Where a resident tensor goes for a PutTensor's `device` ("" = this server's default).
  absl::StatusOr<core::DeviceCopy> PlaceTensor(const std::string& device,
                                               const core::Tensor& tensor) const;
  // The CUDA ordinals this server uses (options_.gpus, or every visible one).
  std::vector<int> GpuOrdinals() const;
  void DoDrain();
  // Sets the main server's and the health listener's health to `serving`: with `service_too`
  // the TensorCompute service's entry as well as the whole server's (""), else every entry.
  void SetHealth(bool serving, bool service_too) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);

  // Declared in the order they are made; destroyed in reverse, so that nothing goes before what
  // uses it.
  const ServerOptions options_;
  Metrics metrics_;
  ErrorLog errors_;
  std::unique_ptr<TokenAuth> auth_;   // options.auth_token_file's tokens; null without one
  std::unique_ptr<TokenAuth> admin_;  // options.admin_token_file's; null without one
  // options.shard_peer_token_file's token, sent by router_; null without one.
  std::unique_ptr<PeerToken> peer_token_;
  std::unique_ptr<core::TensorRegistry> registry_;
  std::unique_ptr<MemoryTrimmer> trimmer_;  // null when options.malloc_trim_interval is 0
  std::unique_ptr<core::ThreadPool> pool_;
  // Where the batches of lookups on tables on disk wait for their rows (TableLeaseExecutor's
  // offload): one thread per batch in flight.
  std::unique_ptr<core::ThreadPool> disk_pool_;
  std::unique_ptr<batching::CpuExecutor> executor_;
  // executor_ with its time counted; what the batcher and the GPU executor (as its fallback)
  // are given.
  std::unique_ptr<MeteredExecutor> metered_cpu_;
  std::string device_ = "cpu";
  std::string device_description_ = "cpu";
  // The health services, for OnDeviceLost (called on a GPU worker thread); null before the
  // gRPC servers are built and after they stopped. Declared before cuda_executor_, which calls
  // OnDeviceLost until it is destroyed.
  absl::Mutex health_mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
  // The same for the health-only listener (options.health_listen), which mirrors health_.
  grpc::HealthCheckServiceInterface* listener_health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
  bool gpu_lost_ ABSL_GUARDED_BY(health_mu_) = false;  // with device "gpu": stay NOT_SERVING
  // Destroyed after the batcher (which hands it batches) and before the CPU executor and pool
  // (its fallback).
  // Before the executor that reports to it, so that it outlives the executor's workers.
  std::unique_ptr<GpuStageMetrics> gpu_stages_;
  std::unique_ptr<cuda::CudaExecutor> cuda_executor_;
  std::unique_ptr<MeteredExecutor> metered_gpu_;  // cuda_executor_ counted, when there is one
  // What the batcher runs on: the executor above with its batches' table leases taken.
  std::unique_ptr<batching::TableLeaseExecutor> leased_;
  std::unique_ptr<batching::Batcher> batcher_;
  std::unique_ptr<ByteBudget> budget_;     // max_inflight_bytes
  std::unique_ptr<UploadBudget> uploads_;  // max_upload_bytes
  std::unique_ptr<CallGate> gate_;
  std::unique_ptr<ComputeEntry> compute_;
  std::unique_ptr<ShardRouter> router_;    // lookups on sharded tables
  std::unique_ptr<ShardUpdater> updater_;  // updates of sharded tables
  std::unique_ptr<NativeService> service_;
  std::vector<std::unique_ptr<FrontEnd>> front_ends_;
  std::atomic<bool> ready_{false};  // what health says (SetHealth)
  bool started_ = false;            // Start returned OK
  // Destroyed first: each stops serving before anything it uses goes away.
  std::unique_ptr<grpc::Server> server_;
  // options.listen's sockets; it hands their connections to server_. Destroyed before it.
  std::unique_ptr<GrpcAcceptor> acceptor_;
  int port_ = 0;
  std::unique_ptr<HealthListener> health_listener_;  // options.health_listen's; may be null
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  absl::once_flag drain_once_;
  absl::Notification drained_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_SERVER_H_
