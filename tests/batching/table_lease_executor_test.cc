// Tests of core/batching/table_lease_executor.h's resolve step (keyed lookups turn their keys
// into rows there): it runs under the batch's read lease, a task it fails is answered with its
// error and never reaches the executor below, and a batch left with no task is done at once. A
// batch whose resolve waits on a disk runs on the offload pool; any other on the caller.

#include "core/batching/table_lease_executor.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/live_rows.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::testing::StatusIs;

// Records the tasks it is given and answers each OK at once.
class RecordingExecutor : public Executor {
 public:
  void Run(Batch batch, absl::AnyInvocable<void() &&> batch_done) override {
    for (std::unique_ptr<Task>& task : batch) {
      ran.push_back(task.get());
      std::move(task->done)(absl::OkStatus());
    }
    std::move(batch_done)();
  }
  absl::string_view name() const override { return "recording"; }
  std::vector<const Task*> ran;
};

std::shared_ptr<const core::ResidentTensor> Table() {
  auto table = std::make_shared<core::ResidentTensor>();
  table->live = std::make_shared<core::LiveRows>(0);
  return table;
}

TEST(TableLeaseExecutor, ResolveRunsUnderTheLeaseAndAFailureIsAnsweredAndLeftOut) {
  RecordingExecutor inner;
  TableLeaseExecutor executor(&inner);
  std::shared_ptr<const core::ResidentTensor> table = Table();
  std::vector<absl::Status> outcomes(3, absl::UnknownError("not answered"));
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    auto task = std::make_unique<Task>();
    task->table = table;
    task->done = [&outcomes, i](absl::Status s) { outcomes[i] = std::move(s); };
    if (i == 1) {
      task->resolve = [] { return absl::InvalidArgumentError("keys[0] = 9 is not a key"); };
    } else {
      // A writer waiting now would block until the lease goes: the lease is held while this runs.
      task->resolve = [gate = table->live.get()] {
        return gate->sequence() == 0 ? absl::OkStatus() : absl::InternalError("no");
      };
    }
    batch.push_back(std::move(task));
  }
  const Task* first = batch[0].get();
  const Task* third = batch[2].get();
  bool batch_done = false;
  executor.Run(std::move(batch), [&] { batch_done = true; });
  EXPECT_TRUE(batch_done);
  EXPECT_THAT(outcomes[0], StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(outcomes[1],
              StatusIs(absl::StatusCode::kInvalidArgument, "keys[0] = 9 is not a key"));
  EXPECT_THAT(outcomes[2], StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(inner.ran, ::testing::ElementsAre(first, third));
  // The lease was let go: a write goes through at once.
  EXPECT_EQ(*table->live->Write([] { return absl::OkStatus(); },
                                [](core::LiveRows::Fate) { return absl::OkStatus(); }),
            1);
}

TEST(TableLeaseExecutor, ABatchWhoseTasksAllFailToResolveIsDoneWithoutTheExecutor) {
  RecordingExecutor inner;
  TableLeaseExecutor executor(&inner);
  std::shared_ptr<const core::ResidentTensor> table = Table();
  absl::Status outcome;
  Batch batch;
  auto task = std::make_unique<Task>();
  task->table = table;
  task->done = [&outcome](absl::Status s) { outcome = std::move(s); };
  task->resolve = [] { return absl::InvalidArgumentError("missing"); };
  batch.push_back(std::move(task));
  bool batch_done = false;
  executor.Run(std::move(batch), [&] { batch_done = true; });
  EXPECT_TRUE(batch_done);
  EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kInvalidArgument, "missing"));
  EXPECT_TRUE(inner.ran.empty());
}

TEST(TableLeaseExecutor, ABatchThatWaitsOnADiskRunsOnTheOffloadPoolAndNoOtherDoes) {
  RecordingExecutor inner;
  core::ThreadPool offload(1);
  TableLeaseExecutor executor(&inner, &offload);
  std::shared_ptr<const core::ResidentTensor> table = Table();
  for (const bool blocks : {false, true}) {
    absl::Notification resolved, done;
    std::thread::id resolved_on;
    Batch batch;
    auto task = std::make_unique<Task>();
    task->table = table;
    task->done = [](absl::Status) {};
    task->resolve_blocks = blocks;
    task->resolve = [&] {
      resolved_on = std::this_thread::get_id();
      resolved.Notify();
      return absl::OkStatus();
    };
    batch.push_back(std::move(task));
    executor.Run(std::move(batch), [&] { done.Notify(); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(resolved_on == std::this_thread::get_id(), !blocks) << "blocks " << blocks;
  }
  EXPECT_EQ(inner.ran.size(), 2u);
}

}  // namespace
}  // namespace tensorcompute::batching
