#include "core/cuda/table_upload.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_wait.h"
#include "core/cuda/upload_chunks.h"
#include "core/status_macros.h"

namespace tensorcompute::cuda {
namespace {

// Makes `ordinal` the calling thread's current device until destroyed, then restores the
// previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal) {
    restore_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != ordinal;
    if (restore_) (void)cudaSetDevice(ordinal);
  }
  ~ScopedDevice() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TableUploader>> TableUploader::Create(int ordinal,
                                                                     absl::Duration timeout,
                                                                     const MemoryPool* batch_pool) {
  std::unique_ptr<TableUploader> uploader(new TableUploader(ordinal, timeout, batch_pool));
  TC_ASSIGN_OR_RETURN(uploader->pool_, MemoryPool::Create(ordinal, /*release_threshold=*/0));
  absl::MutexLock lock(&uploader->mu_);
  TC_ASSIGN_OR_RETURN(uploader->stream_, StreamHandle::Create());
  TC_ASSIGN_OR_RETURN(uploader->sync_, EventHandle::Create(cudaEventDisableTiming));
  for (EventHandle& event : uploader->staged_) {
    TC_ASSIGN_OR_RETURN(event, EventHandle::Create(cudaEventDisableTiming));
  }
  return uploader;
}

TableUploader::~TableUploader() {
  absl::MutexLock lock(&mu_);
  // cudaFreeHost would wait for copies that may never end.
  if (hung_) {
    for (PinnedBuffer& buffer : staging_) buffer.Abandon();
  }
}

void TableUploader::DeviceLost() {
  absl::MutexLock lock(&mu_);
  hung_ = true;
}

absl::StatusOr<core::DeviceCopy> TableUploader::Upload(const core::Tensor& tensor) {
  const absl::Span<const uint8_t> bytes = tensor.bytes();
  absl::MutexLock lock(&mu_);
  if (hung_) {
    return absl::DeadlineExceededError(
        absl::StrCat("GPU ", ordinal_, " stopped answering before this upload"));
  }
  ScopedDevice on_device(ordinal_);
  // At least one byte, so that every copy has an address (an empty table is never read).
  TC_ASSIGN_OR_RETURN(void* data, Allocate(std::max<uint64_t>(1, bytes.size())));
  if (absl::Status copied = Copy(data, bytes); !copied.ok()) {
    // Copy drained the stream unless it hung; memory a hung copy may still write is kept.
    if (!hung_) (void)cudaFreeAsync(data, stream_.get());
    return copied;
  }
  core::DeviceCopy copy;
  copy.gpu = ordinal_;
  copy.data = data;
  // The copy has finished, so the memory may go back on any stream, from any thread.
  copy.storage = std::shared_ptr<const void>(data, [ordinal = ordinal_](const void* p) {
    ScopedDevice on_device(ordinal);
    (void)cudaFreeAsync(const_cast<void*>(p), cudaStreamPerThread);
  });
  return copy;
}

absl::StatusOr<void*> TableUploader::Allocate(uint64_t bytes) {
  const std::string what = absl::StrCat("allocating a table on device ", ordinal_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    void* p = nullptr;
    const cudaError_t error = cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream_.get());
    if (error == cudaSuccess) return p;
    if (error != cudaErrorMemoryAllocation) return CudaError(error, what);
    (void)cudaGetLastError();  // not sticky: later checks must not see it
    pool_.Trim();
    if (batch_pool_ != nullptr) batch_pool_->Trim();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("CUDA device ", ordinal_, " has no room for a table of ", bytes, " bytes"));
}

absl::Status TableUploader::Copy(void* dst, absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return absl::OkStatus();
  const std::string what = absl::StrCat("copying a table to device ", ordinal_);
  absl::Status status;
  if (UploadIsStaged(bytes.size()) && HaveStaging()) {
    status = StagedCopy(dst, bytes);
  } else {
    // From pageable memory the copy returns once the driver staged the bytes, not once they
    // landed: the stream's event below says when.
    status = CudaError(
        cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_.get()),
        what);
  }
  if (hung_) return status;  // a wait already timed out: the stream may never drain
  // Whatever happened, nothing may still read the staging or write `dst` once this returns.
  const absl::Status drained = WaitForStream(stream_.get(), sync_.get(), timeout_, what);
  if (absl::IsDeadlineExceeded(drained)) hung_ = true;
  return status.ok() ? drained : status;
}

bool TableUploader::HaveStaging() {
  for (PinnedBuffer& buffer : staging_) {
    if (buffer.data() != nullptr) continue;
    absl::StatusOr<PinnedBuffer> made = PinnedBuffer::Allocate(kUploadMaxChunkBytes);
    if (!made.ok()) {
      (void)cudaGetLastError();  // a pageable copy follows; it must not see this error
      return false;
    }
    buffer = *std::move(made);
  }
  return true;
}

absl::Status TableUploader::StagedCopy(void* dst, absl::Span<const uint8_t> bytes) {
  const std::string what = absl::StrCat("copying a table to device ", ordinal_);
  const uint64_t total = bytes.size();
  const uint64_t chunk_bytes = UploadChunkBytes(total);
  const uint64_t chunks = UploadChunkCount(total, chunk_bytes);
  for (uint64_t i = 0; i < chunks; ++i) {
    const UploadChunk chunk = UploadChunkAt(total, chunk_bytes, i);
    if (chunk.reuses_buffer) TC_RETURN_IF_ERROR(Wait(staged_[chunk.buffer].get()));
    uint8_t* stage = staging_[chunk.buffer].data();
    std::memcpy(stage, bytes.data() + chunk.offset, chunk.bytes);
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + chunk.offset, stage,
                                            chunk.bytes, cudaMemcpyHostToDevice, stream_.get()),
                            what);
    TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_[chunk.buffer].get(), stream_.get()), what);
  }
  return absl::OkStatus();
}

absl::Status TableUploader::Wait(cudaEvent_t event) {
  absl::Status status =
      WaitForEvent(event, timeout_, absl::StrCat("copying a table to device ", ordinal_));
  if (absl::IsDeadlineExceeded(status)) hung_ = true;
  return status;
}

}  // namespace tensorcompute::cuda
