// File: core/cuda/cuda_executor.h
//
// The GPU executor: implements batching::Executor on NVIDIA GPUs. This header is free of CUDA
// (the server includes it); builds without nvcc compile a stand-in whose CudaDeviceCount()
// is 0 and whose Create() returns UNIMPLEMENTED, so callers need no #ifdefs.
//
// One batch, one round trip: the batch's GPU tasks are laid out by PlanBatch
// (gather_batch.h, gathers) or PlanBagBatch (bag_batch.h, pooled EmbeddingBag lookups), their
// inputs copied host -> device in one transfer (chunked through the stream's pinned staging
// buffer when larger), computed by one kernel launch over a descriptor table of all of them,
// and their outputs and bad-index flags copied back in one transfer. A batch holding both
// gathers and lookups is split: the gathers make one such pass and the lookups another (each
// on the least loaded slot; they may overlap on two streams), so that each kernel stays simple.
// A lookup's result is byte-identical to core::ExecuteEmbeddingBag's (bag_unit.h), and its
// bad-index error has the CPU's words.
// Each stream slot (streams_per_device on every device used) runs one batch at a time on its
// own worker thread, so copies and kernels of different batches overlap across streams.
// Device memory comes from the device's stream-ordered pool (cudaMallocAsync with the release
// threshold raised so that freed memory is kept): no cudaMalloc per request. An allocation that
// fails for want of memory is retried once after the pools gave back what they hold idle.
//
// Resident tables (core/tensor_registry.h): a task whose Task::table has a device copy
// (UploadTable) is sent to a slot of that copy's device when one is in service (a batch
// goes to the device holding most of its resident tasks), and there the kernel reads the
// copy in place, for gathers and lookups alike: the batch's input buffer carries only
// descriptors and indices (and a lookup's offsets and weights), so one H2D copy of all
// indices, one launch and one D2H copy of all outputs serve every task on the table. A task whose
// table has no copy, or a copy on another device, has its params copied like an inline task's (or
// goes to `fallback`, as below).
//
// What the GPU does not serve goes to `fallback` (the CPU executor), transparently, within
// the same batch (task_routing.h): strings; gathers with no output rows or empty slices and
// lookups with no bags or rows of no elements (only their indices need checking); slices the
// kernel cannot count; lookups with a bag longer than max_bag_length; tasks larger than
// max_task_bytes; a batch for which the device has no memory left. The slots' work is in
// stream_slot.h.
//
// Errors: a CUDA error fails the batch's GPU tasks with INTERNAL naming the CUDA error
// ("cudaErrorInvalidValue: ..."). A sticky error (the context is unusable), or a wait for the
// device longer than device_timeout (a hung kernel, a GPU that fell off the bus), takes the device
// out of service: the tasks of the batch not yet answered go to `fallback`, its slots stop taking
// batches, later batches go to the other devices or to `fallback`, and on_device_lost is called
// once with the error. Nothing crashes, and nothing waits for the device forever (shutdown
// included).
//
// Thread-safety: Run may be called concurrently; slots() and healthy() from any thread.

#ifndef TENSORCOMPUTE_CORE_CUDA_CUDA_EXECUTOR_H_
#define TENSORCOMPUTE_CORE_CUDA_CUDA_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/batching/executor.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"

