// File: tests/cuda/testing/fake_cuda_runtime.cc
//
// A fake CUDA runtime: a TEST DOUBLE ONLY, linked into cuda_fake_test instead of cudart and
// the kernel, so that CI runs the GPU executor's host logic (cuda_executor.cc, stream_slot.cc,
// device_buffer.cc) without a GPU: staging halves, chunked copies, events, fallback, errors.
//
// What it fakes: one device ("Fake CUDA device", 4 SMs, memory pools supported); streams that
// run their work in order on a thread of their own, each operation after a random delay of up
// to 200 us, so that the host races ahead of the "device" as it does on a GPU; events that
// mark a point in a stream (and stamp when the stream reached it, for cudaEventElapsedTime);
// pinned and device memory from the host heap (device memory filled with garbage); the
// thread's last error, as the runtime keeps it (every failed call sets it, cudaGetLastError
// returns and clears it, a sticky error never clears); and LaunchGatherBatch / LaunchBagBatch /
// LaunchScatterRows, which run RunBatchOnHost (gather_batch.h) / RunBagBatchOnHost
// (bag_batch.h) / ScatterRowsOnHost (scatter_unit.h), the kernels' per-unit code on the CPU,
// on the stream's timeline, and check the last error after the launch as the real launchers
// do. Faults are injected through fake_cuda_runtime.h: a sticky
// launch failure, device or pinned memory running out, a failed async copy, slow async copies,
// a hung device, a failed timing query, kernels the device cannot run.
//
// What it cannot prove: real asynchronous semantics (copies and kernels of one stream never
// overlap here, and a missing synchronisation may go unnoticed when the delays are kind),
// real memory (device pointers are host pointers, so a host access to device memory does not
// fault), and the real kernel (its launch configuration, the grid-stride loop, atomics).
// Those need a GPU: cuda_test and the benchmark on one.
//
// Only the runtime functions the executor calls are here; a new call fails to link.

#include "tests/cuda/testing/fake_cuda_runtime.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include <cuda_runtime.h>

#include "core/cuda/bag_batch.h"
#include "core/cuda/bag_kernel.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/gather_batch.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/scatter_kernel.h"
#include "core/status_macros.h"

namespace tensorcompute::cuda {
namespace {

constexpr int kDevices = 1;

std::atomic<bool> hung{false};  // fake::HangDevice

// A stream: a queue of operations run in order by its own thread.
class FakeStream {
 public:
  FakeStream() : worker_([this] { Loop(); }) {}

  // Runs everything queued, then stops the thread.
  ~FakeStream() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    changed_.SignalAll();
    worker_.join();
  }

  // Queues `op`; returns its position (what an event recorded after it waits for).
  uint64_t Push(std::function<void()> op) {
    uint64_t position;
    {
      absl::MutexLock lock(&mu_);
      ops_.push_back(std::move(op));
      position = ++enqueued_;
    }
    changed_.SignalAll();
    return position;
  }

  uint64_t enqueued() {
    absl::MutexLock lock(&mu_);
    return enqueued_;
  }

  // Whether the first `position` operations have run.
  bool Reached(uint64_t position) {
    absl::MutexLock lock(&mu_);
    return done_ >= position;
  }

