// Tests of core/batching/table_lease_executor.h's resolve step (keyed lookups turn their keys
// into rows there): it runs under the batch's read lease, a task it fails is answered with its
// error and never reaches the executor below, and a batch left with no task is done at once. A
// batch whose resolve waits on a disk runs on the offload pool; any other on the caller. The
// fetches of a batch's tasks run by source, together, after the resolves.

#include "core/batching/table_lease_executor.h"

#include <memory>
#include <string>
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

// A fetch of a source, recording the groups it was fetched in; fails for source "bad".
class FakeFetch : public TaskFetch {
 public:
  FakeFetch(std::string source, std::vector<std::vector<FakeFetch*>>* groups)
      : source_(std::move(source)), groups_(groups) {}
  const void* source() const override { return source_ == "a" ? &kA : &kBad; }
  void FetchTogether(absl::Span<TaskFetch* const> group, absl::Status* statuses) override {
    std::vector<FakeFetch*> members;
    for (size_t i = 0; i < group.size(); ++i) {
      members.push_back(static_cast<FakeFetch*>(group[i]));
      statuses[i] = source_ == "a" ? absl::OkStatus() : absl::UnavailableError("disk failed");
    }
    groups_->push_back(std::move(members));
  }

 private:
  static inline const int kA = 0, kBad = 0;
  std::string source_;
  std::vector<std::vector<FakeFetch*>>* groups_;
};

TEST(TableLeaseExecutor, ABatchsFetchesOfOneSourceRunTogetherAfterTheResolves) {
  RecordingExecutor inner;
  TableLeaseExecutor executor(&inner);
  std::shared_ptr<const core::ResidentTensor> table = Table();
  std::vector<std::vector<FakeFetch*>> groups;
  std::vector<std::unique_ptr<FakeFetch>> fetches;
  for (const char* source : {"a", "bad", "a", "a", "bad"}) {
    fetches.push_back(std::make_unique<FakeFetch>(source, &groups));
  }
  std::vector<absl::Status> outcomes(6, absl::UnknownError("not answered"));
  Batch batch;
  for (int i = 0; i < 6; ++i) {
    auto task = std::make_unique<Task>();
    task->table = table;
    task->done = [&outcomes, i](absl::Status s) { outcomes[i] = std::move(s); };
    if (i < 5) task->fetch = fetches[static_cast<size_t>(i)].get();
    // Task 2's resolve fails: it is not fetched.
    if (i == 2) task->resolve = [] { return absl::InvalidArgumentError("no key"); };
    batch.push_back(std::move(task));
  }
  const Task* first = batch[0].get();
  const Task* fourth = batch[3].get();
  const Task* last = batch[5].get();
  executor.Run(std::move(batch), [] {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0], ::testing::ElementsAre(fetches[0].get(), fetches[3].get()));
  EXPECT_THAT(groups[1], ::testing::ElementsAre(fetches[1].get(), fetches[4].get()));
  EXPECT_THAT(outcomes[1], StatusIs(absl::StatusCode::kUnavailable, "disk failed"));
  EXPECT_THAT(outcomes[2], StatusIs(absl::StatusCode::kInvalidArgument, "no key"));
  EXPECT_THAT(outcomes[4], StatusIs(absl::StatusCode::kUnavailable, "disk failed"));
  EXPECT_THAT(inner.ran, ::testing::ElementsAre(first, fourth, last));
}

}  // namespace
}  // namespace tensorcompute::batching
