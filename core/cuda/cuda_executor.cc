#include "core/cuda/cuda_executor.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include <cuda_runtime.h>

#include "core/batching/cpu_executor.h"
#include "core/cuda/bag_kernel.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/scatter_kernel.h"
#include "core/cuda/stream_slot.h"
#include "core/cuda/task_routing.h"
#include "core/status_macros.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kMaxStreamsPerDevice = 64;
constexpr int64_t kMinStagingBytes = int64_t{64} << 10;

// The device holding the resident copies of most of `tasks`' tables, or -1 if none has one.
int PreferredDevice(const batching::Batch& tasks) {
  absl::flat_hash_map<int, int> counts;
  int best = -1, best_count = 0;
  for (const std::unique_ptr<batching::Task>& task : tasks) {
    if (task->table == nullptr || task->table->device_copy.gpu < 0) continue;
    const int gpu = task->table->device_copy.gpu;
    const int count = ++counts[gpu];
    if (count > best_count) {
      best = gpu;
      best_count = count;
    }
  }
  return best;
}

// What the parts of one Run (GPU and fallback) share: batch_done runs after the last one.
struct RunState {
  explicit RunState(absl::AnyInvocable<void() &&> done) : batch_done(std::move(done)) {}
  void PartDone() {
    if (parts.fetch_sub(1, std::memory_order_acq_rel) == 1) std::move(batch_done)();
  }
  std::atomic<int> parts{0};
  absl::AnyInvocable<void() &&> batch_done;
};

// cudaGetDeviceCount, or UNAVAILABLE saying why there is no device ("cudaErrorNoDevice: ...",
// "cudaErrorInsufficientDriver: ..." where there is no driver).
absl::StatusOr<int> VisibleDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(CudaError(error, "cudaGetDeviceCount").message());
  }
  if (count <= 0) return absl::UnavailableError("no CUDA device is visible");
  return count;
}

// Whether this build's kernels run on the current device: a binary without code for its
// architecture would fail every launch while looking healthy.
absl::Status ProbeKernels() {
  TC_RETURN_IF_ERROR(ProbeGatherKernels());
  TC_RETURN_IF_ERROR(ProbeBagKernels());
  return ProbeScatterKernels();
}

}  // namespace

class CudaExecutor::Impl {
 public:
  explicit Impl(const CudaExecutorOptions& options) : options_(options) {}

  // Sets up `ordinals` (slots, pools, staging); nothing runs until this returned OK.
  absl::Status Init(const std::vector<int>& ordinals);

  void Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done);
  // The slot for the GPU tasks `gpu` of a Run, or nullptr when none is in service.
  StreamSlot* PickSlot(const batching::Batch& gpu);
  void DeviceLost(DeviceState& device, const absl::Status& error);
  absl::StatusOr<core::DeviceCopy> UploadTable(int ordinal, const core::Tensor& tensor);
  absl::Status UpdateRows(const core::DeviceCopy& copy, absl::Span<const int64_t> rows,
                          int64_t row_bytes, absl::Span<const uint8_t> packed);
  // The device `ordinal` of this executor in service: INVALID_ARGUMENT when it is not one of
  // the executor's, UNAVAILABLE when it is out of service.
  absl::StatusOr<DeviceState*> DeviceInService(int ordinal);
  // `failed` (an upload's or update's error) as the caller sees it: a wait that timed out or a
  // sticky error takes the device out of service and becomes UNAVAILABLE.
  absl::Status TakeOutIfLost(DeviceState& device, absl::Status failed);

  const CudaExecutorOptions options_;
  std::string name_;
  // Slots are destroyed (finishing their queues) before the devices whose pools they use.
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::vector<std::unique_ptr<StreamSlot>> slots_;
  std::atomic<int> healthy_slots_{0};
  std::atomic<int> healthy_devices_{0};
  std::atomic<uint64_t> next_slot_{0};
  std::atomic<bool> stopping_{false};
};