 private:
  void Loop() {
    std::minstd_rand rng(std::random_device{}());
    while (true) {
      std::function<void()> op;
      {
        absl::MutexLock lock(&mu_);
        while (ops_.empty() && !stop_) changed_.Wait(&mu_);
        if (ops_.empty()) return;
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      absl::SleepFor(absl::Microseconds(rng() % 200));
      while (hung.load()) absl::SleepFor(absl::Milliseconds(1));  // fake::HangDevice
      op();
      {
        absl::MutexLock lock(&mu_);
        ++done_;
      }
      changed_.SignalAll();
    }
  }

  absl::Mutex mu_;
  absl::CondVar changed_;  // an operation was queued or has run, or stop_ was set
  std::deque<std::function<void()>> ops_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: starts after the members above exist
};

// An event: a position in a stream (none until recorded).
struct FakeEvent {
  FakeStream* stream = nullptr;
  uint64_t position = 0;
  // When the stream reached the event (ns since the epoch); 0 before. Shared with the stream's
  // operation that stamps it, which may run after the event is destroyed (as on a GPU).
  std::shared_ptr<std::atomic<int64_t>> reached_ns = std::make_shared<std::atomic<int64_t>>(0);
};

FakeStream* AsStream(cudaStream_t s) { return reinterpret_cast<FakeStream*>(s); }
FakeEvent* AsEvent(cudaEvent_t e) { return reinterpret_cast<FakeEvent*>(e); }

std::atomic<int> launches_before_failure{-1};  // -1: never fail
std::atomic<int> failing_allocations{0};
std::atomic<int> pinned_allocations_before_failure{-1};  // -1: never fail
std::atomic<int> async_copies_before_failure{-1};        // -1: never fail
std::atomic<int64_t> async_copy_delay_us{0};
std::atomic<int64_t> pinned_allocations{0};
std::atomic<int64_t> pinned_held{0};
std::atomic<bool> sticky{false};
std::atomic<int64_t> launches{0};
std::atomic<int> failing_elapsed_times{0};
std::atomic<bool> failing_probes{false};
std::atomic<int64_t> pool_trims{0};
thread_local cudaError_t last_error = cudaSuccess;

// What a failing runtime call does: sets the thread's last error and returns it.
cudaError_t Fail(cudaError_t error) {
  last_error = error;
  return error;
}

cudaError_t StickyOr(cudaError_t otherwise) {
  return sticky.load() ? Fail(cudaErrorLaunchFailure) : otherwise;
}

// Every host block standing for pinned or device memory, so that memory a test's executor
// abandons on a hung device (never freed, by design) stays reachable for LeakSanitizer; and
// the streams destroyed while the device hung, whose threads still hold their work. Both are
// let go at Reset.
absl::Mutex registry_mu;
absl::flat_hash_set<void*>& Blocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* blocks = new absl::flat_hash_set<void*>;
  return *blocks;
}
std::vector<std::unique_ptr<FakeStream>>& Graveyard() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* streams = new std::vector<std::unique_ptr<FakeStream>>;
  return *streams;
}

void* AlignedAlloc(size_t alignment, size_t bytes, int fill) {
  void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  std::memset(p, fill, bytes);
  absl::MutexLock lock(&registry_mu);
  Blocks().insert(p);
  return p;
}

void FreeBlock(void* p) {
  {
    absl::MutexLock lock(&registry_mu);
    Blocks().erase(p);
  }
  std::free(p);
}

}  // namespace

namespace fake {
void FailLaunchAfter(int n) { launches_before_failure = n; }
void FailNextAllocations(int n) { failing_allocations = n; }
int64_t Launches() { return launches.load(); }
void FailPinnedAllocationsAfter(int n) { pinned_allocations_before_failure = n; }
void FailAsyncCopyAfter(int n) { async_copies_before_failure = n; }
void DelayAsyncCopies(int64_t microseconds) { async_copy_delay_us = microseconds; }
int64_t PinnedAllocations() { return pinned_allocations.load(); }
int64_t PinnedBuffersHeld() { return pinned_held.load(); }
void HangDevice() { hung = true; }
void FailNextElapsedTime() { failing_elapsed_times = 1; }
void FailKernelProbes() { failing_probes = true; }
int64_t PoolTrims() { return pool_trims.load(); }
void Reset() {
  launches_before_failure = -1;
  failing_allocations = 0;
  pinned_allocations_before_failure = -1;
  async_copies_before_failure = -1;
  async_copy_delay_us = 0;
  sticky = false;
  hung = false;
  failing_elapsed_times = 0;
  failing_probes = false;
  // Streams destroyed while the device hung now run what they held (their frees included).
  std::vector<std::unique_ptr<FakeStream>> graveyard;
  {
    absl::MutexLock lock(&registry_mu);
    graveyard.swap(Graveyard());
  }
  graveyard.clear();
}
}  // namespace fake

