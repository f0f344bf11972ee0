#include "core/batching/batcher.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tensorcompute::batching {
namespace {

bool IsCancelled(const Task& task) { return task.cancel != nullptr && task.cancel->IsCancelled(); }

// Limits below 1 would never form or dispatch a batch; treat them as 1.
BatcherOptions Sanitized(BatcherOptions options) {
  options.max_batch_size = std::max<int64_t>(options.max_batch_size, 1);
  options.max_inflight_batches = std::max<int64_t>(options.max_inflight_batches, 1);
  return options;
}

}  // namespace

absl::Status OverloadedError(absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("server overloaded: ", why, "; retry with backoff"));
}

// ---- BatchQueue ----

BatchQueue::BatchQueue(const BatcherOptions& options) : options_(Sanitized(options)) {}

absl::Status BatchQueue::Add(std::unique_ptr<Task>& task, absl::Time now) {
  if (size() >= options_.queue_capacity) {
    return OverloadedError(absl::StrCat(size(), " requests queued"));
  }
  if (options_.deadline_admission && !queue_.empty() && task->deadline > now) {
    // A task already past its deadline is queued anyway, to be answered DEADLINE_EXCEEDED.
    const absl::Duration wait = ExpectedWait();
    if (now + wait > task->deadline) {
      return OverloadedError(absl::StrCat(
          size(), " requests queued, an expected wait of ",
          absl::FormatDuration(absl::Trunc(wait, absl::Microseconds(100))), ", longer than the ",
          absl::FormatDuration(absl::Trunc(task->deadline - now, absl::Microseconds(100))),
          " left before the deadline"));
    }
  }
  task->enqueue_time = now;
  earliest_deadline_ = std::min(earliest_deadline_, task->deadline);
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void BatchQueue::RecordBatchTime(int64_t size, absl::Duration elapsed) {
  if (size < 1) return;
  const absl::Duration per_task = elapsed / size;
  // An exponential moving average with weight 1/8 on the newest batch: it follows a change in
  // load within a few dozen batches and is not thrown by one slow batch.
  time_per_task_ = time_per_task_ == absl::ZeroDuration()
                       ? per_task
                       : time_per_task_ + (per_task - time_per_task_) / 8;
}

absl::Duration BatchQueue::ExpectedWait() const {
  return time_per_task_ * size() / options_.max_inflight_batches;
}

void BatchQueue::TakeDropped(absl::Time now, Batch* dropped) {
  // One pass that compacts the survivors in place and recomputes the cached earliest deadline.
  size_t kept = 0;
  absl::Time earliest = absl::InfiniteFuture();
  for (size_t i = 0; i < queue_.size(); ++i) {
    std::unique_ptr<Task>& task = queue_[i];
    if (IsCancelled(*task) || task->deadline <= now) {
      dropped->push_back(std::move(task));
      continue;
    }
    earliest = std::min(earliest, task->deadline);
    if (kept != i) queue_[kept] = std::move(task);
    ++kept;
  }
  queue_.resize(kept);
  earliest_deadline_ = earliest;
}

Batch BatchQueue::TakeReady(absl::Time now, bool flush, Batch* dropped) {
  TakeDropped(now, dropped);
  Batch batch;
  if (queue_.empty()) return batch;
  const bool ready = flush || size() >= options_.max_batch_size ||
                     queue_.front()->enqueue_time + options_.max_queue_delay <= now;
  if (!ready) return batch;
  const int64_t n = std::min(size(), options_.max_batch_size);
  batch.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  earliest_deadline_ = absl::InfiniteFuture();
  for (const std::unique_ptr<Task>& task : queue_) {
    earliest_deadline_ = std::min(earliest_deadline_, task->deadline);
  }
  return batch;
}

absl::Time BatchQueue::NextEventTime() const {
  if (queue_.empty()) return absl::InfiniteFuture();
  return std::min(queue_.front()->enqueue_time + options_.max_queue_delay, earliest_deadline_);
}

// ---- Batcher ----

Batcher::Batcher(const BatcherOptions& options, Executor* executor)
    : options_(Sanitized(options)),
      executor_(executor),
      queue_(options_),
      dispatcher_([this] { DispatchLoop(); }) {}

Batcher::~Batcher() {
  Stop();
  WaitIdle(absl::InfiniteDuration());
  {
    absl::MutexLock lock(&mu_);
    exit_ = true;
  }
  dispatcher_.join();
}

absl::Status Batcher::Schedule(std::unique_ptr<Task>& task) {
  assert(task != nullptr && task->done != nullptr);
  Batch direct;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("server is shutting down");
    // The clock is read under the lock so that enqueue times grow in queue order.
    const absl::Time now = absl::Now();
    // Fast path: nothing queued, an executor slot free and no batching delay: the dispatcher
    // would send this task alone at once, so hand it over here and spare the request one
    // thread wake-up (Executor::Run only enqueues). Cancelled or expired tasks take the
    // queue, which answers them.
    const bool direct_ok = options_.max_queue_delay <= absl::ZeroDuration() && queue_.size() == 0 &&
                           inflight_ < options_.max_inflight_batches && !IsCancelled(*task) &&
                           task->deadline > now;
    if (!direct_ok) return queue_.Add(task, now);
    task->enqueue_time = now;
    ++inflight_;
    direct.push_back(std::move(task));
  }
  if (options_.on_batch) options_.on_batch(1);
  RunBatch(std::move(direct));
  return absl::OkStatus();
}

