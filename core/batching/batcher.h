// File: core/batching/batcher.h
//
// The dynamic batcher: a bounded queue of Tasks from which batches of up to max_batch_size
// are formed and handed to an Executor. It knows no gRPC and no CUDA.
//
//   Schedule(task)  never blocks. On OK it has taken the task; when the queue is full (or the
//                   batcher is stopping) it returns UNAVAILABLE and the task stays with the
//                   caller (TF Serving's BatchScheduler contract).
//   fast path       with max_queue_delay 0, a task that finds the queue empty and an executor
//                   slot free goes to the executor from Schedule() itself (Run only enqueues),
//                   saving the dispatcher's wake-up; everything else takes the queue.
//   a batch leaves  when fewer than max_inflight_batches are running on the executor and
//                   either max_batch_size tasks are queued or the oldest has waited
//                   max_queue_delay. So an idle server never makes a request wait, and a busy
//                   one batches whatever piled up while the executor was busy.
//   dropped tasks   a queued task whose cancel flag is set, or whose deadline has passed, is
//                   answered CANCELLED / DEADLINE_EXCEEDED and never reaches the executor.
//                   A deadline wakes the dispatcher by itself; a cancel flag is set behind the
//                   batcher's back, so whoever sets it calls NoticeCancel(), and the task is
//                   answered at once rather than when an executor slot frees (a client that
//                   cancels everything must not fill the queue, and the memory its requests
//                   hold, while the executor is busy).
//   deadline        Schedule() also refuses (UNAVAILABLE) a task that would wait in the queue
//   admission       longer than the time left before its deadline, by an estimate: tasks queued
//                   × the recent time per task / max_inflight_batches. Such a task would only
//                   expire in the queue; refusing it at once tells the client while it can
//                   still retry elsewhere, and keeps the queue for tasks that can make it.
//
// BatchQueue is the batch-forming logic alone (no threads, no clock: time is an argument), so
// tests drive it with fake time. Batcher wraps it with one dispatcher thread and real time.
//
// Thread-safety: every method of Batcher may be called from any thread. BatchQueue is not
// thread-safe (Batcher guards it). No lock is held while calling the executor or a done.

#ifndef TENSORCOMPUTE_CORE_BATCHING_BATCHER_H_
#define TENSORCOMPUTE_CORE_BATCHING_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/batching/executor.h"
#include "core/batching/task.h"

namespace tensorcompute::batching {

// UNAVAILABLE "server overloaded: <why>; retry with backoff". Every overload refusal of the
// server is worded by this one function: the queue's here, the in-flight byte budget's in
// server/admission/byte_budget.h.
absl::Status OverloadedError(absl::string_view why);

struct BatcherOptions {
  // Most tasks in one batch. Default 32.
  int64_t max_batch_size = 32;

  // How long the oldest queued task may wait for its batch to fill while an executor slot is
  // free. Default 0: dispatch at once; batches then form from what arrives while the
  // executor is busy (see max_inflight_batches).
  absl::Duration max_queue_delay = absl::ZeroDuration();

  // Most tasks waiting in the queue. Schedule() beyond it returns UNAVAILABLE
  // ("server overloaded: N requests queued; retry with backoff"). Default 1024.
  int64_t queue_capacity = 1024;

  // Most batches running on the executor at once. Default 2.
  int64_t max_inflight_batches = 2;

  // Deadline admission: refuse a task whose expected wait in the queue (see the file comment)
  // is longer than the time left before its deadline, with UNAVAILABLE ("server overloaded:
  // N requests queued, an expected wait of X, longer than the Y left before the deadline;
  // retry with backoff"). Never refuses a task that finds the queue empty. Default true.
  bool deadline_admission = true;

  // Called (on the dispatcher thread, no lock held) for every batch handed to the executor,
  // with its size; for metrics. May be empty.
  std::function<void(int64_t batch_size)> on_batch;
};

// The batch-forming logic, without threads or a clock. Not thread-safe.
class BatchQueue {
 public:
  explicit BatchQueue(const BatcherOptions& options);

  // Adds `task` (stamping task->enqueue_time = now) unless the queue holds queue_capacity
  // tasks, or (deadline_admission) the queue is not empty and the task, not yet expired, has
  // less time left before its deadline than ExpectedWait(). Returns OK, having moved from
  // `task`, or UNAVAILABLE with `task` untouched.
  absl::Status Add(std::unique_ptr<Task>& task, absl::Time now);

