#include "server/server.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/batching/batcher.h"
#include "core/batching/cpu_executor.h"
#include "core/batching/table_lease_executor.h"
#include "core/cuda/cuda_executor.h"
#include "core/disk/row_file.h"
#include "core/status_macros.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "proto/grpc_compression.h"
#include "server/admission/byte_budget.h"
#include "server/admission/call_gate.h"
#include "server/admission/peer_token.h"
#include "server/admission/token_auth.h"
#include "server/admission/upload_budget.h"
#include "server/builder_options.h"
#include "server/compute/compute_entry.h"
#include "server/compute/shard_router.h"
#include "server/compute/shard_updater.h"
#include "server/credentials.h"
#include "server/grpc_acceptor.h"
#include "server/health_listener.h"
#include "server/memory_trimmer.h"
#include "server/metrics/gpu_stage_metrics.h"
#include "server/metrics/metered_executor.h"
#include "server/native/native_service.h"
#include "server/preload.h"
#include "server/prometheus_metrics.h"

namespace tensorcompute::server {
namespace {

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

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options, const std::vector<FrontEndFactory>& front_ends) {
  TC_RETURN_IF_ERROR(options.Validate());
  TC_ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ServerCredentials> credentials,
                      MakeServerCredentials(options));
  // spdlog makes its default logger on the first log call. Make it here, before this server
  // starts a thread that logs, so that it is made once, on this thread, before every use. (Else
  // the first request's thread made it while another read it; correct in C++, but the fast
  // path of the function-local static is inside Debian's uninstrumented libspdlog.so, so
  // ThreadSanitizer cannot see the ordering and reports a race.)
  spdlog::default_logger_raw();
  // A failed step leaves the server half built: destroying it (Drain, then the members in
  // reverse order) stops whatever had started.
  std::unique_ptr<Server> s(new Server(options));
  TC_RETURN_IF_ERROR(s->LoadTokens());
  TC_RETURN_IF_ERROR(s->SetUpCompute());
  TC_RETURN_IF_ERROR(s->StartGrpc(credentials, front_ends));
  TC_RETURN_IF_ERROR(s->StartSideListeners());
  TC_RETURN_IF_ERROR(s->BecomeReady());
  s->started_ = true;
  return s;
}

absl::Status Server::LoadTokens() {
  for (auto [path, auth] : {std::pair{&options_.auth_token_file, &auth_},
                            std::pair{&options_.admin_token_file, &admin_}}) {
    if (path->empty()) continue;
    TC_ASSIGN_OR_RETURN(*auth, TokenAuth::Create(*path));
  }
  if (!options_.shard_peer_token_file.empty()) {
    TC_ASSIGN_OR_RETURN(peer_token_, PeerToken::Create(options_.shard_peer_token_file));
  }
  return absl::OkStatus();
}

