// File: core/thread_pool.h
//
// A fixed-size pool of worker threads, shared by everything in a process that computes
// (the core's large gathers, and later the server's executor). Two ways in:
//   Schedule(fn)             run fn on some worker, fire and forget;
//   ParallelFor(n, min, fn)  split [0, n) into chunks of at least `min` items and run them on
//                            the workers and on the calling thread; returns when all are done.
// ParallelFor never deadlocks when called from a worker (nested): the caller claims chunks
// itself and only ever waits for chunks that other threads are already running.
//
// Thread-safety: all methods may be called from any thread. The destructor finishes every
// scheduled task and joins the workers; REQUIRES: no call races with destruction.

#ifndef TENSORCOMPUTE_CORE_THREAD_POOL_H_
#define TENSORCOMPUTE_CORE_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace tensorcompute::core {

class ThreadPool {
 public:
  // Starts `num_threads` workers. num_threads <= 0 means one per hardware thread. Each worker
  // first calls `on_worker_start` (if set) on itself, before it runs any task: the place for
  // per-thread settings such as a lower scheduling priority (the server's --compute_nice).
  explicit ThreadPool(int num_threads, std::function<void()> on_worker_start = nullptr);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of worker threads.
  int size() const { return static_cast<int>(workers_.size()); }

  // Runs `fn` on a worker thread, in FIFO order with other scheduled work.
  void Schedule(absl::AnyInvocable<void() &&> fn);

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `min_chunk` long
  // (except possibly the last), using up to size() + 1 threads (the caller included).
  // Returns after every chunk has run. With n <= min_chunk or size() == 0 it runs fn(0, n)
  // inline. REQUIRES: n >= 0; fn is safe to call concurrently on disjoint ranges.
  void ParallelFor(int64_t n, int64_t min_chunk, absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<void()> on_worker_start_;  // read-only once workers start
  std::vector<std::thread> workers_;
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_THREAD_POOL_H_
