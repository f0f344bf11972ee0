// Tests of BatchQueue (core/batching/batcher.h), the batch-forming logic, with fake time:
// full batches oldest first, the max_queue_delay boundary, flush, dropping of cancelled and
// expired tasks, the capacity refusal, deadline admission, and NextEventTime.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// A task that carries `id` as its table's version (BatchQueue never looks at the table); done
// is a no-op (BatchQueue never calls it).
std::unique_ptr<Task> NewTask(int id, absl::Time deadline = absl::InfiniteFuture()) {
  auto task = std::make_unique<Task>();
  auto tag = std::make_shared<core::ResidentTensor>();
  tag->version = id;
  task->table = std::move(tag);
  task->deadline = deadline;
  task->done = [](absl::Status) {};
  return task;
}

int IdOf(const Task& task) { return static_cast<int>(task.table->version); }

std::vector<int> Ids(const Batch& batch) {
  std::vector<int> ids;
  for (const std::unique_ptr<Task>& task : batch) ids.push_back(IdOf(*task));
  return ids;
}

void AddOk(BatchQueue& queue, std::unique_ptr<Task> task, absl::Time now) {
  ASSERT_THAT(queue.Add(task, now), IsOk());
  EXPECT_EQ(task, nullptr);
}

BatcherOptions Options(int64_t max_batch_size, absl::Duration delay) {
  BatcherOptions options;
  options.max_batch_size = max_batch_size;
  options.max_queue_delay = delay;
  return options;
}