absl::Status CudaExecutor::Impl::Init(const std::vector<int>& ordinals) {
  StreamSlot::Hooks hooks;
  hooks.fallback = options_.fallback;
  hooks.on_device_lost = [this](DeviceState& device, const absl::Status& error) {
    DeviceLost(device, error);
  };
  hooks.on_batch_stages = options_.on_batch_stages;
  hooks.timeout = options_.device_timeout;
  std::vector<std::string> names;
  for (int ordinal : ordinals) {
    TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal), absl::StrCat("selecting device ", ordinal));
    cudaDeviceProp props;
    TC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, ordinal),
                            absl::StrCat("reading the properties of device ", ordinal));
    if (!props.memoryPoolsSupported) {
      return absl::UnavailableError(
          absl::StrCat("CUDA device ", ordinal, " has no stream-ordered memory pools"));
    }
    if (absl::Status probe = ProbeKernels(); !probe.ok()) {
      (void)cudaGetLastError();  // not sticky: the device is only not used
      return absl::UnavailableError(
          absl::StrCat("CUDA device ", ordinal, " (", props.name, ", sm_", props.major, props.minor,
                       ") cannot run this build's kernels (built for CUDA architectures ",
                       TC_CUDA_ARCHITECTURES, "): ", probe.message()));
    }
    auto device = std::make_unique<DeviceState>();
    device->ordinal = ordinal;
    device->sm_count = std::max(1, props.multiProcessorCount);
    TC_ASSIGN_OR_RETURN(device->description, CudaDeviceDescription(ordinal));
    TC_ASSIGN_OR_RETURN(device->pool, MemoryPool::Create(ordinal, MemoryPool::kKeepAll));
    TC_ASSIGN_OR_RETURN(device->uploader,
                        TableUploader::Create(ordinal, options_.device_timeout, &device->pool));
    for (int s = 0; s < options_.streams_per_device; ++s) {
      TC_ASSIGN_OR_RETURN(
          std::unique_ptr<StreamSlot> slot,
          StreamSlot::Create(device.get(), static_cast<uint64_t>(options_.staging_bytes), hooks));
      slots_.push_back(std::move(slot));
    }
    names.push_back(absl::StrCat(ordinal));
    devices_.push_back(std::move(device));
  }
  name_ = absl::StrCat("cuda:", absl::StrJoin(names, ","));
  healthy_slots_ = static_cast<int>(slots_.size());
  healthy_devices_ = static_cast<int>(devices_.size());
  return absl::OkStatus();
}

void CudaExecutor::Impl::Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  auto state = std::make_shared<RunState>(std::move(batch_done));
  // Gathers and pooled lookups make separate device passes (one launch each).
  batching::Batch gathers, bags, cpu;
  const absl::Time now = absl::Now();
  for (std::unique_ptr<batching::Task>& task : batch) {
    if (!GpuComputes(*task, options_.max_bag_length)) {
      cpu.push_back(std::move(task));
      continue;
    }
    absl::Status wanted = batching::CheckStillWanted(*task, now);
    if (!wanted.ok()) {
      std::move(task->done)(std::move(wanted));
    } else if (task->bag() != nullptr) {
      bags.push_back(std::move(task));
    } else {
      gathers.push_back(std::move(task));
    }
  }
  batch.clear();

  std::vector<SlotWork> works;
  std::vector<StreamSlot*> work_slots;
  for (batching::Batch* gpu : {&gathers, &bags}) {
    if (gpu->empty()) continue;
    StreamSlot* slot = PickSlot(*gpu);
    batching::Batch on_slot;
    for (std::unique_ptr<batching::Task>& task : *gpu) {
      if (slot != nullptr && GpuFits(*task, slot->device().ordinal, options_.max_task_bytes)) {
        on_slot.push_back(std::move(task));
      } else {
        cpu.push_back(std::move(task));
      }
    }
    gpu->clear();
    if (on_slot.empty()) continue;
    works.push_back(SlotWork{std::move(on_slot), [state] { state->PartDone(); }});
    work_slots.push_back(slot);
  }

  state->parts = static_cast<int>(works.size()) + (cpu.empty() ? 0 : 1);
  if (state->parts == 0) {
    std::move(state->batch_done)();
    return;
  }
  if (!cpu.empty()) options_.fallback->Run(std::move(cpu), [state] { state->PartDone(); });
  for (size_t i = 0; i < works.size(); ++i) work_slots[i]->Enqueue(std::move(works[i]));
}

