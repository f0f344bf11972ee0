// Tests of Batcher (core/batching/batcher.h) with a fake Executor that records what it is
// given and can be held shut to make tasks pile up: exactly-once completion, batches forming
// behind a busy executor, the inflight limit, UNAVAILABLE when full or stopping, deadlines and
// cancellation while queued, Stop, WaitIdle, on_batch and the destructor.

#include "core/batching/batcher.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Le;
using ::testing::Not;
using ::testing::StartsWith;

const absl::Duration kLong = absl::Seconds(30);  // "never" on a loaded machine

// A task's id: NewTask keeps it as the version of the task's table, which neither the batcher
// nor FakeExecutor looks at.
int IdOf(const Task& task) { return static_cast<int>(task.table->version); }

// Collects the statuses that done callbacks receive, by task id.
class Recorder {
 public:
  absl::AnyInvocable<void(absl::Status) &&> Done(int id) {
    return [this, id](absl::Status status) {
      absl::MutexLock lock(&mu_);
      statuses_[id].push_back(std::move(status));
      ++total_;
    };
  }

  // Waits until `n` dones have been called in all. Returns false on timeout.
  bool WaitForTotal(int n, absl::Duration timeout = kLong) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return total_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  // Waits until task `id` has been answered.
  bool WaitFor(int id, absl::Duration timeout = kLong) {
    absl::MutexLock lock(&mu_);
    auto answered = [this, id]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return statuses_.count(id) > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&answered), timeout);
  }

  std::vector<absl::Status> Of(int id) {
    absl::MutexLock lock(&mu_);
    return statuses_[id];
  }

  int total() {
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  absl::Mutex mu_;
  std::map<int, std::vector<absl::Status>> statuses_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<Task> NewTask(int id, Recorder& recorder) {
  auto task = std::make_unique<Task>();
  auto tag = std::make_shared<core::ResidentTensor>();
  tag->version = id;
  task->table = std::move(tag);
  task->done = recorder.Done(id);
  return task;
}

// Schedules a new task `id` and expects it accepted.
void ScheduleOk(Batcher& batcher, int id, Recorder& recorder) {
  std::unique_ptr<Task> task = NewTask(id, recorder);
  ASSERT_THAT(batcher.Schedule(task), IsOk()) << "task " << id;
}

// An Executor that answers every task OK on its own thread, in batch order. While its gate is
// shut it only records the batches it is given. Tracks the most batches outstanding at once.
class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(bool open = true) : open_(open), worker_([this] { WorkerLoop(); }) {}

  ~FakeExecutor() override {
    {
      absl::MutexLock lock(&mu_);
      open_ = true;
      exit_ = true;
    }
    worker_.join();
  }

  void Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) override {
    absl::MutexLock lock(&mu_);
    sizes_.push_back(static_cast<int64_t>(batch.size()));
    for (const std::unique_ptr<Task>& task : batch) seen_.insert(IdOf(*task));
    ++outstanding_;
    max_outstanding_ = std::max(max_outstanding_, outstanding_);
    pending_.emplace_back(std::move(batch), std::move(batch_done));
  }
  absl::string_view name() const override { return "fake"; }

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

  // Waits until Run has been called `n` times.
  bool WaitForBatches(size_t n, absl::Duration timeout = kLong) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sizes_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  std::vector<int64_t> sizes() {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }
  std::set<int> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  int max_outstanding() {
    absl::MutexLock lock(&mu_);
    return max_outstanding_;
  }

 private:
  void WorkerLoop() {
    while (true) {
      std::pair<Batch, absl::AnyInvocable<void() &&>> work;
      {
        absl::MutexLock lock(&mu_);
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return (open_ && !pending_.empty()) || (exit_ && pending_.empty());
        };
        mu_.Await(absl::Condition(&has_work));
        if (pending_.empty()) return;
        work = std::move(pending_.front());
        pending_.erase(pending_.begin());
      }
      for (std::unique_ptr<Task>& task : work.first) std::move(task->done)(absl::OkStatus());
      work.first.clear();
      {
        absl::MutexLock lock(&mu_);
        --outstanding_;  // before batch_done, which may let the next Run in at once
      }
      std::move(work.second)();
    }
  }

  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_);
  bool exit_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<Batch, absl::AnyInvocable<void() &&>>> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  std::set<int> seen_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int max_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (int64_t x : v) sum += x;
  return sum;
}

