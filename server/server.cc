#include "server/server.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/npy_format.h"
#include "server/kserve_http.h"
#include "server/prometheus_metrics.h"

namespace tensorcompute::server {
namespace {

int ClampToInt(int64_t value) {
  return static_cast<int>(std::clamp<int64_t>(value, 0, std::numeric_limits<int>::max()));
}

// Lowers the calling thread's priority to `nice` (see ServerOptions::compute_nice). On Linux,
// setpriority(PRIO_PROCESS, tid) applies to that one thread. Raising one's own nice value needs
// no privilege; a failure (some sandbox) only costs the front end its priority, so it is logged.
void LowerThreadPriority(int nice) {
  if (nice == 0) return;
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, nice) != 0) {
    spdlog::warn("compute_nice: setpriority({}) failed: {}", nice, std::strerror(errno));
  }
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
      options.stream_window_bytes < 0 || options.keepalive_time <= absl::ZeroDuration() ||
      options.keepalive_timeout <= absl::ZeroDuration() ||
      options.keepalive_min_client_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need max_inflight_bytes >= 1, max_concurrent_streams >= 1, stream_window_bytes >= 0, "
        "keepalive_time and "
        "keepalive_timeout > 0 and keepalive_min_client_interval >= 0");
  }
  if (options.compute_nice < 0 || options.compute_nice > 19 ||
      options.malloc_trim_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("need 0 <= compute_nice <= 19 and malloc_trim_interval >= 0");
  }
  if (options.gpu_streams < 1 || options.gpu_streams > 64 ||
      options.gpu_staging_bytes < (int64_t{64} << 10)) {
    return absl::InvalidArgumentError("need 1 <= gpu_streams <= 64 and gpu_staging_bytes >= 65536");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  // spdlog makes its default logger on the first log call. Make it here, before this server
  // starts a thread that logs, so that it is made once, on this thread, before every use. (Else
  // the first request's thread made it while another read it; correct in C++, but the fast
  // path of the function-local static is inside Debian's uninstrumented libspdlog.so, so
  // ThreadSanitizer cannot see the ordering and reports a race. main.cc configures spdlog
  // before Start anyway; in-process test servers did not.)
  spdlog::default_logger_raw();
  std::unique_ptr<Server> s(new Server(options));
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuth>> auth = TokenAuth::Create(options.auth_token_file);
    if (!auth.ok()) return auth.status();
    s->auth_ = *std::move(auth);
  }
  if (!options.admin_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuth>> admin = TokenAuth::Create(options.admin_token_file);
    if (!admin.ok()) return admin.status();
    s->admin_ = *std::move(admin);
  }
  if (options.max_resident_bytes < 1) {
    return absl::InvalidArgumentError("need max_resident_bytes >= 1");
  }
  s->registry_ = std::make_unique<core::TensorRegistry>(options.max_resident_bytes);
  if (options.malloc_trim_interval > absl::ZeroDuration()) {
    s->trimmer_ = std::make_unique<MemoryTrimmer>(options.malloc_trim_interval);
  }
  s->pool_ = std::make_unique<core::ThreadPool>(
      options.cpu_threads, [nice = options.compute_nice] { LowerThreadPriority(nice); });
  // Requests are split across the pool only from 4 MiB of output on: below that, waking a
  // second (often sleeping) vCPU costs more than it saves, and concurrent requests keep the
  // other threads busy anyway (measured with rpc_bench, 1 MiB responses at concurrency 1).
  batching::CpuExecutorOptions executor_options;
  executor_options.execute.min_parallel_bytes = int64_t{4} << 20;
  executor_options.inline_task_bytes = options.inline_compute_bytes;
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
  batcher_options.deadline_admission = options.deadline_admission;
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
  // A message is read with room for itself and its parsed copy (compute_service.h).
  s->budget_ = std::make_unique<ByteBudget>(options.max_inflight_bytes,
                                            2 * options.max_message_bytes, options.queue_capacity);
  s->service_ = std::make_unique<ComputeService>(s->batcher_.get(), plan_options, &s->metrics_,
                                                 &s->errors_, s->budget_.get(), s->auth_.get());
  Server* raw = s.get();
  s->service_->SetRegistry(
      s->registry_.get(),
      [raw](const std::string& device, const core::Tensor& tensor) {
        return raw->PlaceTensor(device, tensor);
      },
      s->admin_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &s->port_);
  if (s->auth_ != nullptr) builder.SetOption(WithoutReflection());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->service_.get());
  s->kserve_ =
      std::make_unique<KserveService>(s->service_.get(), [raw] { return raw->ready_.load(); });
  builder.RegisterService(s->kserve_.get());
  if (options.stream_window_bytes > 0) {
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                               ClampToInt(options.stream_window_bytes));
  }
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
    collector->set_registry(s->registry_.get());
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
  if (!options.http_listen.empty()) {
    KserveHttp::Options http_options;
    http_options.listen = options.http_listen;
    http_options.threads = options.http_threads;
    http_options.max_body_bytes = options.max_message_bytes;
    absl::StatusOr<std::unique_ptr<KserveHttp>> http =
        KserveHttp::Start(http_options, s->service_.get(), [raw] { return raw->ready_.load(); });
    if (!http.ok()) {
      if (s->health_server_ != nullptr) s->health_server_->Shutdown();
      s->server_->Shutdown();
      s->server_.reset();
      return http.status();
    }
    s->http_ = *std::move(http);
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
    // gRPC's health service starts out SERVING: not before the preloaded tensors are in.
    s->SetHealth(!s->gpu_lost_ && s->options_.preload.empty(), /*service_too=*/true);
  }
  if (!options.preload.empty()) {
    if (absl::Status loaded = s->Preload(); !loaded.ok()) return loaded;
    absl::MutexLock lock(&s->health_mu_);
    s->SetHealth(!s->gpu_lost_, /*service_too=*/true);
  }
  return s;
}