// The registry, the pool, the executors, the batcher, the budget, and the compute entry.
absl::Status Server::SetUpCompute() {
  if (!options_.table_dir.empty()) {
    // A file made and dropped: a directory that cannot take PutTensor's tables on disk fails
    // the start, not the first such put.
    absl::StatusOr<std::unique_ptr<core::disk::RowFile>> probe =
        core::disk::RowFile::CreateUnnamed(options_.table_dir, 0, 1, {});
    if (!probe.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--table_dir: ", probe.status().message()));
    }
  }
  registry_ = std::make_unique<core::TensorRegistry>(options_.max_resident_bytes,
                                                     options_.max_table_dir_bytes);
  if (options_.malloc_trim_interval > absl::ZeroDuration()) {
    trimmer_ = std::make_unique<MemoryTrimmer>(options_.malloc_trim_interval);
  }
  pool_ = std::make_unique<core::ThreadPool>(
      options_.cpu_threads, [nice = options_.compute_nice] { LowerThreadPriority(nice); });
  // Requests are split across the pool only from 4 MiB of output on: below that, waking a
  // second (often sleeping) vCPU costs more than it saves, and concurrent requests keep the
  // other threads busy anyway (docs/performance.md).
  batching::CpuExecutorOptions executor_options;
  executor_options.execute.min_parallel_bytes = int64_t{4} << 20;
  executor_options.inline_task_bytes = options_.inline_compute_bytes;
  executor_ = std::make_unique<batching::CpuExecutor>(pool_.get(), executor_options);
  // Made before the GPU executor, which is given it as its fallback: CPU batches are counted
  // whether the batcher or the GPU executor hands them over.
  metered_cpu_ = std::make_unique<MeteredExecutor>(executor_.get());
  if (options_.device != "cpu") {
    TC_RETURN_IF_ERROR(SetUpGpu());
  }

  batching::BatcherOptions batcher_options;
  batcher_options.max_batch_size = options_.max_batch_size;
  batcher_options.max_queue_delay = absl::Microseconds(options_.max_queue_delay_us);
  batcher_options.queue_capacity = options_.queue_capacity;
  batcher_options.deadline_admission = options_.deadline_admission;
  // One batch per pool thread (or GPU stream) in flight: while they are all busy, requests
  // pile up into the next batches instead of waiting in the executor's queues.
  batcher_options.max_inflight_batches =
      cuda_executor_ != nullptr ? cuda_executor_->slots() : pool_->size();
  batcher_options.on_batch = [metrics = &metrics_](int64_t size) { metrics->CountBatch(size); };
  batching::Executor* executor = metered_cpu_.get();
  if (cuda_executor_ != nullptr) {
    metered_gpu_ = std::make_unique<MeteredExecutor>(cuda_executor_.get());
    executor = metered_gpu_.get();
  }
  // Outermost, so that a batch holds its tables' read leases whichever executor runs it
  // (core/live_rows.h): row updates never meet a lookup half way.
  // Batches that fetch rows of tables on disk run on disk_pool_, so that the batcher's thread
  // never waits on a disk.
  disk_pool_ = std::make_unique<core::ThreadPool>(batcher_options.max_inflight_batches);
  leased_ = std::make_unique<batching::TableLeaseExecutor>(executor, disk_pool_.get());
  batcher_ = std::make_unique<batching::Batcher>(batcher_options, leased_.get());

  core::PlanOptions plan_options;
  plan_options.max_output_bytes = options_.EffectiveMaxOutputBytes();
  plan_options.max_rank = options_.max_rank;
  // A message is read with room for itself and its parsed copy (server/admission/byte_budget.h).
  // Its waiting line is as long as the batcher's queue (queue_capacity).
  budget_ =
      std::make_unique<ByteBudget>(options_.max_inflight_bytes, 2 * options_.max_message_bytes,
                                   options_.queue_capacity, options_.max_inflight_share);
  gate_ = std::make_unique<CallGate>(&metrics_, &errors_, auth_.get(), admin_.get());
  // With ordinary tokens every admitted call carries a checked one: the token names the client.
  TC_ASSIGN_OR_RETURN(ClientIdentity identity,
                      ClientIdentity::Create(options_.trusted_proxies, auth_ != nullptr));
  gate_->set_client_identity(std::move(identity));
  gate_->set_compression(*proto::ParseCompression(options_.grpc_compression));  // validated
  gate_->set_send_limit(options_.answer_send_limit);
  compute_ = std::make_unique<ComputeEntry>(batcher_.get(), budget_.get(), &metrics_,
                                            registry_.get(), plan_options);
  ShardRouterOptions router_options;
  TC_ASSIGN_OR_RETURN(router_options.peers, ParseShardPeers(options_.shard_peers));
  router_options.channel.max_answer_bytes = options_.EffectiveMaxOutputBytes();
  TC_ASSIGN_OR_RETURN(router_options.channel.credentials, MakePeerChannelCredentials(options_));
  router_options.channel.tls_server_name = options_.shard_peer_tls_server_name;
  router_options.token = peer_token_.get();
  // Updates of a sharded table go to the same peers, with the same credentials.
  updater_ = std::make_unique<ShardUpdater>(router_options);
  router_ = std::make_unique<ShardRouter>(compute_.get(), &metrics_, std::move(router_options));
  // The router submits through compute_ and compute_ routes through it: the setter breaks the
  // cycle.
  compute_->set_router(router_.get());
  compute_->set_key_pool(pool_.get());
  ResidentEnv resident;
  resident.gate = gate_.get();
  resident.registry = registry_.get();
  resident.place = [this](const std::string& device, const core::Tensor& tensor) {
    return PlaceTensor(device, tensor);
  };
  resident.max_rank = options_.max_rank;
  resident.pool = pool_.get();
  resident.disk = DiskTier{options_.table_dir, options_.table_cache_bytes};
  // An upload reads with room for a message and its parsed copy, as a compute call does.
  uploads_ =
      std::make_unique<UploadBudget>(options_.max_upload_bytes, 2 * options_.max_message_bytes);
  resident.uploads = uploads_.get();
  resident.idle_timeout = options_.upload_idle_timeout;
  if (updater_->routes()) resident.shards = updater_.get();
  if (cuda_executor_ != nullptr) {
    resident.write_device = [gpu = cuda_executor_.get()](
                                const core::DeviceCopy& copy, absl::Span<const int64_t> rows,
                                int64_t row_bytes, absl::Span<const uint8_t> stored) {
      return gpu->UpdateRows(copy, rows, row_bytes, stored);
    };
  }
  service_ = std::make_unique<NativeService>(gate_.get(), compute_.get(), resident);
  return absl::OkStatus();
}

