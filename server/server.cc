#include "server/server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace tensorcompute::server {

Server::Server(const ServerOptions& options)
    : options_(options), errors_(options.error_log_per_second) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.max_batch_size < 1 || options.queue_capacity < 1 ||
      options.max_message_bytes < (int64_t{128} << 10) || options.max_queue_delay_us < 0) {
    return absl::InvalidArgumentError(
        "need max_batch_size >= 1, queue_capacity >= 1, max_queue_delay_us >= 0 and "
        "max_message_bytes >= 131072");
  }
  std::unique_ptr<Server> s(new Server(options));
  s->pool_ = std::make_unique<core::ThreadPool>(options.cpu_threads);
  // Requests are split across the pool only from 4 MiB of output on: below that, waking a
  // second (often sleeping) vCPU costs more than it saves, and concurrent requests keep the
  // other threads busy anyway (measured with rpc_bench, 1 MiB responses at concurrency 1).
  batching::CpuExecutorOptions executor_options;
  executor_options.execute.min_parallel_bytes = int64_t{4} << 20;
  s->executor_ = std::make_unique<batching::CpuExecutor>(s->pool_.get(), executor_options);

  batching::BatcherOptions batcher_options;
  batcher_options.max_batch_size = options.max_batch_size;
  batcher_options.max_queue_delay = absl::Microseconds(options.max_queue_delay_us);
  batcher_options.queue_capacity = options.queue_capacity;
  // One batch per pool thread in flight: while they are all busy, requests pile up into the
  // next batches instead of waiting in the pool's queue.
  batcher_options.max_inflight_batches = s->pool_->size();
  Metrics* metrics = &s->metrics_;
  batcher_options.on_batch = [metrics](int64_t size) { metrics->CountBatch(size); };
  s->batcher_ = std::make_unique<batching::Batcher>(batcher_options, s->executor_.get());

  core::PlanOptions plan_options;
  plan_options.max_output_bytes = options.EffectiveMaxOutputBytes();
  plan_options.max_rank = options.max_rank;
  s->service_ =
      std::make_unique<ComputeService>(s->batcher_.get(), plan_options, &s->metrics_, &s->errors_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &s->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  // The whole server ("") and the service by name, so that checks naming the service
  // (Kubernetes gRPC probes with `service:`, grpc_health_probe -service) work too.
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  health->SetServingStatus(v1::TensorCompute::service_full_name(), true);
  health->SetServingStatus(true);
  return s;
}

Server::~Server() { Drain(); }

void Server::Drain() {
  absl::call_once(drain_once_, [this] { DoDrain(); });
}

void Server::DoDrain() {
  // Order matters. Refusing new RPCs ourselves (UNAVAILABLE "server is draining") while gRPC
  // still accepts connections, and answering everything queued, must come before
  // grpc::Server::Shutdown: Shutdown cancels calls that arrive before clients see it (they
  // would get CANCELLED, not UNAVAILABLE), and it does not know that queued requests can be
  // answered at once rather than after their batching delay.
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  if (server_ != nullptr) {
    spdlog::info("draining: health NOT_SERVING, refusing new requests, answering {} queued",
                 batcher_->queue_depth());
    server_->GetHealthCheckService()->SetServingStatus(false);
    service_->StartDraining();
  }
  if (batcher_ != nullptr) {
    batcher_->Stop();  // dispatches everything queued without waiting for batches to fill
    if (!batcher_->WaitIdle(deadline - absl::Now())) {
      spdlog::warn("drain timeout: cancelling {} queued requests and those still running",
                   batcher_->queue_depth());
    }
  }
  if (server_ != nullptr) {
    // Every accepted RPC has called Finish (unless the timeout hit); Shutdown waits for their
    // responses to be sent, cancels what is left at the deadline, and closes the listeners.
    server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
    server_->Wait();
    batcher_->WaitIdle(absl::Seconds(5));  // tasks of RPCs cancelled by Shutdown
    spdlog::info("drained: {} requests answered in all", metrics_.requests_total());
  }
  drained_.Notify();
}

}  // namespace tensorcompute::server
