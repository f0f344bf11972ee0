#include "core/cuda/stream_slot.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/time/clock.h"

#include "core/batching/cpu_executor.h"
#include "core/cuda/bag_kernel.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/device_wait.h"
#include "core/cuda/gather_kernel.h"
#include "core/cuda/task_routing.h"
#include "core/status_macros.h"

namespace tensorcompute::cuda {
namespace {

// The worker polls these events with a deadline (device_wait.h), so they need no timing and
// no blocking synchronisation.
constexpr unsigned kEventFlags = cudaEventDisableTiming;
constexpr uint64_t kHalfGranularity = 4096;

// Task i's verdict once its flag is known: OK, or the bad-index error (the same text as the
// CPU's: core::BadIndexError, core::EmbeddingBagBadIndexError). A flag past the last index
// value cannot come from a kernel.
absl::Status Verdict(const batching::Task& task, uint64_t flag) {
  if (const core::EmbeddingBagPlan* bag = task.bag()) return BagVerdict(*bag, task.indices, flag);
  if (flag == kNoBadIndex) return absl::OkStatus();
  const core::GatherPlan& plan = *task.gather();
  if (flag >= static_cast<uint64_t>(plan.num_index_values())) {
    return absl::InternalError("the gather kernel reported an impossible bad-index position");
  }
  return core::BadIndexError(plan, task.indices, static_cast<int64_t>(flag));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StreamSlot>> StreamSlot::Create(DeviceState* device,
                                                               uint64_t staging_bytes,
                                                               Hooks hooks) {
  std::unique_ptr<StreamSlot> slot(new StreamSlot(device, std::move(hooks)));
  TC_ASSIGN_OR_RETURN(slot->stream_, StreamHandle::Create());
  slot->half_bytes_ = staging_bytes / 2 / kHalfGranularity * kHalfGranularity;
  for (Half& half : slot->halves_) {
    TC_ASSIGN_OR_RETURN(half.buffer, PinnedBuffer::Allocate(slot->half_bytes_));
    TC_ASSIGN_OR_RETURN(half.idle, EventHandle::Create(kEventFlags));
  }
  TC_ASSIGN_OR_RETURN(slot->sync_, EventHandle::Create(kEventFlags));
  if (slot->hooks_.on_batch_stages != nullptr) {
    for (EventHandle& mark : slot->marks_) {
      TC_ASSIGN_OR_RETURN(mark, EventHandle::Create(cudaEventDefault));
    }
  }
  slot->worker_ = std::thread([s = slot.get()] { s->Loop(); });
  return slot;
}

StreamSlot::~StreamSlot() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  worker_.join();
  if (device_->lost.load()) {
    // The device may never finish what it was given: cudaFreeHost would wait for it forever.
    for (Half& half : halves_) half.buffer.Abandon();
    return;
  }
  // Every batch waited for its last copy; this only waits for the frees queued after it.
  (void)WaitForStream(stream_.get(), sync_.get(), hooks_.timeout, "a slot's last frees");
}

void StreamSlot::Enqueue(SlotWork work) {
  load_.fetch_add(1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
  }
  wake_.Signal();
}

void StreamSlot::Loop() {
  const cudaError_t set = cudaSetDevice(device_->ordinal);
  if (set != cudaSuccess) {
    // Without its device the slot cannot run anything: Process sends everything to fallback.
    MarkLost(CudaError(set, "selecting the device on a worker thread"));
  }
  while (true) {
    SlotWork work;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) wake_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    Process(std::move(work));
    load_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void StreamSlot::Process(SlotWork work) {
  if (device_->lost.load()) {
    hooks_.fallback->Run(std::move(work.tasks), std::move(work.done));
    return;
  }
  // Tasks may have waited in this queue: drop those nobody wants any more.
  const absl::Time now = absl::Now();
  batching::Batch live;
  for (std::unique_ptr<batching::Task>& task : work.tasks) {
    absl::Status wanted = batching::CheckStillWanted(*task, now);
    if (wanted.ok()) {
      live.push_back(std::move(task));
    } else {
      std::move(task->done)(std::move(wanted));
    }
  }
  work.tasks.clear();
  if (live.empty()) {
    std::move(work.done)();
    return;
  }

  const absl::Status status = Execute(live);
  if (status.ok()) {
    std::move(work.done)();
    return;
  }
  // The staging halves must be idle before the next batch touches them, and the stream's
  // answer tells whether the context survived.
  bool lost = absl::IsDeadlineExceeded(status);
  if (!lost) {
    const absl::Status drained =
        WaitForStream(stream_.get(), sync_.get(), hooks_.timeout, "a failed batch's copies");
    // A sticky error fails every call alike, this query too.
    lost = absl::IsDeadlineExceeded(drained) || IsStickyError(cudaEventQuery(sync_.get()));
  }
  (void)cudaGetLastError();  // a non-sticky error must not surface in the next batch's checks
  if (lost) MarkLost(status);
  batching::Batch rest;
  for (std::unique_ptr<batching::Task>& task : live) {
    if (task != nullptr) rest.push_back(std::move(task));
  }
  // A lost device, or out of device memory before anything was computed: the CPU answers
  // what is left (a task whose output was made keeps it: make_output is not called again).
  if (lost || (absl::IsResourceExhausted(status) && rest.size() == live.size())) {
    if (rest.empty()) {
      std::move(work.done)();
    } else {
      hooks_.fallback->Run(std::move(rest), std::move(work.done));
    }
    return;
  }
  for (std::unique_ptr<batching::Task>& task : rest) std::move(task->done)(status);
  rest.clear();
  std::move(work.done)();
}

void StreamSlot::MarkLost(const absl::Status& error) {
  if (hooks_.on_device_lost) hooks_.on_device_lost(*device_, error);
  device_->lost.store(true);
}

// One device pass over tasks of one kind: the input buffer's pieces, where the flags and each
// task's output lie in the output buffer, and the kernel launch.
struct StreamSlot::DevicePass {
  std::vector<uint8_t> tables;  // the first input piece
  std::vector<Piece> pieces;
  uint64_t input_bytes = 0;
  uint64_t flags_offset = 0;
  uint64_t output_bytes = 0;
  std::vector<uint64_t> output_offsets;  // per task
  absl::AnyInvocable<absl::Status(const uint8_t* input, uint8_t* output, int sm_count,
                                  cudaStream_t stream)>
      launch;
};

StreamSlot::DevicePass StreamSlot::GatherPass(const batching::Batch& tasks) const {
  const size_t n = tasks.size();
  std::vector<const core::GatherPlan*> plans(n);
  std::vector<const core::TensorView*> params(n), indices(n);
  std::vector<const void*> resident(n);
  for (size_t i = 0; i < n; ++i) {
    plans[i] = tasks[i]->gather();
    params[i] = &tasks[i]->params;
    indices[i] = &tasks[i]->indices;
    resident[i] = ResidentParams(*tasks[i], device_->ordinal);
  }
  const BatchLayout layout = PlanBatch(plans, resident);
  DevicePass pass;
  pass.tables = PackTables(layout);
  pass.pieces = InputPieces(layout, pass.tables, params, indices);
  pass.input_bytes = layout.input_bytes;
  pass.flags_offset = layout.flags_offset;
  pass.output_bytes = layout.output_bytes;
  for (const GatherDesc& d : layout.descs) pass.output_offsets.push_back(d.output_offset);
  LaunchArgs args;
  args.num_tasks = static_cast<int>(n);
  args.total_units = layout.total_units;
  args.fits_32bit = layout.fits_32bit;
  args.descs_offset = layout.descs_offset;
  args.dims_offset = layout.dims_offset;
  args.flags_offset = layout.flags_offset;
  args.uniform_vector_bytes = layout.uniform_vector_bytes;
  pass.launch = [args](const uint8_t* input, uint8_t* output, int sm_count, cudaStream_t stream) {
    return LaunchGatherBatch(args, input, output, sm_count, stream);
  };
  return pass;
}

StreamSlot::DevicePass StreamSlot::BagPass(const batching::Batch& tasks) const {
  std::vector<BagTaskInputs> inputs(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const batching::Task& task = *tasks[i];
    const core::EmbeddingBagPlan& plan = *task.bag();
    inputs[i].plan = &plan;
    inputs[i].params = &task.params;
    inputs[i].indices = &task.indices;
    inputs[i].offsets = plan.fixed_bags() ? nullptr : &task.offsets;
    inputs[i].weights = plan.weighted() ? &task.weights : nullptr;
    inputs[i].resident_params = ResidentParams(task, device_->ordinal);
  }
  const BagLayout layout = PlanBagBatch(inputs);
  DevicePass pass;
  pass.tables = PackBagTables(layout);
  pass.pieces = BagInputPieces(layout, pass.tables, inputs);
  pass.input_bytes = layout.input_bytes;
  pass.flags_offset = layout.flags_offset;
  pass.output_bytes = layout.output_bytes;
  for (const BagDesc& d : layout.descs) pass.output_offsets.push_back(d.output_offset);
  BagLaunchArgs args;
  args.num_tasks = static_cast<int>(tasks.size());
  args.total_units = layout.total_units;
  args.descs_offset = layout.descs_offset;
  args.flags_offset = layout.flags_offset;
  pass.launch = [args](const uint8_t* input, uint8_t* output, int sm_count, cudaStream_t stream) {
    return LaunchBagBatch(args, input, output, sm_count, stream);
  };
  return pass;
}

absl::Status StreamSlot::Execute(batching::Batch& tasks) {
  const size_t n = tasks.size();
  DevicePass pass = tasks.front()->bag() != nullptr ? BagPass(tasks) : GatherPass(tasks);
  cudaStream_t stream = stream_.get();

  // One allocation for both buffers; the pool keeps it for the next batch after the free.
  const uint64_t output_at = AlignUp(pass.input_bytes);
  const uint64_t bytes = output_at + pass.output_bytes;
  absl::StatusOr<DeviceAllocation> buffers =
      DeviceAllocation::Allocate(bytes, device_->pool.get(), stream);
  if (absl::IsResourceExhausted(buffers.status())) {
    device_->TrimPools();  // memory held idle after a burst, or by freed tables
    buffers = DeviceAllocation::Allocate(bytes, device_->pool.get(), stream);
  }
  if (!buffers.ok()) return buffers.status();
  uint8_t* input = buffers->data();
  uint8_t* output = input + output_at;

  bool timed = Mark(0);
  TC_RETURN_IF_ERROR(CopyIn(pass, input));
  timed = timed && Mark(1);
  TC_RETURN_IF_ERROR(
      CudaError(cudaMemsetAsync(output + pass.flags_offset, 0xff, n * sizeof(uint64_t), stream),
                "resetting the bad-index flags"));
  // The launch is checked with cudaGetLastError, which also reports an error an earlier call
  // on this thread left behind (a failed timing query, say): clear it first. A sticky error
  // is reported again by the launch itself.
  (void)cudaGetLastError();
  TC_RETURN_IF_ERROR(pass.launch(input, output, device_->sm_count, stream));
  timed = timed && Mark(2);
  TC_RETURN_IF_ERROR(CopyOut(pass, tasks, output));
  // CopyOut waited for the last copy: the stream is idle, so the last mark is reached at once.
  if (timed && Mark(3)) ReportStages();
  return absl::OkStatus();
}

bool StreamSlot::Mark(int i) {
  if (hooks_.on_batch_stages == nullptr) return false;
  return cudaEventRecord(marks_[i].get(), stream_.get()) == cudaSuccess;
}

void StreamSlot::ReportStages() {
  if (!WaitForEvent(marks_[3].get(), hooks_.timeout, "a batch's last stage mark").ok()) return;
  float ms[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (cudaEventElapsedTime(&ms[i], marks_[i].get(), marks_[i + 1].get()) != cudaSuccess) {
      (void)cudaGetLastError();  // timing is optional: its error is no one's
      return;
    }
  }
  GpuBatchStages stages;
  stages.copy_in = absl::Microseconds(static_cast<int64_t>(ms[0] * 1000.0f));
  stages.kernel = absl::Microseconds(static_cast<int64_t>(ms[1] * 1000.0f));
  stages.copy_out = absl::Microseconds(static_cast<int64_t>(ms[2] * 1000.0f));
  hooks_.on_batch_stages(device_->ordinal, stages);
}

// The input buffer is sent in windows of one staging half: every piece (tables, params,
// indices) that overlaps the window is memcpy'd into the half at its offset, then the half
// goes to the device with one copy. While it travels, the other half is filled: the host waits
// for a half's event only before refilling it.
absl::Status StreamSlot::CopyIn(const DevicePass& pass, uint8_t* device_input) {
  const std::vector<Piece>& pieces = pass.pieces;
  size_t p = 0;
  for (uint64_t w = 0; w < pass.input_bytes; w += half_bytes_) {
    const uint64_t end = std::min(w + half_bytes_, pass.input_bytes);
    Half& half = halves_[next_half_];
    next_half_ ^= 1;
    TC_RETURN_IF_ERROR(WaitForEvent(half.idle.get(), hooks_.timeout, "a staging buffer's copy"));
    for (; p < pieces.size() && pieces[p].offset < end; ++p) {
      const Piece& piece = pieces[p];
      const uint64_t from = std::max(piece.offset, w);
      const uint64_t to = std::min(piece.offset + piece.bytes, end);
      if (to > from) {
        std::memcpy(half.buffer.data() + (from - w), piece.src + (from - piece.offset), to - from);
      }
      if (piece.offset + piece.bytes > end) break;  // continues in the next window
    }
    TC_RETURN_IF_ERROR(CudaError(cudaMemcpyAsync(device_input + w, half.buffer.data(), end - w,
                                                 cudaMemcpyHostToDevice, stream_.get()),
                                 "copying inputs to the device"));
    TC_RETURN_IF_ERROR(
        CudaError(cudaEventRecord(half.idle.get(), stream_.get()), "recording a staging event"));
  }
  return absl::OkStatus();
}

// The output buffer comes back in windows of one staging half, two in flight. It starts with
// the flags, so every task's verdict is known before its first output byte arrives. A task is
// answered as soon as the window holding its last byte has been copied out: make_output,
// bytes copied straight from the staging half into its output, done.
absl::Status StreamSlot::CopyOut(const DevicePass& pass, batching::Batch& tasks,
                                 const uint8_t* device_output) {
  const uint64_t total = pass.output_bytes;
  const uint64_t windows = (total + half_bytes_ - 1) / half_bytes_;
  auto fetch = [&](uint64_t k) {
    Half& half = halves_[k % 2];
    const uint64_t w = k * half_bytes_;
    absl::Status status = CudaError(
        cudaMemcpyAsync(half.buffer.data(), device_output + w, std::min(half_bytes_, total - w),
                        cudaMemcpyDeviceToHost, stream_.get()),
        "copying outputs from the device");
    if (status.ok()) {
      status =
          CudaError(cudaEventRecord(half.idle.get(), stream_.get()), "recording a staging event");
    }
    return status;
  };
  for (uint64_t k = 0; k < std::min<uint64_t>(windows, 2); ++k) TC_RETURN_IF_ERROR(fetch(k));

  const size_t n = tasks.size();
  std::vector<uint64_t> flags(n, kNoBadIndex);
  const uint64_t flags_end = pass.flags_offset + n * sizeof(uint64_t);
  std::vector<absl::Status> verdicts(n);
  size_t next = 0;       // the first task not yet answered (tasks are in buffer order)
  bool started = false;  // whether tasks[next] has its verdict and output slot
  for (uint64_t k = 0; k < windows; ++k) {
    const Half& half = halves_[k % 2];
    const uint64_t w = k * half_bytes_;
    const uint64_t end = std::min(w + half_bytes_, total);
    TC_RETURN_IF_ERROR(WaitForEvent(half.idle.get(), hooks_.timeout, "copying outputs back"));
    if (w < flags_end) {
      const uint64_t from = std::max(w, pass.flags_offset);
      const uint64_t to = std::min(end, flags_end);
      std::memcpy(reinterpret_cast<uint8_t*>(flags.data()) + (from - pass.flags_offset),
                  half.buffer.data() + (from - w), to - from);
    }
    for (; next < n && pass.output_offsets[next] < end; ++next, started = false) {
      batching::Task& task = *tasks[next];
      const uint64_t at = pass.output_offsets[next];
      const uint64_t bytes = static_cast<uint64_t>(batching::OutputBytes(task.plan));
      if (!started) {
        started = true;
        verdicts[next] = Verdict(task, flags[next]);
        if (verdicts[next].ok() && task.make_output) {
          task.output = std::move(task.make_output)();
          task.make_output = nullptr;  // a fallback that finishes the task uses this output
        }
        if (verdicts[next].ok() && task.output.data.size() != bytes) {
          verdicts[next] = absl::InternalError("the output slot does not match the plan's size");
        }
      }
      const uint64_t from = std::max(at, w);
      const uint64_t to = std::min(at + bytes, end);
      if (verdicts[next].ok() && to > from) {
        std::memcpy(task.output.data.data() + (from - at), half.buffer.data() + (from - w),
                    to - from);
      }
      if (at + bytes > end) break;  // continues in the next window
      std::move(task.done)(std::move(verdicts[next]));
      tasks[next].reset();
    }
    if (k + 2 < windows) TC_RETURN_IF_ERROR(fetch(k + 2));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::cuda
