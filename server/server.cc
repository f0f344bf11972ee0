#include "server/server.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

#include "server/prometheus_metrics.h"

namespace tensorcompute::server {
namespace {

int ClampToInt(int64_t value) {
  return static_cast<int>(std::clamp<int64_t>(value, 0, std::numeric_limits<int>::max()));
}

}  // namespace

Server::Server(const ServerOptions& options)
    : options_(options), errors_(options.error_log_per_second) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.max_batch_size < 1 || options.queue_capacity < 1 ||
      options.max_message_bytes < (int64_t{128} << 10) || options.max_queue_delay_us < 0) {
    return absl::InvalidArgumentError(
        "need max_batch_size >= 1, queue_capacity >= 1, max_queue_delay_us >= 0 and "
        "max_message_bytes >= 131072");
  }
  if (options.device != "auto" && options.device != "cpu" && options.device != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be auto, cpu or gpu, not \"", options.device, "\""));
  }
  if (options.max_connection_age < absl::ZeroDuration() ||
      options.max_connection_age_grace < absl::ZeroDuration() ||
      options.drain_notice < absl::ZeroDuration() ||
      options.max_connection_idle < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need max_connection_age, max_connection_age_grace, max_connection_idle and "
        "drain_notice >= 0");
  }
  if (options.max_inflight_bytes < 1 || options.max_concurrent_streams < 1 ||
      options.keepalive_time <= absl::ZeroDuration() ||
      options.keepalive_timeout <= absl::ZeroDuration() ||
      options.keepalive_min_client_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need max_inflight_bytes >= 1, max_concurrent_streams >= 1, keepalive_time and "
        "keepalive_timeout > 0 and keepalive_min_client_interval >= 0");
  }
  if (options.gpu_streams < 1 || options.gpu_streams > 64 ||
      options.gpu_staging_bytes < (int64_t{64} << 10)) {
    return absl::InvalidArgumentError("need 1 <= gpu_streams <= 64 and gpu_staging_bytes >= 65536");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<Server> s(new Server(options));
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuth>> auth = TokenAuth::Create(options.auth_token_file);
    if (!auth.ok()) return auth.status();
    s->auth_ = *std::move(auth);
  }
  s->pool_ = std::make_unique<core::ThreadPool>(options.cpu_threads);
  // Requests are split across the pool only from 4 MiB of output on: below that, waking a
  // second (often sleeping) vCPU costs more than it saves, and concurrent requests keep the
  // other threads busy anyway (measured with rpc_bench, 1 MiB responses at concurrency 1).
  batching::CpuExecutorOptions executor_options;
  executor_options.execute.min_parallel_bytes = int64_t{4} << 20;
  s->executor_ = std::make_unique<batching::CpuExecutor>(s->pool_.get(), executor_options);
  s->metered_cpu_ = std::make_unique<MeteredExecutor>(s->executor_.get());
  if (options.device != "cpu") {
    const absl::Status gpu = s->SetUpGpu();
    if (!gpu.ok()) return gpu;
  }

  batching::BatcherOptions batcher_options;
  batcher_options.max_batch_size = options.max_batch_size;
  batcher_options.max_queue_delay = absl::Microseconds(options.max_queue_delay_us);
  batcher_options.queue_capacity = options.queue_capacity;
  // One batch per pool thread (or GPU stream) in flight: while they are all busy, requests
  // pile up into the next batches instead of waiting in the executor's queues.
  batcher_options.max_inflight_batches =
      s->cuda_executor_ != nullptr ? s->cuda_executor_->slots() : s->pool_->size();
  Metrics* metrics = &s->metrics_;
  batcher_options.on_batch = [metrics](int64_t size) { metrics->CountBatch(size); };
  batching::Executor* executor = s->metered_cpu_.get();
  std::vector<const MeteredExecutor*> metered = {s->metered_cpu_.get()};
  if (s->cuda_executor_ != nullptr) {
    s->metered_gpu_ = std::make_unique<MeteredExecutor>(s->cuda_executor_.get());
    executor = s->metered_gpu_.get();
    metered.insert(metered.begin(), s->metered_gpu_.get());
  }
  s->batcher_ = std::make_unique<batching::Batcher>(batcher_options, executor);

  core::PlanOptions plan_options;
  plan_options.max_output_bytes = options.EffectiveMaxOutputBytes();
  plan_options.max_rank = options.max_rank;
  s->budget_ = std::make_unique<ByteBudget>(options.max_inflight_bytes);
  s->service_ = std::make_unique<ComputeService>(s->batcher_.get(), plan_options, &s->metrics_,
                                                 &s->errors_, s->budget_.get(), s->auth_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &s->port_);
  if (s->auth_ != nullptr) builder.SetOption(WithoutReflection());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->service_.get());
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             ClampToInt(options.max_concurrent_streams));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             ClampToInt(absl::ToInt64Milliseconds(options.keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             ClampToInt(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      ClampToInt(absl::ToInt64Milliseconds(options.keepalive_min_client_interval)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  if (options.max_connection_idle > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               ClampToInt(absl::ToInt64Milliseconds(options.max_connection_idle)));
  }
  if (options.max_connection_age > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               ClampToInt(absl::ToInt64Milliseconds(options.max_connection_age)));
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
        ClampToInt(absl::ToInt64Milliseconds(options.max_connection_age_grace)));
  }
  if (!options.metrics_listen.empty()) {
    // Before the gRPC port opens, so that a bad metrics address fails Start with nothing served.
    auto collector =
        std::make_shared<MetricsCollector>(&s->metrics_, s->batcher_.get(), s->budget_.get(),
                                           std::move(metered), s->device_, s->device_description_);
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
        MetricsEndpoint::Start(options.metrics_listen, std::move(collector));
    if (!endpoint.ok()) return endpoint.status();
    s->metrics_endpoint_ = *std::move(endpoint);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  if (!options.health_listen.empty()) {
    // Plaintext, the standard health service and nothing else (not even reflection).
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(options.health_listen, grpc::InsecureServerCredentials(),
                                    &s->health_port_);
    health_builder.SetOption(WithoutReflection());
    s->health_fallback_ = HealthOnlyFallback();
    health_builder.RegisterCallbackGenericService(s->health_fallback_.get());
    s->health_server_ = health_builder.BuildAndStart();
    if (s->health_server_ == nullptr || s->health_port_ == 0) {
      s->health_server_.reset();
      s->server_->Shutdown();
      s->server_.reset();
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.health_listen, " (health_listen)"));
    }
  }
  // The whole server ("") and the service by name, so that checks naming the service
  // (Kubernetes gRPC probes with `service:`, grpc_health_probe -service) work too.
  {
    // Under the lock, so that a GPU lost meanwhile cannot be overwritten with SERVING.
    absl::MutexLock lock(&s->health_mu_);
    s->health_ = s->server_->GetHealthCheckService();
    if (s->health_server_ != nullptr) {
      s->listener_health_ = s->health_server_->GetHealthCheckService();
    }
    s->SetHealth(!s->gpu_lost_, /*service_too=*/true);
  }
  return s;
}

