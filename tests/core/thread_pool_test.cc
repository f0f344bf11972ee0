// Tests of core/thread_pool.h: exact coverage by ParallelFor, nesting without deadlock,
// Schedule, and the destructor's promise to finish scheduled work.

#include "core/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tensorcompute::core {
namespace {

// Runs ParallelFor(n, min_chunk) and checks that every item ran exactly once and that the
// chunks were non-empty, in range and disjoint. Returns the number of chunks shorter than
// min_chunk.
int64_t ExpectExactCover(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int64_t> short_chunks{0};
  std::atomic<int64_t> bad_ranges{0};
  pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) {
      bad_ranges.fetch_add(1);
      return;
    }
    if (end - begin < min_chunk) short_chunks.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  EXPECT_EQ(bad_ranges.load(), 0) << "n=" << n << " min_chunk=" << min_chunk;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(hits[i].load(), 1) << "item " << i << " n=" << n << " min_chunk=" << min_chunk;
    if (hits[i].load() != 1) break;
  }
  return short_chunks.load();
}

TEST(ThreadPool, SizeIsTheRequestedThreadCount) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(4).size(), 4);
  EXPECT_GE(ThreadPool(0).size(), 1);  // one per hardware thread
  EXPECT_GE(ThreadPool(-2).size(), 1);
}

TEST(ThreadPool, EveryWorkerRunsTheStartHookOnItselfBeforeAnyTask) {
  absl::Mutex mu;
  std::set<std::thread::id> started;
  bool task_saw_hook = false;
  {
    ThreadPool pool(3, [&] {
      absl::MutexLock lock(&mu);
      started.insert(std::this_thread::get_id());
    });
    absl::Notification ran;
    pool.Schedule([&] {
      absl::MutexLock lock(&mu);
      task_saw_hook = started.count(std::this_thread::get_id()) == 1;
      ran.Notify();
    });
    ran.WaitForNotification();
  }  // joins the workers: every one has started
  absl::MutexLock lock(&mu);
  EXPECT_EQ(started.size(), 3u);
  EXPECT_EQ(started.count(std::this_thread::get_id()), 0u);
  EXPECT_TRUE(task_saw_hook);
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1000, 4097, 100000}) {
      for (int64_t min_chunk : {0, 1, 2, 3, 10, 64, 1000, 200000}) {
        ExpectExactCover(pool, n, min_chunk);
      }
    }
  }
}

TEST(ThreadPool, ChunksAreAtLeastMinChunkExceptPossiblyTheLast) {
  // thread_pool.h: "chunks ... each at least `min_chunk` long (except possibly the last)".
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {16, 17, 100, 1000, 4097, 100000}) {
      for (int64_t min_chunk : {2, 3, 10, 64, 1000}) {
        EXPECT_LE(ExpectExactCover(pool, n, min_chunk), 1)
            << "threads=" << threads << " n=" << n << " min_chunk=" << min_chunk;
      }
    }
  }
}

TEST(ThreadPool, ParallelForWithZeroItemsCallsNothing) {
  ThreadPool pool(2);
  std::atomic<int> calls{0};
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 0);
}

TEST(ThreadPool, SmallRangeRunsInlineOnTheCaller) {
  ThreadPool pool(2);
  std::thread::id ran_on;
  int calls = 0;
  pool.ParallelFor(5, 5, [&](int64_t begin, int64_t end) {
    ran_on = std::this_thread::get_id();
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 5);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ThreadPool, ParallelForUsesSeveralThreads) {
  ThreadPool pool(4);
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  // Chunks that take a while, so that the workers get a share.
  pool.ParallelFor(64, 1, [&](int64_t, int64_t) {
    absl::SleepFor(absl::Milliseconds(2));
    absl::MutexLock lock(&mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, NestedParallelForFromWorkersDoesNotDeadlock) {
  ThreadPool pool(2);
  constexpr int64_t kOuter = 16, kInner = 1000;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.ParallelFor(kOuter, 1, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      pool.ParallelFor(kInner, 7, [&](int64_t ib, int64_t ie) {
        for (int64_t i = ib; i < ie; ++i) hits[o * kInner + i].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ParallelForInsideAScheduledTaskDoesNotDeadlock) {
  ThreadPool pool(1);  // the only worker runs the task and must not wait on itself
  absl::Notification done;
  std::atomic<int64_t> sum{0};
  pool.Schedule([&] {
    pool.ParallelFor(10000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(sum.load(), 10000 * 9999 / 2);
}

TEST(ThreadPool, ScheduleRunsEveryTask) {
  ThreadPool pool(3);
  constexpr int kTasks = 1000;
  std::atomic<int> ran{0};
  absl::Notification all_done;
  for (int i = 0; i < kTasks; ++i) {
    pool.Schedule([&] {
      if (ran.fetch_add(1) + 1 == kTasks) all_done.Notify();
    });
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(ran.load(), kTasks);
}

TEST(ThreadPool, ScheduleRunsOnAWorkerThread) {
  ThreadPool pool(1);
  std::thread::id ran_on;
  absl::Notification done;
  pool.Schedule([&] {
    ran_on = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(ThreadPool, ScheduleKeepsFifoOrderOnOneWorker) {
  std::vector<int> order;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) pool.Schedule([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPool, DestructorFinishesScheduledTasks) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 50; ++i) {
      pool.Schedule([&ran] {
        absl::SleepFor(absl::Milliseconds(1));
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(ThreadPool, ScheduleAcceptsMoveOnlyTasks) {
  std::atomic<int> value{0};
  {
    ThreadPool pool(1);
    auto owned = std::make_unique<int>(42);
    pool.Schedule([p = std::move(owned), &value] { value.store(*p); });
  }
  EXPECT_EQ(value.load(), 42);
}

}  // namespace
}  // namespace tensorcompute::core
