// File: core/cuda/stream_slot.h
//
// One stream of one device with everything a batch needs on its way through it: two pinned
// staging halves (with an event each), a worker thread and its queue. CudaExecutor keeps
// streams_per_device of these per device and hands each batch to the least loaded one; a
// slot runs one batch at a time, so batches on different slots overlap their copies and
// kernels.
//
// A batch's round trip (stream_slot.cc explains the details):
//   PlanBatch (gathers) or PlanBagBatch (pooled lookups) -> one device allocation (input and
//   output buffers) from the device's pool -> input pieces (indices, offsets and weights, and
//   params unless the task's table has a copy on this device) memcpy'd into a staging half and
//   sent host -> device, half by half -> flags reset -> LaunchGatherBatch or LaunchBagBatch ->
//   output sent device -> host half by half, each task answered as soon as its last byte
//   arrived (make_output, copy, done) -> free.
// A batch smaller than a half costs one pack, one H2D copy, one launch and one D2H copy.
//
// Errors: a CUDA error answers the batch's unanswered tasks with INTERNAL naming it. When the
// device is out of memory, the device's pools give back what they hold idle and the allocation
// is tried once more; if it fails again the batch goes to the fallback executor. A sticky
// error, or a wait for the device longer than Hooks::timeout (device_wait.h: a hung kernel, a
// lost GPU), takes the device out of service (on_device_lost, then DeviceState::lost): the
// batch's unanswered tasks, and every later batch the slot receives, go to the fallback
// executor. The slot then never frees its pinned memory (a hung device would never let
// cudaFreeHost return).
//
// Thread-safety: Enqueue and load may be called from any thread. The slot's CUDA resources
// are used only by its worker thread.

#ifndef TENSORCOMPUTE_CORE_CUDA_STREAM_SLOT_H_
#define TENSORCOMPUTE_CORE_CUDA_STREAM_SLOT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/batching/executor.h"
#include "core/cuda/bag_batch.h"
#include "core/cuda/cuda_executor.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/device_state.h"
#include "core/cuda/gather_batch.h"

namespace tensorcompute::cuda {

// What a slot is handed: tasks (non-empty; all gathers or all pooled lookups; every one served
// by the GPU: a gather of a fixed-size dtype with output rows and slices, a lookup with bags and
// rows of at least one element) and what to call once every one of them has been answered.
struct SlotWork {
  batching::Batch tasks;
  absl::AnyInvocable<void() &&> done;
};

class StreamSlot {
 public:
  struct Hooks {
    // Takes batches the slot cannot run (device out of memory or lost). Not owned.
    batching::Executor* fallback = nullptr;
    // Called, from the worker thread, when the slot finds the device lost (a sticky error or
    // a wait past `timeout`), before the device is marked lost.
    std::function<void(DeviceState& device, const absl::Status& error)> on_device_lost;
    // The longest wait for the device (a copy, a kernel) before it is taken for lost.
    absl::Duration timeout = absl::Seconds(10);
    // Optional: each computed batch's stages (CudaExecutorOptions::on_batch_stages).
    std::function<void(int device, const GpuBatchStages& stages)> on_batch_stages;
  };

  // A slot on `device` (not owned; outlives the slot) with `staging_bytes` of pinned staging
  // (two halves of staging_bytes / 2, rounded down to 4 KiB), its worker thread started.
  // Returns INTERNAL naming the CUDA error when a resource cannot be made.
  // REQUIRES: the calling thread's current device is device->ordinal;
  // staging_bytes >= 8 KiB; hooks.fallback non-null.
  static absl::StatusOr<std::unique_ptr<StreamSlot>> Create(DeviceState* device,
                                                            uint64_t staging_bytes, Hooks hooks);

  // Runs everything already enqueued, then joins the worker and frees the resources (but the
  // pinned memory of a lost device).
  ~StreamSlot();

  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;

  // Queues `work` for the worker; never blocks on the device.
  void Enqueue(SlotWork work);

  // Batches queued or running on this slot.
  int64_t load() const { return load_.load(std::memory_order_relaxed); }

  DeviceState& device() const { return *device_; }

  // --- implementation details below ---
 private:
  struct Half {
    PinnedBuffer buffer;
    EventHandle idle;  // recorded after the last copy that uses `buffer`
  };

  StreamSlot(DeviceState* device, Hooks hooks) : device_(device), hooks_(std::move(hooks)) {}

  struct DevicePass;  // stream_slot.cc

  void Loop();
  void Process(SlotWork work);
  // Runs `tasks` (all gathers or all pooled lookups) on the device, answering (and resetting)
  // each one whose output arrived. Returns OK once every task was answered, or the error that
  // stopped it (the tasks not yet answered are still in `tasks`).
  absl::Status Execute(batching::Batch& tasks);
  // Records stage mark `i` on the stream (only with on_batch_stages); false if it failed.
  bool Mark(int i);
  // Reports the marks' intervals once the last is reached (on_batch_stages).
  void ReportStages();
  // The pass of a batch of gathers (gather_batch.h) or of pooled lookups (bag_batch.h).
  DevicePass GatherPass(const batching::Batch& tasks) const;
  DevicePass BagPass(const batching::Batch& tasks) const;
  absl::Status CopyIn(const DevicePass& pass, uint8_t* device_input);
  absl::Status CopyOut(const DevicePass& pass, batching::Batch& tasks,
                       const uint8_t* device_output);
  // Takes the device out of service: on_device_lost (which may report it), then `lost`.
  void MarkLost(const absl::Status& error);

  DeviceState* const device_;
  const Hooks hooks_;
  StreamHandle stream_;
  Half halves_[2];
  // Timing events of a batch's stages: before copy-in, after it, after the kernel, after
  // copy-out (only with on_batch_stages).
  EventHandle marks_[4];
  EventHandle sync_;  // what waits for the whole stream record and wait on
  uint64_t half_bytes_ = 0;
  int next_half_ = 0;  // the half the next input chunk goes through
  std::atomic<int64_t> load_{0};

  absl::Mutex mu_;
  absl::CondVar wake_;
  std::deque<SlotWork> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_STREAM_SLOT_H_
