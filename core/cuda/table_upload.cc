#include "core/cuda/table_upload.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_wait.h"
#include "core/cuda/scatter_kernel.h"
#include "core/cuda/scatter_unit.h"
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

absl::Status TableUploader::UpdateRows(uint8_t* table, absl::Span<const int64_t> rows,
                                       uint64_t row_bytes, absl::Span<const uint8_t> packed,
                                       int sm_count) {
  if (rows.empty() || row_bytes == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (hung_) {
    return absl::DeadlineExceededError(
        absl::StrCat("GPU ", ordinal_, " stopped answering before this update"));
  }
  ScopedDevice on_device(ordinal_);
  // Host staging when pinned memory cannot be had: kept until the stream has drained.
  std::vector<uint8_t> pageable[2];
  absl::Status written = WriteRows(table, rows, row_bytes, packed, sm_count, pageable);
  return Drain(std::move(written), absl::StrCat("updating rows of a table on device ", ordinal_));
}

absl::Status TableUploader::WriteRows(uint8_t* table, absl::Span<const int64_t> rows,
                                      uint64_t row_bytes, absl::Span<const uint8_t> packed,
                                      int sm_count, std::vector<uint8_t> (&pageable)[2]) {
  const std::string what = absl::StrCat("updating rows of a table on device ", ordinal_);
  const uint64_t n = rows.size();
  const uint64_t per_window = ScatterWindowRows(row_bytes, kUploadMaxChunkBytes);
  if (per_window == 0) {
    // Rows larger than a staging buffer: one copy each, straight from the caller's memory.
    for (uint64_t i = 0; i < n; ++i) {
      TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table + static_cast<uint64_t>(rows[i]) * row_bytes,
                                              packed.data() + i * row_bytes, row_bytes,
                                              cudaMemcpyHostToDevice, stream_.get()),
                              what);
    }
    return absl::OkStatus();
  }
  const uint64_t windows = UploadChunkCount(n, per_window);
  const uint64_t first_window =
      ScatterStagedBytes(PlanScatterWindow(std::min(n, per_window), row_bytes));
  const uint64_t slot_bytes = (first_window + 255) / 256 * 256;  // each slot 256-byte aligned
  const int slots = UploadStagingBuffers(windows);
  TC_ASSIGN_OR_RETURN(DeviceAllocation scratch, AllocateScratch(slot_bytes * slots));
  uint8_t* host[2] = {nullptr, nullptr};
  const bool pinned = HaveStaging();
  for (int b = 0; b < slots; ++b) {
    if (!pinned) pageable[b].resize(first_window);
    host[b] = pinned ? staging_[b].data() : pageable[b].data();
  }
  // Window w goes through host buffer and scratch slot w % 2; the event recorded after its
  // kernel says when both may take window w + 2.
  for (uint64_t w = 0; w < windows; ++w) {
    const int b = static_cast<int>(w % 2);
    if (w >= 2) TC_RETURN_IF_ERROR(Wait(staged_[b].get(), what));
    const uint64_t first = w * per_window;
    const ScatterArgs args = PlanScatterWindow(std::min(per_window, n - first), row_bytes);
    StageScatterWindow(args, rows.data() + first, packed.data() + first * row_bytes, host[b]);
    uint8_t* staged = scratch.data() + b * slot_bytes;
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staged, host[b], ScatterStagedBytes(args),
                                            cudaMemcpyHostToDevice, stream_.get()),
                            what);
    TC_RETURN_IF_ERROR(LaunchScatterRows(args, staged, table, sm_count, stream_.get()));
    TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_[b].get(), stream_.get()), what);
  }
  return absl::OkStatus();  // the scratch goes back to its pool after the last kernel
}

absl::StatusOr<DeviceAllocation> TableUploader::AllocateScratch(uint64_t bytes) {
  const MemoryPool& pool = batch_pool_ != nullptr ? *batch_pool_ : pool_;
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<DeviceAllocation> scratch =
        DeviceAllocation::Allocate(bytes, pool.get(), stream_.get());
    if (scratch.ok() || !absl::IsResourceExhausted(scratch.status())) return scratch;
    TrimPools();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "CUDA device ", ordinal_, " has no room to stage an update of ", bytes, " bytes"));
}

void TableUploader::TrimPools() const {
  pool_.Trim();
  if (batch_pool_ != nullptr) batch_pool_->Trim();
}

absl::StatusOr<void*> TableUploader::Allocate(uint64_t bytes) {
  const std::string what = absl::StrCat("allocating a table on device ", ordinal_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    void* p = nullptr;
    const cudaError_t error = cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream_.get());
    if (error == cudaSuccess) return p;
    if (error != cudaErrorMemoryAllocation) return CudaError(error, what);
    (void)cudaGetLastError();  // not sticky: later checks must not see it
    TrimPools();
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
  return Drain(std::move(status), what);
}

absl::Status TableUploader::Drain(absl::Status status, absl::string_view what) {
  if (hung_) return status;  // a wait already timed out: the stream may never drain
  // Whatever happened, nothing may still read the staging or write the table once this returns.
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
    if (chunk.reuses_buffer) TC_RETURN_IF_ERROR(Wait(staged_[chunk.buffer].get(), what));
    uint8_t* stage = staging_[chunk.buffer].data();
    std::memcpy(stage, bytes.data() + chunk.offset, chunk.bytes);
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + chunk.offset, stage,
                                            chunk.bytes, cudaMemcpyHostToDevice, stream_.get()),
                            what);
    TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_[chunk.buffer].get(), stream_.get()), what);
  }
  return absl::OkStatus();
}

absl::Status TableUploader::Wait(cudaEvent_t event, absl::string_view what) {
  absl::Status status = WaitForEvent(event, timeout_, what);
  if (absl::IsDeadlineExceeded(status)) hung_ = true;
  return status;
}

}  // namespace tensorcompute::cuda
