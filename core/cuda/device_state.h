// File: core/cuda/device_state.h
//
// One device as the executor uses it, shared by its stream slots (stream_slot.h) and its table
// uploader (table_upload.h): its ordinal and description, the pool that batches allocate from,
// the uploader of its resident tables, and whether it is still in service. A device leaves
// service, for good, after a sticky CUDA error or a wait past the executor's timeout (a hung
// kernel, a lost GPU): its slots then send everything to the fallback executor.
//
// Thread-safety: the fields are set before any slot runs and read-only afterwards, except
// `lost`, which any thread may read and the slots set; the pool and uploader are thread-safe.

#ifndef TENSORCOMPUTE_CORE_CUDA_DEVICE_STATE_H_
#define TENSORCOMPUTE_CORE_CUDA_DEVICE_STATE_H_

#include <atomic>
#include <memory>
#include <string>

#include "core/cuda/device_buffer.h"
#include "core/cuda/table_upload.h"

namespace tensorcompute::cuda {

struct DeviceState {
  int ordinal = 0;
  int sm_count = 1;
  std::string description;  // CudaDeviceDescription()
  MemoryPool pool;          // device memory of every batch (freed memory stays cached)
  std::unique_ptr<TableUploader> uploader;
  std::atomic<bool> lost{false};

  // Gives back to the driver what the device's pools hold idle: before an allocation that
  // failed for want of memory is tried again.
  void TrimPools() const {
    pool.Trim();
    if (uploader != nullptr) uploader->TrimPool();
  }
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_DEVICE_STATE_H_