void Batcher::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

bool Batcher::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.size() == 0 && inflight_ == 0 && answering_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void Batcher::NoticeCancel() {
  absl::MutexLock lock(&mu_);
  ++cancel_notices_;
}

int64_t Batcher::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

int64_t Batcher::inflight_batches() const {
  absl::MutexLock lock(&mu_);
  return inflight_;
}

void Batcher::DispatchLoop() {
  // What the dispatcher saw when it went to sleep. The wake-up condition is evaluated by every
  // thread that releases mu_, so it must be O(1): it asks only whether something changed that
  // could let the dispatcher act before `wake_at` (NextEventTime, or the earliest deadline
  // while no executor slot is free).
  struct Seen {
    int64_t size = 0;
    bool slot_free = false;
    bool stopping = false;
    int64_t cancel_notices = 0;
    absl::Time wake_at;
  } seen;
  auto should_wake = [this, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t size = queue_.size();
    const bool slot_free = inflight_ < options_.max_inflight_batches;
    if (exit_ || stopping_ != seen.stopping) return true;
    if (slot_free && !seen.slot_free) return true;
    if (cancel_notices_ != seen.cancel_notices && size > 0) return true;  // a queued task, maybe
    if (size > seen.size) {  // arrivals: a batch filled, a first task, or an earlier deadline
      if (slot_free && (seen.size == 0 || size >= options_.max_batch_size)) return true;
      if (queue_.EarliestDeadline() < seen.wake_at) return true;
    }
    return false;
  };

  while (true) {
    Batch batch;
    Batch dropped;
    absl::Time now;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        now = absl::Now();
        if (inflight_ < options_.max_inflight_batches) {
          batch = queue_.TakeReady(now, stopping_, &dropped);
        } else {
          queue_.TakeDropped(now, &dropped);
        }
        if (!batch.empty() || !dropped.empty()) break;
        if (exit_) return;
        seen.size = queue_.size();
        seen.slot_free = inflight_ < options_.max_inflight_batches;
        seen.stopping = stopping_;
        seen.cancel_notices = cancel_notices_;
        seen.wake_at = seen.slot_free ? queue_.NextEventTime() : queue_.EarliestDeadline();
        mu_.AwaitWithDeadline(absl::Condition(&should_wake), seen.wake_at);
      }
      if (!batch.empty()) ++inflight_;
      answering_ += static_cast<int64_t>(dropped.size());
    }

    // No lock from here on: dones, on_batch and the executor may take their own.
    if (!dropped.empty()) {
      const int64_t n = static_cast<int64_t>(dropped.size());
      Answer(std::move(dropped), now);
      absl::MutexLock lock(&mu_);
      answering_ -= n;
    }
    if (!batch.empty()) {
      if (options_.on_batch) options_.on_batch(static_cast<int64_t>(batch.size()));
      RunBatch(std::move(batch));
    }
  }
}

void Batcher::RunBatch(Batch batch) {
  const int64_t size = static_cast<int64_t>(batch.size());
  const absl::Time start = absl::Now();
  executor_->Run(std::move(batch), [this, size, start] {
    const absl::Duration elapsed = absl::Now() - start;
    absl::MutexLock lock(&mu_);
    queue_.RecordBatchTime(size, elapsed);
    --inflight_;
  });
}

void Batcher::Answer(Batch dropped, absl::Time now) {
  for (std::unique_ptr<Task>& task : dropped) {
    absl::Status status = IsCancelled(*task)
                              ? absl::CancelledError("request cancelled by the client while queued")
                              : absl::DeadlineExceededError(absl::StrCat(
                                    "deadline exceeded while queued (waited ",
                                    absl::FormatDuration(now - task->enqueue_time), ")"));
    std::move(task->done)(std::move(status));
    task.reset();
  }
}

}  // namespace tensorcompute::batching