TEST(BatchQueue, FormsFullBatchesOldestFirst) {
  BatchQueue queue(Options(4, absl::Hours(1)));
  for (int i = 0; i < 10; ++i) AddOk(queue, NewTask(i), kT0);
  Batch dropped;
  EXPECT_THAT(Ids(queue.TakeReady(kT0, false, &dropped)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Ids(queue.TakeReady(kT0, false, &dropped)), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(queue.TakeReady(kT0, false, &dropped), IsEmpty());  // 2 left, delay not over
  EXPECT_EQ(queue.size(), 2);
  EXPECT_THAT(dropped, IsEmpty());
}

TEST(BatchQueue, StampsTheEnqueueTime) {
  BatchQueue queue(Options(4, absl::ZeroDuration()));
  AddOk(queue, NewTask(0), kT0 + absl::Milliseconds(7));
  Batch dropped;
  const Batch batch = queue.TakeReady(kT0 + absl::Seconds(1), false, &dropped);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->enqueue_time, kT0 + absl::Milliseconds(7));
}

TEST(BatchQueue, ASingleTaskWaitsExactlyMaxQueueDelay) {
  const absl::Duration delay = absl::Milliseconds(10);
  BatchQueue queue(Options(8, delay));
  AddOk(queue, NewTask(0), kT0);
  Batch dropped;
  EXPECT_THAT(queue.TakeReady(kT0, false, &dropped), IsEmpty());
  EXPECT_THAT(queue.TakeReady(kT0 + delay - absl::Nanoseconds(1), false, &dropped), IsEmpty());
  EXPECT_THAT(Ids(queue.TakeReady(kT0 + delay, false, &dropped)), ElementsAre(0));
  EXPECT_EQ(queue.size(), 0);
}

TEST(BatchQueue, ZeroDelayMakesATaskReadyAtOnce) {
  BatchQueue queue(Options(8, absl::ZeroDuration()));
  AddOk(queue, NewTask(0), kT0);
  AddOk(queue, NewTask(1), kT0);
  Batch dropped;
  EXPECT_THAT(Ids(queue.TakeReady(kT0, false, &dropped)), ElementsAre(0, 1));
}

TEST(BatchQueue, FlushReturnsAPartialBatchWithoutWaiting) {
  BatchQueue queue(Options(4, absl::Hours(1)));
  for (int i = 0; i < 6; ++i) AddOk(queue, NewTask(i), kT0);
  Batch dropped;
  EXPECT_THAT(Ids(queue.TakeReady(kT0, true, &dropped)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Ids(queue.TakeReady(kT0, true, &dropped)), ElementsAre(4, 5));
  EXPECT_THAT(queue.TakeReady(kT0, true, &dropped), IsEmpty());
}

TEST(BatchQueue, CancelledAndExpiredTasksAreDroppedNeverBatched) {
  BatchQueue queue(Options(8, absl::ZeroDuration()));
  std::vector<std::shared_ptr<CancelFlag>> flags;
  for (int i = 0; i < 6; ++i) {
    std::unique_ptr<Task> task =
        NewTask(i, i == 3 ? kT0 + absl::Milliseconds(5) : absl::InfiniteFuture());
    flags.push_back(task->cancel);
    AddOk(queue, std::move(task), kT0);
  }
  flags[1]->Cancel();
  flags[4]->Cancel();
  Batch dropped;
  // At its deadline a task counts as expired.
  const Batch batch = queue.TakeReady(kT0 + absl::Milliseconds(5), false, &dropped);
  EXPECT_THAT(Ids(batch), ElementsAre(0, 2, 5));
  EXPECT_THAT(Ids(dropped), ElementsAre(1, 3, 4));
  EXPECT_EQ(queue.size(), 0);
}

TEST(BatchQueue, TakeDroppedLeavesLiveTasksQueued) {
  BatchQueue queue(Options(2, absl::ZeroDuration()));
  AddOk(queue, NewTask(0), kT0);
  AddOk(queue, NewTask(1, kT0 + absl::Seconds(1)), kT0);
  AddOk(queue, NewTask(2), kT0);
  Batch dropped;
  queue.TakeDropped(kT0 + absl::Seconds(2), &dropped);
  EXPECT_THAT(Ids(dropped), ElementsAre(1));
  EXPECT_EQ(queue.size(), 2);
  EXPECT_EQ(queue.EarliestDeadline(), absl::InfiniteFuture());
}

TEST(BatchQueue, RefusesAtCapacityAndLeavesTheTaskWithTheCaller) {
  BatcherOptions options = Options(8, absl::Hours(1));
  options.queue_capacity = 3;
  BatchQueue queue(options);
  for (int i = 0; i < 3; ++i) AddOk(queue, NewTask(i), kT0);
  std::unique_ptr<Task> task = NewTask(3);
  const absl::Time before = task->enqueue_time;
  EXPECT_THAT(queue.Add(task, kT0),
              StatusIs(absl::StatusCode::kUnavailable,
                       "server overloaded: 3 requests queued; retry with backoff"));
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(IdOf(*task), 3);
  EXPECT_EQ(task->enqueue_time, before);
  EXPECT_TRUE(static_cast<bool>(task->done));
  EXPECT_EQ(queue.size(), 3);
}

TEST(BatchQueue, ExpectedWaitIsQueuedTasksTimesTimePerTaskOverSlots) {
  BatcherOptions options = Options(8, absl::Hours(1));
  options.max_inflight_batches = 2;
  BatchQueue queue(options);
  for (int i = 0; i < 4; ++i) AddOk(queue, NewTask(i), kT0);
  EXPECT_EQ(queue.ExpectedWait(), absl::ZeroDuration());    // nothing measured yet
  queue.RecordBatchTime(4, absl::Milliseconds(40));         // 10 ms per task
  EXPECT_EQ(queue.ExpectedWait(), absl::Milliseconds(20));  // 4 × 10 ms / 2 slots
  // A moving average: one batch at 90 ms per task moves it by an eighth of the difference.
  queue.RecordBatchTime(1, absl::Milliseconds(90));
  EXPECT_EQ(queue.ExpectedWait(), absl::Milliseconds(40));  // 4 × 20 ms / 2
  queue.RecordBatchTime(0, absl::Hours(1));                 // ignored
  EXPECT_EQ(queue.ExpectedWait(), absl::Milliseconds(40));
}

TEST(BatchQueue, RefusesATaskThatWouldWaitPastItsDeadline) {
  BatcherOptions options = Options(8, absl::Hours(1));
  options.max_inflight_batches = 1;
  BatchQueue queue(options);
  AddOk(queue, NewTask(0), kT0);
  AddOk(queue, NewTask(1), kT0);
  queue.RecordBatchTime(1, absl::Milliseconds(50));  // expected wait: 2 × 50 ms
  std::unique_ptr<Task> late = NewTask(2, kT0 + absl::Milliseconds(99));
  EXPECT_THAT(queue.Add(late, kT0),
              StatusIs(absl::StatusCode::kUnavailable,
                       "server overloaded: 2 requests queued, an expected wait of 100ms, longer "
                       "than the 99ms left before the deadline; retry with backoff"));
  ASSERT_NE(late, nullptr);  // still the caller's
  EXPECT_EQ(queue.size(), 2);
  AddOk(queue, NewTask(3, kT0 + absl::Milliseconds(100)), kT0);  // exactly in time
  AddOk(queue, NewTask(4), kT0);                                 // no deadline
  // Already expired: queued, so that it is answered DEADLINE_EXCEEDED, not refused.
  AddOk(queue, NewTask(5, kT0), kT0);
  EXPECT_EQ(queue.size(), 5);
}

TEST(BatchQueue, DeadlineAdmissionNeverRefusesIntoAnEmptyQueueAndCanBeTurnedOff) {
  BatchQueue queue(Options(8, absl::Hours(1)));
  queue.RecordBatchTime(1, absl::Seconds(10));
  AddOk(queue, NewTask(0, kT0 + absl::Milliseconds(1)), kT0);  // empty queue: no wait

  BatcherOptions options = Options(8, absl::Hours(1));
  options.deadline_admission = false;
  BatchQueue off(options);
  off.RecordBatchTime(1, absl::Seconds(10));
  AddOk(off, NewTask(0), kT0);
  AddOk(off, NewTask(1, kT0 + absl::Milliseconds(1)), kT0);
}

TEST(BatchQueue, NextEventTimeIsTheDelayOrTheEarliestDeadline) {
  const absl::Duration delay = absl::Milliseconds(10);
  BatchQueue queue(Options(8, delay));
  EXPECT_EQ(queue.NextEventTime(), absl::InfiniteFuture());
  EXPECT_EQ(queue.EarliestDeadline(), absl::InfiniteFuture());

  AddOk(queue, NewTask(0), kT0);
  EXPECT_EQ(queue.NextEventTime(), kT0 + delay);

  AddOk(queue, NewTask(1, kT0 + absl::Milliseconds(30)), kT0 + absl::Milliseconds(1));
  EXPECT_EQ(queue.NextEventTime(), kT0 + delay);  // the deadline is later than the delay
  AddOk(queue, NewTask(2, kT0 + absl::Milliseconds(3)), kT0 + absl::Milliseconds(2));
  EXPECT_EQ(queue.NextEventTime(), kT0 + absl::Milliseconds(3));
  EXPECT_EQ(queue.EarliestDeadline(), kT0 + absl::Milliseconds(3));

  // Task 2 expires; task 0 is still the oldest.
  Batch dropped;
  EXPECT_THAT(queue.TakeReady(kT0 + absl::Milliseconds(3), false, &dropped), IsEmpty());
  EXPECT_THAT(Ids(dropped), ElementsAre(2));
  EXPECT_EQ(queue.NextEventTime(), kT0 + delay);
  EXPECT_EQ(queue.EarliestDeadline(), kT0 + absl::Milliseconds(30));

  // Both leave in one batch; the queue is empty again.
  EXPECT_THAT(Ids(queue.TakeReady(kT0 + delay, false, &dropped)), ElementsAre(0, 1));
  EXPECT_EQ(queue.NextEventTime(), absl::InfiniteFuture());
  EXPECT_EQ(queue.EarliestDeadline(), absl::InfiniteFuture());
}

TEST(BatchQueue, NextEventTimeFollowsTheNewOldestTask) {
  const absl::Duration delay = absl::Milliseconds(10);
  BatchQueue queue(Options(2, delay));
  for (int i = 0; i < 3; ++i) AddOk(queue, NewTask(i), kT0 + absl::Milliseconds(i));
  Batch dropped;
  EXPECT_THAT(Ids(queue.TakeReady(kT0, false, &dropped)), ElementsAre(0, 1));
  EXPECT_EQ(queue.NextEventTime(), kT0 + absl::Milliseconds(2) + delay);
}

}  // namespace
}  // namespace tensorcompute::batching
