#include "core/cuda/device_buffer.h"

#include "absl/strings/str_cat.h"

#include "core/cuda/cuda_status.h"

namespace tensorcompute::cuda {

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(uint64_t bytes) {
  void* p = nullptr;
  TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes),
                          absl::StrCat("allocating ", bytes, " bytes of pinned host memory"));
  PinnedBuffer buffer;
  buffer.data_.reset(static_cast<uint8_t*>(p));
  buffer.size_ = bytes;
  return buffer;
}

absl::StatusOr<MemoryPool> MemoryPool::Create(int ordinal, uint64_t release_threshold) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t p = nullptr;
  TC_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&p, &props),
                          absl::StrCat("creating a memory pool on device ", ordinal));
  MemoryPool pool;
  pool.pool_.reset(p);
  TC_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &release_threshold),
      "setting the memory pool's release threshold");
  return pool;
}

void MemoryPool::Trim() const {
  if (pool_ != nullptr) (void)cudaMemPoolTrimTo(pool_.get(), 0);
}

absl::StatusOr<DeviceAllocation> DeviceAllocation::Allocate(uint64_t bytes, cudaMemPool_t pool,
                                                            cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t error = cudaMallocFromPoolAsync(&p, bytes, pool, stream);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so that later checks do not see it
    return absl::ResourceExhaustedError(
        absl::StrCat("out of device memory: cannot allocate ", bytes, " bytes"));
  }
  TC_CUDA_RETURN_IF_ERROR(error, absl::StrCat("allocating ", bytes, " bytes of device memory"));
  DeviceAllocation allocation;
  allocation.data_ =
      std::unique_ptr<uint8_t, FreeAsync>(static_cast<uint8_t*>(p), FreeAsync{stream});
  return allocation;
}

absl::StatusOr<StreamHandle> StreamHandle::Create() {
  cudaStream_t s = nullptr;
  TC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                          "creating a stream");
  StreamHandle stream;
  stream.stream_.reset(s);
  return stream;
}

absl::StatusOr<EventHandle> EventHandle::Create(unsigned int flags) {
  cudaEvent_t e = nullptr;
  TC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, flags), "creating an event");
  EventHandle event;
  event.event_.reset(e);
  return event;
}

}  // namespace tensorcompute::cuda