TEST(Batcher, EveryTaskCompletesExactlyOnce) {
  FakeExecutor executor;
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 8;
  Batcher batcher(options, &executor);
  constexpr int kThreads = 4, kPerThread = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) ScheduleOk(batcher, t * kPerThread + i, recorder);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_EQ(recorder.total(), kThreads * kPerThread);
  for (int id = 0; id < kThreads * kPerThread; ++id) {
    ASSERT_THAT(recorder.Of(id), ElementsAre(IsOk())) << "task " << id;
  }
  EXPECT_EQ(Sum(executor.sizes()), kThreads * kPerThread);
  EXPECT_THAT(executor.sizes(), Each(Le(8)));
  EXPECT_EQ(batcher.queue_depth(), 0);
  EXPECT_EQ(batcher.inflight_batches(), 0);
}

TEST(Batcher, BatchesFormFromWhatPilesUpWhileTheExecutorIsBusy) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 8;
  options.max_inflight_batches = 1;
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));  // an idle batcher does not wait for company
  for (int id = 1; id <= 20; ++id) ScheduleOk(batcher, id, recorder);
  EXPECT_EQ(batcher.queue_depth(), 20);  // the only executor slot is taken
  EXPECT_EQ(batcher.inflight_batches(), 1);
  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(executor.sizes(), ElementsAre(1, 8, 8, 4));
  EXPECT_THAT(executor.sizes(), Contains(Gt(1)));
  EXPECT_EQ(recorder.total(), 21);
  EXPECT_EQ(executor.max_outstanding(), 1);
}

TEST(Batcher, NeverRunsMoreThanMaxInflightBatches) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 1;
  options.max_inflight_batches = 2;
  Batcher batcher(options, &executor);
  for (int id = 0; id < 10; ++id) ScheduleOk(batcher, id, recorder);
  ASSERT_TRUE(executor.WaitForBatches(2));
  absl::SleepFor(absl::Milliseconds(20));  // a third batch, if it were wrongly sent, shows up
  EXPECT_EQ(executor.sizes().size(), 2u);
  EXPECT_EQ(batcher.inflight_batches(), 2);
  EXPECT_EQ(batcher.queue_depth(), 8);
  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_EQ(recorder.total(), 10);
  EXPECT_EQ(executor.max_outstanding(), 2);
}

TEST(Batcher, AFullQueueIsRefusedAtOnceWithUnavailable) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.queue_capacity = 4;
  options.max_inflight_batches = 1;
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));
  for (int id = 1; id <= 4; ++id) ScheduleOk(batcher, id, recorder);

  std::unique_ptr<Task> task = NewTask(5, recorder);
  const absl::Time start = absl::Now();
  EXPECT_THAT(batcher.Schedule(task),
              StatusIs(absl::StatusCode::kUnavailable,
                       "server overloaded: 4 requests queued; retry with backoff"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // did not wait for room
  ASSERT_NE(task, nullptr);                          // still the caller's
  EXPECT_TRUE(static_cast<bool>(task->done));

  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_EQ(recorder.total(), 5);
  EXPECT_THAT(recorder.Of(5), IsEmpty());
  EXPECT_THAT(executor.seen(), Not(Contains(5)));
}

TEST(Batcher, ATaskPastItsDeadlineIsAnsweredWithoutTheExecutor) {
  FakeExecutor executor;
  Recorder recorder;
  Batcher batcher(BatcherOptions{}, &executor);
  std::unique_ptr<Task> task = NewTask(0, recorder);
  task->deadline = absl::Now() - absl::Seconds(1);
  ASSERT_THAT(batcher.Schedule(task), IsOk());
  ScheduleOk(batcher, 1, recorder);
  ASSERT_TRUE(recorder.WaitForTotal(2));
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(recorder.Of(0), ElementsAre(StatusIs(absl::StatusCode::kDeadlineExceeded,
                                                   HasSubstr("deadline exceeded while queued"))));
  EXPECT_THAT(recorder.Of(1), ElementsAre(IsOk()));
  EXPECT_EQ(executor.seen(), std::set<int>{1});
}

TEST(Batcher, ADeadlinePassingWhileQueuedIsNoticedWithoutNewArrivals) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.max_inflight_batches = 1;
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));
  std::unique_ptr<Task> task = NewTask(1, recorder);
  task->deadline = absl::Now() + absl::Milliseconds(50);
  ASSERT_THAT(batcher.Schedule(task), IsOk());

  // The executor is still shut: only the deadline itself can wake the batcher.
  ASSERT_TRUE(recorder.WaitFor(1));
  EXPECT_THAT(recorder.Of(1),
              ElementsAre(StatusIs(absl::StatusCode::kDeadlineExceeded,
                                   StartsWith("deadline exceeded while queued (waited "))));
  EXPECT_EQ(batcher.queue_depth(), 0);

  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(recorder.Of(0), ElementsAre(IsOk()));
  EXPECT_EQ(executor.seen(), std::set<int>{0});
}

