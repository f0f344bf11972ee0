#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

namespace tensorcompute::core {

ThreadPool::ThreadPool(int num_threads, std::function<void()> on_worker_start)
    : on_worker_start_(std::move(on_worker_start)) {
  if (num_threads <= 0) {
    num_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Schedule(absl::AnyInvocable<void() &&> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void ThreadPool::WorkerLoop() {
  if (on_worker_start_) on_worker_start_();
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, and every scheduled task has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t threads = size() + 1;  // the caller works too
  if (size() == 0 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven progress; no more than n / min_chunk of them.
  // wanted <= n / min_chunk keeps every chunk (but the last) at least min_chunk long.
  const int64_t wanted = std::max<int64_t>(1, std::min<int64_t>(n / min_chunk, threads * 4));
  const int64_t chunk = (n + wanted - 1) / wanted;
  const int64_t num_chunks = (n + chunk - 1) / chunk;  // every chunk non-empty

  // Helpers may start after this call returned (if the caller finished every chunk first), so
  // the shared state lives as long as the last helper holding it. `fn` is only called for a
  // claimed chunk, and the caller waits for every claimed chunk, so `fn` never dangles.
  struct State {
    int64_t num_chunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    absl::Mutex mu;
  };
  auto state = std::make_shared<State>();
  state->num_chunks = num_chunks;
  auto run_chunks = [state, n, chunk, num_chunks, fn]() {
    while (true) {
      const int64_t c = state->next.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) return;
      const int64_t begin = c * chunk;
      fn(begin, std::min(n, begin + chunk));
      if (state->done.fetch_add(1, std::memory_order_acq_rel) + 1 == num_chunks) {
        absl::MutexLock lock(&state->mu);  // wakes the caller's Await below
      }
    }
  };
  const int64_t helpers = std::min<int64_t>(size(), num_chunks - 1);
  for (int64_t i = 0; i < helpers; ++i) Schedule(run_chunks);
  run_chunks();
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](State* s) { return s->done.load(std::memory_order_acquire) == s->num_chunks; },
      state.get()));
}

}  // namespace tensorcompute::core