absl::Status Server::SetUpGpu() {
  absl::Status why;
  if (cuda::CudaDeviceCount() == 0) {
    // The description's error says why: no driver, no device, or no CUDA in this build.
    why = cuda::CudaDeviceDescription(0).status();
    if (why.ok()) why = absl::UnavailableError("no CUDA device is visible");
  } else {
    cuda::CudaExecutorOptions gpu_options;
    gpu_options.devices = options_.gpus;
    gpu_options.streams_per_device = options_.gpu_streams;
    gpu_options.staging_bytes = options_.gpu_staging_bytes;
    gpu_options.fallback = metered_cpu_.get();
    gpu_options.on_device_lost = [this](int ordinal, const absl::Status& error) {
      OnDeviceLost(ordinal, error);
    };
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutor>> gpu =
        cuda::CudaExecutor::Create(gpu_options);
    if (gpu.ok()) {
      cuda_executor_ = *std::move(gpu);
      device_ = std::string(cuda_executor_->name());
      std::vector<int> ordinals = options_.gpus;
      if (ordinals.empty()) {
        for (int i = 0; i < cuda::CudaDeviceCount(); ++i) ordinals.push_back(i);
      }
      std::vector<std::string> descriptions;
      for (int ordinal : ordinals) {
        absl::StatusOr<std::string> description = cuda::CudaDeviceDescription(ordinal);
        descriptions.push_back(description.ok() ? *description
                                                : std::string(description.status().message()));
      }
      device_description_ = absl::StrJoin(descriptions, "; ");
      return absl::OkStatus();
    }
    why = gpu.status();
  }
  if (options_.device == "gpu" || absl::IsInvalidArgument(why)) {
    return absl::Status(
        why.code(), absl::StrCat("--device=", options_.device, ": no usable GPU: ", why.message()));
  }
  spdlog::info("--device=auto: no usable CUDA device ({}); using the CPU",
               std::string(why.message()));
  return absl::OkStatus();
}