TEST(Batcher, ADeadlineIsHonouredWhileWaitingForABatchToFill) {
  FakeExecutor executor;
  Recorder recorder;
  BatcherOptions options;
  options.max_queue_delay = absl::Hours(1);
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);  // waits an hour for company
  std::unique_ptr<Task> task = NewTask(1, recorder);
  task->deadline = absl::Now() + absl::Milliseconds(20);
  ASSERT_THAT(batcher.Schedule(task), IsOk());
  ASSERT_TRUE(recorder.WaitFor(1));
  EXPECT_THAT(recorder.Of(1), ElementsAre(StatusIs(absl::StatusCode::kDeadlineExceeded)));
  EXPECT_EQ(batcher.queue_depth(), 1);
  batcher.Stop();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(recorder.Of(0), ElementsAre(IsOk()));
  EXPECT_EQ(executor.seen(), std::set<int>{0});
}

TEST(Batcher, ACancelledQueuedTaskIsAnsweredWithoutTheExecutor) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.max_inflight_batches = 1;
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));
  std::unique_ptr<Task> task = NewTask(1, recorder);
  std::shared_ptr<CancelFlag> flag = task->cancel;
  ASSERT_THAT(batcher.Schedule(task), IsOk());
  ScheduleOk(batcher, 2, recorder);
  flag->Cancel();  // from this thread, as the RPC layer's OnCancel would

  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(recorder.Of(1),
              ElementsAre(StatusIs(absl::StatusCode::kCancelled,
                                   "request cancelled by the client while queued")));
  EXPECT_THAT(recorder.Of(0), ElementsAre(IsOk()));
  EXPECT_THAT(recorder.Of(2), ElementsAre(IsOk()));
  EXPECT_EQ(executor.seen(), (std::set<int>{0, 2}));
}

TEST(Batcher, ANoticedCancelIsAnsweredWhileTheExecutorIsStillBusy) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  BatcherOptions options;
  options.max_inflight_batches = 1;
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));
  std::vector<std::shared_ptr<CancelFlag>> flags;
  for (int id = 1; id <= 3; ++id) {
    std::unique_ptr<Task> task = NewTask(id, recorder);
    flags.push_back(task->cancel);
    ASSERT_THAT(batcher.Schedule(task), IsOk());
  }
  // Let the dispatcher see the queue and go back to sleep (no slot is free), as it would on a
  // busy server; without the notice below, nothing would wake it until the executor opens.
  absl::SleepFor(absl::Milliseconds(50));
  batcher.NoticeCancel();  // nothing cancelled yet: a spurious notice drops nothing
  flags[0]->Cancel();
  flags[2]->Cancel();
  batcher.NoticeCancel();

  // The executor is still shut, so no slot frees: only the notice can get 1 and 3 answered.
  ASSERT_TRUE(recorder.WaitForTotal(2));
  EXPECT_THAT(recorder.Of(1), ElementsAre(StatusIs(absl::StatusCode::kCancelled)));
  EXPECT_THAT(recorder.Of(3), ElementsAre(StatusIs(absl::StatusCode::kCancelled)));
  EXPECT_EQ(batcher.queue_depth(), 1);

  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(recorder.Of(0), ElementsAre(IsOk()));
  EXPECT_THAT(recorder.Of(2), ElementsAre(IsOk()));
  EXPECT_EQ(executor.seen(), (std::set<int>{0, 2}));
}