StreamSlot* CudaExecutor::Impl::PickSlot(const batching::Batch& gpu) {
  // The least loaded slot of a device in service, starting the scan at a rotating slot so
  // that ties spread over devices and streams; on the device that holds the batch's resident
  // tables when one of its slots is in service.
  if (stopping_.load()) return nullptr;
  StreamSlot* slot = nullptr;
  const int preferred = PreferredDevice(gpu);
  const uint64_t start = next_slot_.fetch_add(1, std::memory_order_relaxed);
  for (bool on_preferred : {true, false}) {
    if (on_preferred && preferred < 0) continue;
    for (size_t i = 0; i < slots_.size(); ++i) {
      StreamSlot* candidate = slots_[(start + i) % slots_.size()].get();
      if (candidate->device().lost.load()) continue;
      if (on_preferred && candidate->device().ordinal != preferred) continue;
      if (slot == nullptr || candidate->load() < slot->load()) slot = candidate;
    }
    if (slot != nullptr) break;
  }
  return slot;
}

void CudaExecutor::Impl::DeviceLost(DeviceState& device, const absl::Status& error) {
  if (device.lost.exchange(true)) return;
  device.uploader->DeviceLost();
  healthy_slots_ -= options_.streams_per_device;
  healthy_devices_ -= 1;
  if (options_.on_device_lost) options_.on_device_lost(device.ordinal, error);
}

absl::StatusOr<DeviceState*> CudaExecutor::Impl::DeviceInService(int ordinal) {
  DeviceState* device = nullptr;
  for (const std::unique_ptr<DeviceState>& d : devices_) {
    if (d->ordinal == ordinal) device = d.get();
  }
  if (device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU ", ordinal, " is not one of this executor's (", name_, ")"));
  }
  if (device->lost.load()) {
    return absl::UnavailableError(absl::StrCat("GPU ", ordinal, " is out of service"));
  }
  return device;
}

absl::Status CudaExecutor::Impl::TakeOutIfLost(DeviceState& device, absl::Status failed) {
  if (failed.ok() || absl::IsResourceExhausted(failed)) return failed;
  // A copy that never finished, or a sticky error (which every later call reports too), means
  // the device is gone: its slots must stop taking batches as well.
  const bool hung = absl::IsDeadlineExceeded(failed);
  if (hung || IsStickyError(cudaPeekAtLastError())) {
    DeviceLost(device, failed);
    return absl::UnavailableError(
        absl::StrCat("GPU ", device.ordinal, " is out of service: ", failed.message()));
  }
  return failed;
}

absl::StatusOr<core::DeviceCopy> CudaExecutor::Impl::UploadTable(int ordinal,
                                                                 const core::Tensor& tensor) {
  if (tensor.dtype() == core::DataType::kString) {
    return absl::InvalidArgumentError("a string tensor cannot live on a GPU; keep it on the CPU");
  }
  TC_ASSIGN_OR_RETURN(DeviceState * device, DeviceInService(ordinal));
  absl::StatusOr<core::DeviceCopy> copy = device->uploader->Upload(tensor);
  if (copy.ok()) return copy;
  return TakeOutIfLost(*device, copy.status());
}