void Server::OnDeviceLost(int ordinal, const absl::Status& error) {
  const bool required = options_.device == "gpu";
  spdlog::critical("GPU {} is out of service after a CUDA error ({}); {}", ordinal,
                   std::string(error.message()),
                   required ? "health NOT_SERVING: --device=gpu asked for a GPU, restart the server"
                            : "--device=auto: going on with the other GPUs or the CPU");
  if (!required) return;
  // The health service is thread-safe; the lock only keeps it from going away meanwhile.
  absl::MutexLock lock(&health_mu_);
  gpu_lost_ = true;
  SetHealth(false, /*service_too=*/false);
}

void Server::SetHealth(bool serving, bool service_too) {
  for (grpc::HealthCheckServiceInterface* health : {health_, listener_health_}) {
    if (health == nullptr) continue;
    if (service_too) {
      health->SetServingStatus(v1::TensorCompute::service_full_name(), serving);
    }
    health->SetServingStatus(serving);
  }
}

absl::StatusOr<int> Server::ReloadAuthTokens() {
  if (auth_ == nullptr) {
    return absl::FailedPreconditionError("the server was started without auth_token_file");
  }
  return auth_->Reload();
}

Server::~Server() { Drain(); }

int Server::metrics_port() const {
  return metrics_endpoint_ == nullptr ? 0 : metrics_endpoint_->port();
}

void Server::Drain() {
  absl::call_once(drain_once_, [this] { DoDrain(); });
}

void Server::DoDrain() {
  // Order matters. Refusing new RPCs ourselves (UNAVAILABLE "server is draining") while gRPC
  // still accepts connections, and answering everything queued, must come before
  // grpc::Server::Shutdown: Shutdown cancels calls that arrive before clients see it (they
  // would get CANCELLED, not UNAVAILABLE), and it does not know that queued requests can be
  // answered at once rather than after their batching delay.
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.drain_timeout;
  if (server_ != nullptr) {
    spdlog::info(
        "draining: health NOT_SERVING, refusing new requests, answering {} queued; closing "
        "connections in {} ms",
        batcher_->queue_depth(), absl::ToInt64Milliseconds(options_.drain_notice));
    {
      absl::MutexLock lock(&health_mu_);
      SetHealth(false, /*service_too=*/false);
    }
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
    // The notice period (ServerOptions::drain_notice): clients see NOT_SERVING or UNAVAILABLE
    // and go elsewhere before the connections close.
    const absl::Time notice_end = std::min(start + options_.drain_notice, deadline);
    if (absl::Now() < notice_end) absl::SleepFor(notice_end - absl::Now());
    // Every accepted RPC has called Finish (unless the timeout hit); Shutdown waits for their
    // responses to be sent, cancels what is left at the deadline, and closes the listeners.
    server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
    server_->Wait();
    if (health_server_ != nullptr) {
      health_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
      health_server_->Wait();
    }
    {
      absl::MutexLock lock(&health_mu_);
      health_ = nullptr;
      listener_health_ = nullptr;
    }
    batcher_->WaitIdle(absl::Seconds(5));  // tasks of RPCs cancelled by Shutdown
    spdlog::info("drained: {} requests answered in all", metrics_.requests_total());
  }
  drained_.Notify();
}

}  // namespace tensorcompute::server