// The main gRPC server: the native service, the front ends' services, health and reflection.
absl::Status Server::StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials,
                               const std::vector<FrontEndFactory>& front_ends) {
  FrontEndContext context;
  context.options = &options_;
  context.gate = gate_.get();
  context.compute = compute_.get();
  context.ready = [this] { return ready_.load(); };
  for (const FrontEndFactory& make : front_ends) {
    TC_ASSIGN_OR_RETURN(std::unique_ptr<FrontEnd> front_end, make(context));
    front_ends_.push_back(std::move(front_end));
  }
  // Global switches: the reflection plugin goes to builders made after it is registered, the
  // health service to servers built after it is enabled.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  GrpcAcceptor::Options accepting;
  accepting.descriptor_reserve = static_cast<int>(options_.descriptor_reserve);
  accepting.on_refused = [this] { metrics_.CountRefusedGrpcConnection(); };
  TC_ASSIGN_OR_RETURN(acceptor_, GrpcAcceptor::Listen(options_.listen, std::move(accepting)));
  port_ = acceptor_->port();
  grpc::ServerBuilder builder;
  acceptor_->AddTo(&builder, credentials);
  // Ordinary tokens only: with admin tokens alone, ordinary calls need no token, and reflection
  // (read-only) may stay.
  if (auth_ != nullptr) builder.SetOption(WithoutReflection());
  ApplyBuilderOptions(options_, &builder);
  builder.RegisterService(service_.get());
  for (const auto& front_end : front_ends_) {
    for (grpc::Service* service : front_end->Services()) builder.RegisterService(service);
  }
  if (!options_.metrics_listen.empty()) {
    // Before the gRPC port opens, so that a bad metrics address fails Start with nothing served.
    std::vector<ExecutorGauges> executors = {
        {metered_cpu_.get(), [pool = pool_.get()] { return pool->size(); }, nullptr}};
    if (metered_gpu_ != nullptr) {
      cuda::CudaExecutor* gpu = cuda_executor_.get();
      executors.insert(executors.begin(), {metered_gpu_.get(), [gpu] { return gpu->slots(); },
                                           [gpu] { return gpu->healthy(); }});
    }
    auto collector =
        std::make_shared<MetricsCollector>(&metrics_, batcher_.get(), budget_.get(),
                                           std::move(executors), device_, device_description_);
    collector->set_registry(registry_.get());
    collector->set_upload_budget(uploads_.get());
    collector->set_gpu_stages(gpu_stages_.get());
    collector->set_serving([this] { return ready_.load(); });
    TC_ASSIGN_OR_RETURN(metrics_endpoint_,
                        MetricsEndpoint::Start(options_.metrics_listen, std::move(collector)));
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", options_.listen));
  }
  acceptor_->Start();
  return absl::OkStatus();
}

// The health-only listener and the front ends' own listeners.
absl::Status Server::StartSideListeners() {
  if (!options_.health_listen.empty()) {
    TC_ASSIGN_OR_RETURN(health_listener_,
                        HealthListener::Start(options_.health_listen,
                                              static_cast<int>(options_.descriptor_reserve)));
  }
  for (const auto& front_end : front_ends_) {
    TC_RETURN_IF_ERROR(front_end->Start());
  }
  return absl::OkStatus();
}

