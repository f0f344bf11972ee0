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
//     the first staged upload (or update) and kept for the next. When pinned memory cannot be had,
//     the table is copied from its own memory instead (slower, not an error).
//   - The uploader waits only for its own stream, and never past `timeout` (device_wait.h).
// An allocation that fails for want of memory is retried once after the device's pools gave
// back what they hold idle (MemoryPool::Trim).
//
// UpdateRows rewrites rows of a copy in place (CudaExecutor::UpdateRows), on the same stream,
// through the same staging: the update is cut into windows (scatter_unit.h) of at most one
// staging buffer each; window k is packed into staging buffer k % 2 (pinned, or host memory
// when pinned memory cannot be had), copied into its half of a device scratch buffer from the
// device's batch pool, and written into the table by one scatter kernel, while the host packs
// window k + 1 into the other buffer. Rows too large for a window are copied one by one from the
// caller's memory. The update returns once the stream has drained.
//
// Thread-safety: Upload and UpdateRows may be called from any thread; uploads and updates to one
// device run one at a time (they share the staging). A copy's memory may be freed from any thread,
// after the uploader is gone too.

#ifndef TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_
#define TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

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

  // Writes packed row i (row_bytes bytes at packed[i * row_bytes]) to table + rows[i] *
  // row_bytes for every i, on `sm_count` multiprocessors, and waits until the device has done
  // it. Returns OK; RESOURCE_EXHAUSTED when the device has no room for the staged windows even
  // after trimming; DEADLINE_EXCEEDED when the device did not finish within the timeout (or an
  // earlier wait had timed out); INTERNAL naming any other CUDA error. On an error, any of the
  // rows may hold its old or its new bytes; no other byte of the table was written, and nothing
  // still reads `packed` (unless the device hung). The calling thread's current device is left
  // as it was.
  // REQUIRES: `table` is a copy this uploader made, of at least (max(rows) + 1) * row_bytes
  // bytes; rows are distinct and >= 0; packed.size() == rows.size() * row_bytes; no kernel
  // reads the rows meanwhile.
  absl::Status UpdateRows(uint8_t* table, absl::Span<const int64_t> rows, uint64_t row_bytes,
                          absl::Span<const uint8_t> packed, int sm_count);

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
  // `bytes` of scratch from the batch pool (the tables' pool without one), freed on the stream
  // when dropped; retried once after a trim. REQUIRES: as Allocate.
  absl::StatusOr<DeviceAllocation> AllocateScratch(uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back what both pools hold idle.
  void TrimPools() const;
  // UpdateRows's copies and launches, without the final wait.
  // `pageable`: host staging, used when pinned memory cannot be had.
  absl::Status WriteRows(uint8_t* table, absl::Span<const int64_t> rows, uint64_t row_bytes,
                         absl::Span<const uint8_t> packed, int sm_count,
                         std::vector<uint8_t> (&pageable)[2]) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drains the stream after `status` (a copy's or an update's), unless a wait already timed
  // out; returns `status` if it is an error, else the drain's.
  absl::Status Drain(absl::Status status, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies `bytes` to `dst`, staged or direct, and waits for the copy.
  absl::Status Copy(void* dst, absl::Span<const uint8_t> bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether both staging buffers are there (made now if need be); false when pinned memory
  // cannot be had.
  bool HaveStaging() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StagedCopy(void* dst, absl::Span<const uint8_t> bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Wait(cudaEvent_t event, absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int ordinal_;
  const absl::Duration timeout_;
  const MemoryPool* const batch_pool_;
  MemoryPool pool_;
  absl::Mutex mu_;
  StreamHandle stream_ ABSL_GUARDED_BY(mu_);
  EventHandle sync_ ABSL_GUARDED_BY(mu_);       // the end of an upload's copies
  EventHandle staged_[2] ABSL_GUARDED_BY(mu_);  // the end of each staging buffer's last use
  PinnedBuffer staging_[2] ABSL_GUARDED_BY(mu_);
  bool hung_ ABSL_GUARDED_BY(mu_) = false;  // a wait timed out: the stream may never drain
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_TABLE_UPLOAD_H_