  // Tells the estimator that a batch of `size` tasks took `elapsed` from its hand-over to the
  // executor to its last answer. The time per task is a moving average over recent batches.
  void RecordBatchTime(int64_t size, absl::Duration elapsed);

  // The expected wait of a task added now: size() × time per task / max_inflight_batches
  // (zero until a batch has been recorded).
  absl::Duration ExpectedWait() const;

  // Moves every queued task that is cancelled, or whose deadline is <= now, into *dropped
  // (in queue order). Then, if a batch is ready at `now` (max_batch_size queued, or the oldest
  // enqueued at or before now - max_queue_delay, or `flush` and the queue is not empty),
  // removes up to max_batch_size of the oldest tasks and returns them; else returns an empty
  // batch. Does not look at max_inflight_batches (Batcher does).
  Batch TakeReady(absl::Time now, bool flush, Batch* dropped);

  // TakeReady's first step alone: moves every cancelled or expired (deadline <= now) task into
  // *dropped, in queue order. For when no executor slot is free to take a batch.
  void TakeDropped(absl::Time now, Batch* dropped);

  // The earliest deadline among queued tasks; InfiniteFuture() when empty. O(1).
  absl::Time EarliestDeadline() const { return earliest_deadline_; }

  // The earliest time at which TakeReady may return a batch without new tasks: the oldest
  // task's enqueue_time + max_queue_delay, or the earliest deadline among queued tasks if
  // sooner; InfiniteFuture() when empty.
  absl::Time NextEventTime() const;

  int64_t size() const { return static_cast<int64_t>(queue_.size()); }

 private:
  BatcherOptions options_;
  std::deque<std::unique_ptr<Task>> queue_;
  absl::Time earliest_deadline_ = absl::InfiniteFuture();  // min deadline over queue_
  absl::Duration time_per_task_ = absl::ZeroDuration();    // moving average; 0: none yet
};

class Batcher {
 public:
  // Starts the dispatcher thread. `executor` is not owned and must outlive the Batcher.
  Batcher(const BatcherOptions& options, Executor* executor);

  // Stop(), waits until every accepted task is answered (executors always finish), then joins
  // the dispatcher.
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `task` for execution. Never blocks. Returns OK (task moved from), or UNAVAILABLE
  // with `task` untouched: "server overloaded: N requests queued; retry with backoff" when
  // the queue is full, "server is shutting down" after Stop().
  // REQUIRES: task->done is set.
  absl::Status Schedule(std::unique_ptr<Task>& task);

  // A queued task's cancel flag may have been set: wakes the dispatcher to answer such tasks
  // now, even while no executor slot is free. Cheap (one lock); a notice for a task that is no
  // longer queued costs one scan of the queue. Never blocks on the executor.
  void NoticeCancel();

  // Refuses new tasks from now on, and dispatches every queued task without waiting for
  // batches to fill. Returns at once; WaitIdle() waits for the work to finish.
  void Stop();

  // Blocks until no task is queued or running, or `timeout` passes. Returns true if idle.
  bool WaitIdle(absl::Duration timeout);

  // Tasks waiting in the queue now (not counting those on the executor).
  int64_t queue_depth() const;
  // The most requests the queue holds (BatcherOptions::queue_capacity).
  int64_t queue_capacity() const { return options_.queue_capacity; }
  const BatcherOptions& options() const { return options_; }

  // Batches handed to the executor and not yet finished.
  int64_t inflight_batches() const;

 private:
  void DispatchLoop();
  void Answer(Batch dropped, absl::Time now);
  // Hands `batch` (inflight_ already counted) to the executor; its batch_done records the
  // batch's time for deadline admission and frees the slot. REQUIRES: mu_ not held.
  void RunBatch(Batch batch);

  const BatcherOptions options_;
  Executor* const executor_;
  mutable absl::Mutex mu_;
  BatchQueue queue_ ABSL_GUARDED_BY(mu_);
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t answering_ ABSL_GUARDED_BY(mu_) = 0;       // dropped tasks taken, done not yet called
  int64_t cancel_notices_ ABSL_GUARDED_BY(mu_) = 0;  // NoticeCancel calls so far
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dispatcher_;
};

}  // namespace tensorcompute::batching

#endif  // TENSORCOMPUTE_CORE_BATCHING_BATCHER_H_