namespace {

// Whether a launch is accepted: the injected sticky failure (FailLaunchAfter) applies to
// every kernel; then, as the real launchers do, the thread's last error is checked (and
// cleared) after the launch, so an error an earlier call left behind fails it too. Returns OK
// and counts the launch, or the failure.
absl::Status AcceptLaunch(const char* what) {
  if (sticky.load()) return CudaError(cudaErrorLaunchFailure, what);
  if (launches_before_failure.load() == 0) {
    sticky = true;
    return CudaError(cudaErrorLaunchFailure, what);
  }
  if (launches_before_failure.load() > 0) --launches_before_failure;
  const cudaError_t after = cudaGetLastError();
  if (after != cudaSuccess) return CudaError(after, what);
  ++launches;
  return absl::OkStatus();
}

absl::Status Probe(const char* what) {
  if (failing_probes.load()) {
    return CudaError(Fail(cudaErrorNoKernelImageForDevice), what);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProbeGatherKernels() { return Probe("probing the gather kernel"); }
absl::Status ProbeBagKernels() { return Probe("probing the EmbeddingBag kernel"); }
absl::Status ProbeScatterKernels() { return Probe("probing the row scatter kernel"); }

// The kernels' stand-ins: their host twins over the buffers, in stream order. The twins read
// the descriptor tables from `input`, as the kernels do; the layouts passed to them carry only
// the fields the launch arguments give.
absl::Status LaunchGatherBatch(const LaunchArgs& args, const uint8_t* input, uint8_t* output,
                               int /*sm_count*/, cudaStream_t stream) {
  TC_RETURN_IF_ERROR(AcceptLaunch("launching the gather kernel"));
  BatchLayout layout;
  layout.descs.resize(args.num_tasks);
  layout.descs_offset = args.descs_offset;
  layout.dims_offset = args.dims_offset;
  layout.flags_offset = args.flags_offset;
  layout.total_units = args.total_units;
  layout.fits_32bit = args.fits_32bit;
  AsStream(stream)->Push(
      [layout = std::move(layout), input, output] { RunBatchOnHost(layout, input, output); });
  return absl::OkStatus();
}

absl::Status LaunchBagBatch(const BagLaunchArgs& args, const uint8_t* input, uint8_t* output,
                            int /*sm_count*/, cudaStream_t stream) {
  TC_RETURN_IF_ERROR(AcceptLaunch("launching the EmbeddingBag kernel"));
  BagLayout layout;
  layout.descs.resize(args.num_tasks);
  layout.descs_offset = args.descs_offset;
  layout.flags_offset = args.flags_offset;
  layout.total_units = args.total_units;
  AsStream(stream)->Push(
      [layout = std::move(layout), input, output] { RunBagBatchOnHost(layout, input, output); });
  return absl::OkStatus();
}

absl::Status LaunchScatterRows(const ScatterArgs& args, const uint8_t* staged, uint8_t* table,
                               int /*sm_count*/, cudaStream_t stream) {
  TC_RETURN_IF_ERROR(AcceptLaunch("launching the row scatter kernel"));
  AsStream(stream)->Push([args, staged, table] { ScatterRowsOnHost(args, staged, table); });
  return absl::OkStatus();
}

}  // namespace tensorcompute::cuda

using tensorcompute::cuda::AlignedAlloc;
using tensorcompute::cuda::AsEvent;
using tensorcompute::cuda::AsStream;
using tensorcompute::cuda::async_copies_before_failure;
using tensorcompute::cuda::async_copy_delay_us;
using tensorcompute::cuda::Fail;
using tensorcompute::cuda::failing_allocations;
using tensorcompute::cuda::failing_elapsed_times;
using tensorcompute::cuda::FakeEvent;
using tensorcompute::cuda::FakeStream;
using tensorcompute::cuda::FreeBlock;
using tensorcompute::cuda::Graveyard;
using tensorcompute::cuda::hung;
using tensorcompute::cuda::kDevices;
using tensorcompute::cuda::last_error;
using tensorcompute::cuda::pinned_allocations;
using tensorcompute::cuda::pinned_allocations_before_failure;
using tensorcompute::cuda::pinned_held;
using tensorcompute::cuda::pool_trims;
using tensorcompute::cuda::registry_mu;
using tensorcompute::cuda::sticky;
using tensorcompute::cuda::StickyOr;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < kDevices ? cudaSuccess : Fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int device) {
  if (device < 0 || device >= kDevices) return Fail(cudaErrorInvalidDevice);
  *props = cudaDeviceProp{};
  std::strncpy(props->name, "Fake CUDA device", sizeof(props->name) - 1);
  props->major = 9;
  props->minor = 0;
  props->multiProcessorCount = 4;
  props->totalGlobalMem = size_t{80} << 30;
  props->memoryPoolsSupported = 1;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNoKernelImageForDevice:
      return "cudaErrorNoKernelImageForDevice";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t) { return "injected by the fake CUDA runtime"; }

cudaError_t cudaGetLastError() {
  if (sticky.load()) return cudaErrorLaunchFailure;
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return sticky.load() ? cudaErrorLaunchFailure : last_error; }

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  for (int n = pinned_allocations_before_failure.load(); n >= 0;) {
    if (n == 0) return Fail(cudaErrorMemoryAllocation);
    if (pinned_allocations_before_failure.compare_exchange_weak(n, n - 1)) break;
  }
  *p = AlignedAlloc(4096, bytes, 0x5a);
  pinned_allocations.fetch_add(1);
  pinned_held.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  pinned_held.fetch_sub(1);
  FreeBlock(p);
  return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps*) {
  *pool = reinterpret_cast<cudaMemPool_t>(new int(0));  // only its identity matters
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  delete reinterpret_cast<int*>(pool);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) {
  pool_trims.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t, cudaStream_t) {
  if (sticky.load()) return Fail(cudaErrorLaunchFailure);
  for (int n = failing_allocations.load(); n > 0;) {
    if (failing_allocations.compare_exchange_weak(n, n - 1)) {
      return Fail(cudaErrorMemoryAllocation);
    }
  }
  *p = AlignedAlloc(256, bytes, 0xcd);  // garbage, as fresh device memory would be
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  // A resident table's memory goes back on the per-thread stream, none of the fake's.
  if (stream == cudaStreamPerThread) {
    FreeBlock(p);
  } else {
    AsStream(stream)->Push([p] { FreeBlock(p); });
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(new FakeStream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  // A real destroy returns at once and the work finishes later; on a hung device, later
  // means after Reset.
  if (hung.load()) {
    absl::MutexLock lock(&registry_mu);
    Graveyard().emplace_back(AsStream(stream));
    return cudaSuccess;
  }
  delete AsStream(stream);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new FakeEvent);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete AsEvent(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  FakeEvent* e = AsEvent(event);
  e->stream = AsStream(stream);
  // A fresh stamp: an earlier recording still queued stamps the old one.
  e->reached_ns = std::make_shared<std::atomic<int64_t>>(0);
  // An op of its own, so that the stream stamps the time it reached the event.
  e->position = AsStream(stream)->Push(
      [stamp = e->reached_ns] { stamp->store(absl::ToUnixNanos(absl::Now())); });
  return StickyOr(cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  for (int n = failing_elapsed_times.load(); n > 0;) {
    if (failing_elapsed_times.compare_exchange_weak(n, n - 1)) return Fail(cudaErrorInvalidValue);
  }
  const int64_t from = AsEvent(start)->reached_ns->load();
  const int64_t to = AsEvent(end)->reached_ns->load();
  if (from == 0 || to == 0) return Fail(cudaErrorNotReady);
  *ms = static_cast<float>(to - from) / 1e6f;
  return StickyOr(cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const FakeEvent& e = *AsEvent(event);
  if (e.stream != nullptr && !e.stream->Reached(e.position)) return StickyOr(cudaErrorNotReady);
  return StickyOr(cudaSuccess);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (sticky.load()) return Fail(cudaErrorLaunchFailure);
  for (int n = async_copies_before_failure.load(); n >= 0;) {
    if (async_copies_before_failure.compare_exchange_weak(n, n - 1)) {
      if (n == 0) return Fail(cudaErrorInvalidValue);
      break;
    }
  }
  const int64_t delay_us = async_copy_delay_us.load();
  AsStream(stream)->Push([dst, src, bytes, delay_us] {
    if (delay_us > 0) absl::SleepFor(absl::Microseconds(delay_us));
    std::memcpy(dst, src, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (sticky.load()) return Fail(cudaErrorLaunchFailure);
  AsStream(stream)->Push([dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

}  // extern "C"
