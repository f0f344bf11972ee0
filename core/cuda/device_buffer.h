// File: core/cuda/device_buffer.h
//
// RAII owners of the CUDA resources the executor holds, so that every error path frees what
// it made without cudaFree ladders (STYLE.md section 13): pinned host memory, a device's
// stream-ordered memory pool, allocations from that pool, streams and events. Each type is
// move-only, made by a factory that returns absl::StatusOr (INTERNAL naming the CUDA error on
// failure, see cuda_status.h), and releases its resource in its destructor, ignoring errors
// (a lost device fails every call; nothing useful can be done with the error then).
//
// Thread-safety: an object is used by one thread at a time; the CUDA calls behind them are
// thread-safe. Destructors run on any thread and need no current device.

#ifndef TENSORCOMPUTE_CORE_CUDA_DEVICE_BUFFER_H_
#define TENSORCOMPUTE_CORE_CUDA_DEVICE_BUFFER_H_

#include <cstdint>
#include <memory>
#include <type_traits>

#include "absl/status/statusor.h"
#include <cuda_runtime.h>

namespace tensorcompute::cuda {

// Page-locked host memory (cudaMallocHost): the staging buffers of asynchronous copies.
class PinnedBuffer {
 public:
  // `bytes` of pinned memory, or INTERNAL (cudaErrorMemoryAllocation when the host cannot
  // lock that much). REQUIRES: bytes > 0.
  static absl::StatusOr<PinnedBuffer> Allocate(uint64_t bytes);

  PinnedBuffer() = default;
  uint8_t* data() const { return data_.get(); }
  uint64_t size() const { return size_; }

  // Lets go of the memory without freeing it: for a device that stopped answering, whose
  // copies may still write here and whose cudaFreeHost would wait for it forever.
  void Abandon() {
    (void)data_.release();
    size_ = 0;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  uint64_t size_ = 0;
};

// A stream-ordered memory pool of one device. Memory freed with cudaFreeAsync stays in the
// pool, for the next allocation, up to the pool's release threshold; beyond it the pool gives
// memory back to the driver at the next synchronisation (of an event or a stream that waits
// for the free). The executor's batches use a pool that keeps everything (kKeepAll), so that
// steady-state batches allocate nothing from the driver; resident tables one that keeps
// nothing (their memory goes back as soon as a table is freed). Trim() gives back what a pool
// holds idle: what to do before retrying an allocation that failed for want of memory.
class MemoryPool {
 public:
  static constexpr uint64_t kKeepAll = ~uint64_t{0};

  // A new pool on device `ordinal` with `release_threshold` bytes kept, or INTERNAL.
  static absl::StatusOr<MemoryPool> Create(int ordinal, uint64_t release_threshold);

  MemoryPool() = default;
  cudaMemPool_t get() const { return pool_.get(); }

  // Gives every idle byte back to the driver (cudaMemPoolTrimTo 0); memory that frees still
  // queued on a stream will return stays until they ran. Errors are ignored: nothing better
  // can be done than to retry the allocation.
  void Trim() const;

 private:
  struct Destroy {
    void operator()(cudaMemPool_t p) const { cudaMemPoolDestroy(p); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaMemPool_t>, Destroy> pool_;
};

// Device memory from a MemoryPool, allocated and freed in the order of one stream
// (cudaMallocFromPoolAsync / cudaFreeAsync): usable by work queued on that stream after the
// allocation, and returned to the pool once the work queued before the free has finished.
// Pool allocations are at least 256-byte aligned.
class DeviceAllocation {
 public:
  // `bytes` from `pool`, ordered on `stream`; RESOURCE_EXHAUSTED when the device is out of
  // memory; INTERNAL for other CUDA errors. REQUIRES: bytes > 0; pool and stream outlive the
  // allocation.
  static absl::StatusOr<DeviceAllocation> Allocate(uint64_t bytes, cudaMemPool_t pool,
                                                   cudaStream_t stream);

  DeviceAllocation() = default;
  uint8_t* data() const { return data_.get(); }

 private:
  struct FreeAsync {
    cudaStream_t stream;  // value-initialised (null) in a default-constructed allocation
    void operator()(uint8_t* p) const { cudaFreeAsync(p, stream); }
  };
  std::unique_ptr<uint8_t, FreeAsync> data_;
};

// A non-blocking stream (no implicit synchronisation with the legacy default stream) of the
// current device.
class StreamHandle {
 public:
  static absl::StatusOr<StreamHandle> Create();

  StreamHandle() = default;
  cudaStream_t get() const { return stream_.get(); }

 private:
  struct Destroy {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, Destroy> stream_;
};

// An event of the current device, created with `flags` (cudaEventCreateWithFlags).
class EventHandle {
 public:
  static absl::StatusOr<EventHandle> Create(unsigned int flags);

  EventHandle() = default;
  cudaEvent_t get() const { return event_.get(); }

 private:
  struct Destroy {
    void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, Destroy> event_;
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_DEVICE_BUFFER_H_