// Health SERVING, once the preloaded tensors are in.
absl::Status Server::BecomeReady() {
  // The whole server ("") and the service by name, so that checks naming the service
  // (Kubernetes gRPC probes with `service:`, grpc_health_probe -service) work too.
  {
    // Under the lock, so that a GPU lost meanwhile cannot be overwritten with SERVING.
    absl::MutexLock lock(&health_mu_);
    health_ = server_->GetHealthCheckService();
    if (health_listener_ != nullptr) listener_health_ = health_listener_->health();
    // gRPC's health service starts out SERVING: not before the preloaded tensors are in.
    SetHealth(!gpu_lost_ && options_.preload.empty(), /*service_too=*/true);
  }
  if (!options_.preload.empty()) {
    TC_RETURN_IF_ERROR(Preload(
        options_.preload, registry_.get(),
        [this](const std::string& device, const core::Tensor& tensor) {
          return PlaceTensor(device, tensor);
        },
        options_.shard_count > 1 ? std::optional<core::ShardSpec>(core::ShardSpec{
                                       options_.shard_index, options_.shard_count, 0})
                                 : std::nullopt,
        options_.preload_keys, DiskTier{options_.table_dir, options_.table_cache_bytes}));
    absl::MutexLock lock(&health_mu_);
    SetHealth(!gpu_lost_, /*service_too=*/true);
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, int>> Server::front_end_ports() const {
  std::vector<std::pair<std::string, int>> ports;
  for (const auto& front_end : front_ends_) {
    for (auto& port : front_end->Ports()) ports.push_back(std::move(port));
  }
  return ports;
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
    // The first of the server's GPUs.
    return cuda_executor_->UploadTable(GpuOrdinals().front(), tensor);
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
  return cuda_executor_->UploadTable(ordinal, tensor);
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
    gpu_options.device_timeout = options_.gpu_timeout;
    gpu_options.fallback = metered_cpu_.get();
    gpu_options.on_device_lost = [this](int ordinal, const absl::Status& error) {
      OnDeviceLost(ordinal, error);
    };
    // Sized by every visible device: it is indexed by CUDA ordinal, and --gpus may pick a few.
    gpu_stages_ = std::make_unique<GpuStageMetrics>(cuda::CudaDeviceCount());
    gpu_options.on_batch_stages = [stages = gpu_stages_.get()](int ordinal,
                                                               const cuda::GpuBatchStages& times) {
      stages->Record(ordinal, times);
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
  // With "auto" a missing GPU is no error, but bad GPU options (INVALID_ARGUMENT) are: they are
  // a mistake in the configuration, not an absence of hardware.
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
  if (auth_ == nullptr && admin_ == nullptr && peer_token_ == nullptr) {
    return absl::FailedPreconditionError(
        "the server was started without auth_token_file, admin_token_file or "
        "shard_peer_token_file");
  }
  // Each file is swapped on its own: if the admin file fails after the ordinary one reloaded,
  // the ordinary one's new tokens stay; the peer token, re-read last, keeps its old one.
  int tokens = 0;
  for (TokenAuth* file : {auth_.get(), admin_.get()}) {
    if (file == nullptr) continue;
    TC_ASSIGN_OR_RETURN(const int n, file->Reload());
    tokens += n;
  }
  if (peer_token_ != nullptr) TC_RETURN_IF_ERROR(peer_token_->Reload());
  return tokens;
}

Server::~Server() { Drain(); }

int Server::metrics_port() const {
  return metrics_endpoint_ == nullptr ? 0 : metrics_endpoint_->port();
}

int Server::health_port() const {
  return health_listener_ == nullptr ? 0 : health_listener_->port();
}
core::TensorRegistry& Server::registry() { return *registry_; }
const ByteBudget& Server::inflight_budget() const { return *budget_; }
const UploadBudget& Server::upload_budget() const { return *uploads_; }
const batching::Batcher& Server::batcher() const { return *batcher_; }
int Server::cpu_threads() const { return pool_->size(); }

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
    gate_->StartDraining();
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
    // A server that never finished starting has no clients to give notice to.
    const absl::Time notice_end =
        started_ ? std::min(start + options_.drain_notice, deadline) : start;
    if (absl::Now() < notice_end) absl::SleepFor(notice_end - absl::Now());
    // Every accepted RPC has called Finish (unless the timeout hit); Shutdown waits for their
    // responses to be sent, cancels what is left at the deadline, and closes the listeners.
    // HTTP requests still in flight are answered (their tasks are done or cancelled).
    for (const auto& front_end : front_ends_) front_end->Stop();
    acceptor_->Stop();  // before Shutdown, which drops connections handed to it afterwards
    // At least a second even when the drain timeout is spent, so that answers already finished
    // can still be sent.
    server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
    server_->Wait();
    if (health_listener_ != nullptr) health_listener_->Shutdown();
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