namespace tensorcompute::cuda {

// A batch's stages on a GPU (CudaExecutorOptions::on_batch_stages).
struct GpuBatchStages {
  absl::Duration copy_in;
  absl::Duration kernel;
  absl::Duration copy_out;
};

struct CudaExecutorOptions {
  // Devices to use (CUDA ordinals); empty (default) means every visible device.
  std::vector<int> devices;
  // Streams per device, each with its own staging buffers and worker thread. In [1, 64];
  // default 4.
  int streams_per_device = 4;
  // Pinned host staging per stream, in bytes, used as two halves (one filled while the other
  // is in flight); larger transfers are chunked through them. At least 64 KiB; default 16 MiB.
  int64_t staging_bytes = int64_t{16} << 20;
  // Tasks whose params + indices (+ offsets + weights) + output exceed this run on
  // `fallback`; params on a resident copy on the device do not count. Default 1 GiB.
  int64_t max_task_bytes = int64_t{1} << 30;
  // Lookups with a bag of more indices than this run on `fallback`: one GPU thread walks a
  // whole bag, in order, so a bag of millions would hold a slot for seconds. Default 4096.
  int64_t max_bag_length = 4096;
  // The longest wait for a device (a batch's copy or kernel, a table's upload) before the
  // device is taken for lost. Default 10 s; at least 1 ms.
  absl::Duration device_timeout = absl::Seconds(10);
  // Takes strings and whatever the GPU does not serve. Not owned; must outlive the executor.
  // REQUIRES: non-null.
  batching::Executor* fallback = nullptr;
  // Called once per device that a sticky CUDA error took out of service (from a worker
  // thread); `healthy()` is false once no device is left.
  std::function<void(int device, const absl::Status& error)> on_device_lost;
  // Optional: called after every batch the device computed (from a worker thread), with the
  // time its stages took on the stream, measured with CUDA events: copy_in (staging and
  // host-to-device copies of the inputs), kernel (the flags reset and the launch) and copy_out
  // (device-to-host copies, each task's output handed over as its bytes arrive). Must not
  // block: it delays the slot's next batch.
  std::function<void(int device, const GpuBatchStages& stages)> on_batch_stages;
};

// Visible CUDA devices; 0 when there is no driver, no device, or no CUDA in this build.
// Never fails and never crashes (the runtime is linked statically; the driver is optional).
int CudaDeviceCount();

// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" for device `ordinal`, or UNAVAILABLE saying why
// there is no such device ("cudaErrorInsufficientDriver: ..." without a driver, "CUDA device 2
// does not exist (1 visible)"), UNIMPLEMENTED in a build without CUDA. So when
// CudaDeviceCount() is 0, CudaDeviceDescription(0)'s error is the reason.
absl::StatusOr<std::string> CudaDeviceDescription(int ordinal);

class CudaExecutor : public batching::Executor {
 public:
  // Returns the executor with its streams, buffers and worker threads ready, or UNAVAILABLE
  // when a device cannot be used (none visible, bad ordinal, out of memory, kernels this build
  // has no code for), UNIMPLEMENTED in a build without CUDA, INVALID_ARGUMENT for bad options
  // (checked first) or an ordinal listed twice.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const CudaExecutorOptions& options);

  // Waits for every batch that was handed over to finish on the GPU (parts handed to
  // `fallback` finish there), then frees the devices' resources. REQUIRES: no Run() call is
  // in progress or will follow (stop the batcher first).
  ~CudaExecutor() override;

  void Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) override;

  // Copies `tensor` (a fixed-size dtype) into memory of device `device` (one of this
  // executor's), for a resident table, and waits for the copy, without stalling the batches
  // running on the device (table_upload.h says how). Returns the copy (gpu = device, data = its
  // device address, 256-byte aligned; freed when the last holder lets go, after the executor
  // too), or INVALID_ARGUMENT for a kString tensor (strings stay on the CPU) or a device that
  // is not the executor's, RESOURCE_EXHAUSTED when the device has no room, UNAVAILABLE when the
  // device is out of service (or this upload found it hung or broken, which takes it out),
  // INTERNAL naming any other CUDA error. The calling thread's current device is left as it
  // was. Thread-safe.
  absl::StatusOr<core::DeviceCopy> UploadTable(int device, const core::Tensor& tensor);

  // Rewrites rows of a resident table's device copy in place: packed row i (row_bytes bytes at
  // packed[i * row_bytes]) goes to copy.data + rows[i] * row_bytes, for every i. Many rows cost
  // a few transfers and kernel launches (table_upload.h says how). Synchronous: returns once the
  // device has written every row, so that a kernel started afterwards, on any stream of the
  // device, reads the new bytes. Uploads to the device wait meanwhile; batches do not.
  // Returns OK (at once for no rows); RESOURCE_EXHAUSTED when the device has no room to stage
  // the update; UNAVAILABLE "GPU N is out of service" when the device is out of service, or
  // this update found it hung or broken (which takes it out, as for UploadTable: its copies
  // are then never read again, the CPU serves their tables); INVALID_ARGUMENT for a copy on no
  // device of this executor, or `packed` not rows.size() * row_bytes bytes; INTERNAL naming any
  // other CUDA error. After an error any of `rows` may hold its old or its new bytes (no other
  // byte was written): retry, or stop reading the copy. The calling thread's current device is
  // left as it was. Thread-safe.
  // REQUIRES: `copy` was made by this executor's UploadTable and is still held; rows are
  // distinct and in [0, the table's rows); row_bytes is the table's row size; no kernel that
  // reads the copy is queued or running (every task reading it has been answered), and none
  // starts before this returns.
  absl::Status UpdateRows(const core::DeviceCopy& copy, absl::Span<const int64_t> rows,
                          int64_t row_bytes, absl::Span<const uint8_t> packed);

  absl::string_view name() const override;

  // Stream slots in service (what the batcher's max_inflight_batches should be); 0 once
  // every device was lost.
  int slots() const;
  // Whether any device is still in service.
  bool healthy() const;

  // --- implementation details below ---
  class Impl;

 private:
  explicit CudaExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_CUDA_EXECUTOR_H_
