// File: core/cuda/table_upload.h
//
// Copies resident tables into one device's memory (CudaExecutor::UploadTable) without stalling
// the batches that the device's stream slots are running: no call here synchronises the device
// or allocates the way the driver serialises (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost).
//   - A table's memory comes from a pool of its own, stream-ordered on the uploader's stream,
//     and goes back with cudaFreeAsync when the last holder of the copy lets go (the pool keeps
//     nothing idle, so the memory is the device's again).
//   - A table of at most kUploadDirectMaxBytes is copied from its own memory in one copy; a
//     larger one chunk by chunk through two pinned staging buffers (upload_chunks.h), made on
//     the first staged upload and kept for the next. When pinned memory cannot be had, the
//     table is copied from its own memory instead (slower, not an error).
//   - The uploader waits only for its own stream, and never past `timeout` (device_wait.h).
// An allocation that fails for want of memory is retried once after the device's pools gave
// back what they hold idle (MemoryPool::Trim).
//
// Thread-safety: Upload may be called from any thread; uploads to one device run one at a time
// (they share the staging). A copy's memory may be freed from any thread, after the uploader is
// gone too.

#ifndef TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_
#define TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/cuda/device_buffer.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"

namespace tensorcompute::cuda {

class TableUploader {
 public:
  // An uploader for device `ordinal` whose waits give up after `timeout`; `batch_pool` (not
  // owned, outlives the uploader; may be null) is the device's other pool, trimmed with the
  // uploader's own before an allocation is retried. INTERNAL naming the CUDA error when its
  // stream, events or pool cannot be made. REQUIRES: the calling thread's current device is
  // `ordinal`.
  static absl::StatusOr<std::unique_ptr<TableUploader>> Create(int ordinal, absl::Duration timeout,
                                                               const MemoryPool* batch_pool);

  // Frees the staging; abandons it (and the stream's work) when a wait timed out.
  ~TableUploader();

  // Copies `tensor` (a fixed-size dtype) to the device and waits for the copy. Returns the
  // copy (gpu = the ordinal, data = its device address, 256-byte aligned; freed when the last
  // holder lets go), or RESOURCE_EXHAUSTED when the device has no room even after trimming,
  // DEADLINE_EXCEEDED when the device did not finish within the timeout, INTERNAL naming any
  // other CUDA error. The calling thread's current device is left as it was.
  // REQUIRES: tensor.dtype() != kString.
  absl::StatusOr<core::DeviceCopy> Upload(const core::Tensor& tensor);

  // Gives back what the tables' pool holds idle.
  void TrimPool() const { pool_.Trim(); }

  // The device was found lost elsewhere (a stream slot's wait timed out): refuse later uploads
  // and never free the staging, whose cudaFreeHost could wait for the device forever.
  void DeviceLost();

  // --- implementation details below ---
 private:
  TableUploader(int ordinal, absl::Duration timeout, const MemoryPool* batch_pool)
      : ordinal_(ordinal), timeout_(timeout), batch_pool_(batch_pool) {}

  // `bytes` of device memory from the tables' pool, ordered on the stream (retried once after
  // a trim). REQUIRES: mu_ held; the current device is ordinal_.
  absl::StatusOr<void*> Allocate(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies `bytes` to `dst`, staged or direct, and waits for the copy.
  absl::Status Copy(void* dst, absl::Span<const uint8_t> bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether both staging buffers are there (made now if need be); false when pinned memory
  // cannot be had.
  bool HaveStaging() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StagedCopy(void* dst, absl::Span<const uint8_t> bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Wait(cudaEvent_t event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int ordinal_;
  const absl::Duration timeout_;
  const MemoryPool* const batch_pool_;
  MemoryPool pool_;
  absl::Mutex mu_;
  StreamHandle stream_ ABSL_GUARDED_BY(mu_);
  EventHandle sync_ ABSL_GUARDED_BY(mu_);       // the end of an upload's copies
  EventHandle staged_[2] ABSL_GUARDED_BY(mu_);  // the end of each staging buffer's last copy
  PinnedBuffer staging_[2] ABSL_GUARDED_BY(mu_);
  bool hung_ ABSL_GUARDED_BY(mu_) = false;  // a wait timed out: the stream may never drain
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_