absl::Status CudaExecutor::Impl::UpdateRows(const core::DeviceCopy& copy,
                                            absl::Span<const int64_t> rows, int64_t row_bytes,
                                            absl::Span<const uint8_t> packed) {
  if (row_bytes < 0 || packed.size() != rows.size() * static_cast<uint64_t>(row_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("an update of ", rows.size(), " rows of ",
                                                   row_bytes, " bytes cannot have ", packed.size(),
                                                   " bytes"));
  }
  TC_ASSIGN_OR_RETURN(DeviceState * device, DeviceInService(copy.gpu));
  // The copy's memory is the executor's (UploadTable made it); only its readers hold it const.
  auto* table = static_cast<uint8_t*>(const_cast<void*>(copy.data));
  return TakeOutIfLost(
      *device, device->uploader->UpdateRows(table, rows, static_cast<uint64_t>(row_bytes), packed,
                                            device->sm_count));
}

int CudaDeviceCount() {
  absl::StatusOr<int> count = VisibleDevices();
  return count.ok() ? *count : 0;
}

absl::StatusOr<std::string> CudaDeviceDescription(int ordinal) {
  TC_ASSIGN_OR_RETURN(const int count, VisibleDevices());
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", ordinal, " does not exist (", count, " visible)"));
  }
  cudaDeviceProp props;
  TC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, ordinal),
                          absl::StrCat("reading the properties of device ", ordinal));
  return absl::StrCat(props.name, " (sm_", props.major, props.minor, ", ",
                      props.totalGlobalMem >> 30, " GiB)");
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(
    const CudaExecutorOptions& options) {
  if (options.fallback == nullptr) {
    return absl::InvalidArgumentError("CudaExecutor needs a fallback executor");
  }
  if (options.streams_per_device < 1 || options.streams_per_device > kMaxStreamsPerDevice ||
      options.staging_bytes < kMinStagingBytes || options.max_task_bytes < 1 ||
      options.max_bag_length < 1 || options.device_timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 1 <= streams_per_device <= ", kMaxStreamsPerDevice, ", staging_bytes >= ",
        kMinStagingBytes, ", max_task_bytes >= 1, max_bag_length >= 1 and device_timeout >= 1ms"));
  }
  TC_ASSIGN_OR_RETURN(const int count, VisibleDevices());
  std::vector<int> ordinals = options.devices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  std::vector<int> sorted = ordinals;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("a CUDA device is listed twice");
  }
  for (int ordinal : ordinals) {
    if (ordinal < 0 || ordinal >= count) {
      return absl::UnavailableError(
          absl::StrCat("CUDA device ", ordinal, " does not exist (", count, " visible)"));
    }
  }
  auto impl = std::make_unique<Impl>(options);
  const absl::Status init = impl->Init(ordinals);
  if (!init.ok()) {
    // Whatever was made is released by impl's destructor.
    return absl::UnavailableError(absl::StrCat("cannot set up the GPU: ", init.message()));
  }
  return std::unique_ptr<CudaExecutor>(new CudaExecutor(std::move(impl)));
}

CudaExecutor::CudaExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaExecutor::~CudaExecutor() {
  impl_->stopping_ = true;
  impl_->slots_.clear();  // each slot runs what it was given, then joins its worker
}

absl::StatusOr<core::DeviceCopy> CudaExecutor::UploadTable(int device, const core::Tensor& tensor) {
  return impl_->UploadTable(device, tensor);
}

absl::Status CudaExecutor::UpdateRows(const core::DeviceCopy& copy, absl::Span<const int64_t> rows,
                                      int64_t row_bytes, absl::Span<const uint8_t> packed) {
  return impl_->UpdateRows(copy, rows, row_bytes, packed);
}

void CudaExecutor::Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  impl_->Run(std::move(batch), std::move(batch_done));
}

absl::string_view CudaExecutor::name() const { return impl_->name_; }

int CudaExecutor::slots() const { return std::max(0, impl_->healthy_slots_.load()); }

bool CudaExecutor::healthy() const { return impl_->healthy_devices_.load() > 0; }

}  // namespace tensorcompute::cuda