std::vector<int> Server::GpuOrdinals() const {
  std::vector<int> ordinals = options_.gpus;
  if (ordinals.empty()) {
    for (int i = 0; i < cuda::CudaDeviceCount(); ++i) ordinals.push_back(i);
  }
  return ordinals;
}

absl::StatusOr<core::DeviceCopy> Server::PlaceTensor(const std::string& device,
                                                     const core::Tensor& tensor) const {
  const bool strings = tensor.dtype() == core::DataType::kString;
  if (device.empty()) {
    // The server's default: its GPU when it computes on one (strings stay on the CPU).
    if (cuda_executor_ == nullptr || strings) return core::DeviceCopy{};
    return cuda::CudaUploadTable(GpuOrdinals().front(), tensor);
  }
  if (device == "cpu") return core::DeviceCopy{};
  int ordinal = 0;
  if (device != "gpu" &&
      !(absl::StartsWith(device, "gpu:") && absl::SimpleAtoi(device.substr(4), &ordinal))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", device, "' is not one of \"\" (the server's default), cpu, gpu, gpu:N"));
  }
  if (cuda_executor_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", device, "': this server computes on the CPU (--device=", options_.device,
        "); put the tensor with device cpu or \"\""));
  }
  const std::vector<int> devices = GpuOrdinals();
  if (std::find(devices.begin(), devices.end(), ordinal) == devices.end()) {
    return absl::InvalidArgumentError(absl::StrCat("device '", device, "': this server uses GPUs ",
                                                   absl::StrJoin(devices, ", "), " only"));
  }
  if (strings) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", device, "': DT_STRING tensors live on the CPU (device cpu)"));
  }
  return cuda::CudaUploadTable(ordinal, tensor);
}

absl::Status Server::Preload() {
  for (const std::string& spec : options_.preload) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--preload '", spec, "': expected NAME=PATH.npy"));
    }
    const std::string name = spec.substr(0, eq);
    const std::string path = spec.substr(eq + 1);
    const absl::Time start = absl::Now();
    std::string bytes;
    {
      std::ifstream file(path, std::ios::binary);
      if (!file) {
        return absl::InvalidArgumentError(
            absl::StrCat("--preload ", name, ": cannot open ", path, ": ", std::strerror(errno)));
      }
      std::ostringstream contents;
      contents << file.rdbuf();
      bytes = std::move(contents).str();
    }
    absl::StatusOr<core::Tensor> tensor = core::ParseNpy(bytes);
    bytes.clear();
    bytes.shrink_to_fit();
    absl::Status status = tensor.status();
    if (status.ok() && tensor->shape().empty()) {
      status = absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
    }
    if (status.ok()) {
      const core::TensorView view = tensor->view();
      int64_t payload = 0;
      for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
      absl::StatusOr<core::TensorRegistry::Reservation> reservation = registry_->Reserve(
          name, core::ResidentBytes(tensor->dtype(), tensor->num_elements(), payload));
      absl::StatusOr<core::DeviceCopy> copy =
          reservation.ok() ? PlaceTensor("", *tensor) : reservation.status();
      status = copy.status();
      if (status.ok()) {
        status = registry_
                     ->Put(name, *std::move(tensor), *std::move(copy), /*replace=*/false,
                           *std::move(reservation))
                     .status();
      }
    }
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("--preload ", name, "=", path, ": ", status.message()));
    }
    const auto entry = registry_->Find(name);
    spdlog::info("preloaded {} from {}: {} bytes on {} in {:.1f} s", name, path, entry->bytes,
                 entry->device, absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
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
      std::vector<std::string> descriptions;
      for (int ordinal : GpuOrdinals()) {
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
  ready_.store(serving);
  for (grpc::HealthCheckServiceInterface* health : {health_, listener_health_}) {
    if (health == nullptr) continue;
    if (service_too) {
      health->SetServingStatus(v1::TensorCompute::service_full_name(), serving);
    }
    health->SetServingStatus(serving);
  }
}

absl::StatusOr<int> Server::ReloadAuthTokens() {
  if (auth_ == nullptr && admin_ == nullptr) {
    return absl::FailedPreconditionError(
        "the server was started without auth_token_file or admin_token_file");
  }
  int tokens = 0;
  for (TokenAuth* file : {auth_.get(), admin_.get()}) {
    if (file == nullptr) continue;
    absl::StatusOr<int> n = file->Reload();
    if (!n.ok()) return n.status();
    tokens += *n;
  }
  return tokens;
}

Server::~Server() { Drain(); }

int Server::http_port() const { return http_ == nullptr ? 0 : http_->port(); }

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
    // HTTP requests still in flight are answered (their tasks are done or cancelled).
    if (http_ != nullptr) http_->Stop();
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