TEST(Batcher, StopRefusesNewTasksAndFlushesQueuedOnes) {
  FakeExecutor executor;
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 100;
  options.max_queue_delay = absl::Hours(1);  // only Stop() can send these
  Batcher batcher(options, &executor);
  for (int id = 0; id < 3; ++id) ScheduleOk(batcher, id, recorder);
  EXPECT_EQ(batcher.queue_depth(), 3);
  batcher.Stop();
  std::unique_ptr<Task> late = NewTask(3, recorder);
  EXPECT_THAT(batcher.Schedule(late),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
  EXPECT_NE(late, nullptr);
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_THAT(executor.sizes(), ElementsAre(3));
  for (int id = 0; id < 3; ++id) EXPECT_THAT(recorder.Of(id), ElementsAre(IsOk()));
  EXPECT_THAT(recorder.Of(3), IsEmpty());
}

TEST(Batcher, WaitIdleTimesOutWhileWorkIsRunning) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  Batcher batcher(BatcherOptions{}, &executor);
  EXPECT_TRUE(batcher.WaitIdle(absl::ZeroDuration()));  // nothing yet
  ScheduleOk(batcher, 0, recorder);
  EXPECT_FALSE(batcher.WaitIdle(absl::Milliseconds(50)));
  executor.Open();
  EXPECT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_EQ(recorder.total(), 1);
}

TEST(Batcher, MaxQueueDelayHoldsALoneTaskThenSendsIt) {
  FakeExecutor executor;
  Recorder recorder;
  BatcherOptions options;
  options.max_queue_delay = absl::Milliseconds(50);
  Batcher batcher(options, &executor);
  const absl::Time start = absl::Now();
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(recorder.WaitFor(0));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_THAT(executor.sizes(), ElementsAre(1));
}

TEST(Batcher, AFullBatchDoesNotWaitForTheDelay) {
  FakeExecutor executor;
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 4;
  options.max_queue_delay = absl::Hours(1);
  Batcher batcher(options, &executor);
  for (int id = 0; id < 4; ++id) ScheduleOk(batcher, id, recorder);
  ASSERT_TRUE(recorder.WaitForTotal(4));
  EXPECT_THAT(executor.sizes(), ElementsAre(4));
  batcher.Stop();
}

TEST(Batcher, OnBatchIsCalledWithEveryBatchSize) {
  FakeExecutor executor(/*open=*/false);
  Recorder recorder;
  absl::Mutex mu;
  std::vector<int64_t> reported;
  BatcherOptions options;
  options.max_batch_size = 8;
  options.max_inflight_batches = 1;
  options.on_batch = [&](int64_t size) {
    absl::MutexLock lock(&mu);
    reported.push_back(size);
  };
  Batcher batcher(options, &executor);
  ScheduleOk(batcher, 0, recorder);
  ASSERT_TRUE(executor.WaitForBatches(1));
  for (int id = 1; id <= 10; ++id) ScheduleOk(batcher, id, recorder);
  executor.Open();
  ASSERT_TRUE(batcher.WaitIdle(kLong));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(reported, executor.sizes());
  EXPECT_THAT(reported, ElementsAre(1, 8, 2));
}

TEST(Batcher, TheDestructorAnswersQueuedWork) {
  FakeExecutor executor;
  Recorder recorder;
  {
    BatcherOptions options;
    options.max_batch_size = 100;
    options.max_queue_delay = absl::Hours(1);
    Batcher batcher(options, &executor);
    for (int id = 0; id < 5; ++id) ScheduleOk(batcher, id, recorder);
  }
  EXPECT_EQ(recorder.total(), 5);
  for (int id = 0; id < 5; ++id) EXPECT_THAT(recorder.Of(id), ElementsAre(IsOk()));
  EXPECT_THAT(executor.sizes(), ElementsAre(5));
}

}  // namespace
}  // namespace tensorcompute::batching
