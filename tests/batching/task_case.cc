#include "tests/batching/task_case.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching::test_support {

std::unique_ptr<Case> MakeCase(tensorcompute::testing::GatherRequest req) {
  auto c = std::make_unique<Case>();
  c->req = std::move(req);
  absl::StatusOr<core::GatherPlan> plan =
      c->req.nd ? core::PlanGatherNd(c->req.params.view(), c->req.indices.view(), c->req.batch_dims)
                : core::PlanGather(c->req.params.view(), c->req.indices.view(), c->req.axis,
                                   c->req.batch_dims);
  EXPECT_THAT(plan, tensorcompute::testing::IsOk()) << c->req.DebugString();
  if (!plan.ok()) return nullptr;
  c->plan = *std::move(plan);
  absl::StatusOr<core::Tensor> output = core::Tensor::Allocate(c->plan.dtype, c->plan.output_shape);
  EXPECT_THAT(output, tensorcompute::testing::IsOk());
  if (!output.ok()) return nullptr;
  c->output = *std::move(output);
  absl::Span<uint8_t> bytes = c->output.mutable_bytes();
  if (!bytes.empty()) std::memset(bytes.data(), kSentinel, bytes.size());
  return c;
}

std::unique_ptr<Task> MakeTask(Case& c, std::function<void()> after) {
  auto task = std::make_unique<Task>();
  task->plan = c.plan;
  task->params = c.req.params.view();
  task->indices = c.req.indices.view();
  task->output = c.output.mutable_view();
  task->done = [&c, after = std::move(after)](absl::Status status) {
    c.got = std::move(status);
    c.calls.fetch_add(1);
    if (after) after();
  };
  return task;
}

std::unique_ptr<BagCase> MakeBagCase(tensorcompute::testing::EmbeddingBagCase req) {
  auto c = std::make_unique<BagCase>();
  c->req = std::move(req);
  absl::StatusOr<core::EmbeddingBagPlan> plan = c->req.Plan();
  EXPECT_THAT(plan, tensorcompute::testing::IsOk()) << c->req.DebugString();
  if (!plan.ok()) return nullptr;
  c->plan = *std::move(plan);
  absl::StatusOr<core::Tensor> output = core::Tensor::Allocate(c->plan.dtype, c->plan.output_shape);
  EXPECT_THAT(output, tensorcompute::testing::IsOk());
  if (!output.ok()) return nullptr;
  c->output = *std::move(output);
  absl::Span<uint8_t> bytes = c->output.mutable_bytes();
  if (!bytes.empty()) std::memset(bytes.data(), kSentinel, bytes.size());
  return c;
}

std::unique_ptr<Task> MakeBagTask(BagCase& c, std::function<void()> after) {
  auto task = std::make_unique<Task>();
  task->plan = c.plan;
  task->params = c.req.params.view();
  task->indices = c.req.indices.view();
  task->offsets = c.req.offsets_view();
  task->weights = c.req.weights_view();
  task->output = c.output.mutable_view();
  task->done = [&c, after = std::move(after)](absl::Status status) {
    c.got = std::move(status);
    c.calls.fetch_add(1);
    if (after) after();
  };
  return task;
}

bool SentinelIntact(const core::Tensor& t) {
  for (uint8_t b : t.bytes()) {
    if (b != kSentinel) return false;
  }
  return true;
}

core::ThreadPool& SharedPool() {
  static core::ThreadPool* const pool = new core::ThreadPool(4);
  return *pool;
}

void RunAndWait(Executor& executor, Batch batch) {
  auto finished = std::make_shared<absl::Notification>();
  executor.Run(std::move(batch), [finished] { finished->Notify(); });
  ASSERT_TRUE(finished->WaitForNotificationWithTimeout(absl::Seconds(60)));
}

std::shared_ptr<const core::ResidentTensor> MakeTable(core::Tensor tensor) {
  auto entry = std::make_shared<core::ResidentTensor>();
  entry->name = "table";
  entry->tensor = std::move(tensor);
  entry->device = "cpu";
  entry->version = 1;
  return entry;
}

std::unique_ptr<Task> OnTable(std::unique_ptr<Task> task,
                              std::shared_ptr<const core::ResidentTensor> table) {
  task->params = table->tensor.view();
  task->table = std::move(table);
  return task;
}

int WrittenAtFirstAnswer(Executor& executor, Batch batch,
                         const std::vector<const core::Tensor*>& outputs) {
  auto first = std::make_shared<std::atomic<bool>>(true);
  auto written_at_first = std::make_shared<std::atomic<int>>(-1);
  for (std::unique_ptr<Task>& task : batch) {
    task->done = [&outputs, first, written_at_first,
                  done = std::move(task->done)](absl::Status status) mutable {
      if (first->exchange(false)) {
        int written = 0;
        for (const core::Tensor* output : outputs) written += !SentinelIntact(*output);
        *written_at_first = written;
      }
      std::move(done)(std::move(status));
    };
  }
  RunAndWait(executor, std::move(batch));
  return written_at_first->load();
}

void MakeOutputOnDemand(Task& task, core::Tensor& output, int* made) {
  task.output.data = {};  // (assigning a whole new view trips GCC 12's -Wuninitialized)
  task.output.strings = {};
  task.make_output = [&output, made] {
    ++*made;
    return output.mutable_view();
  };
}

::testing::AssertionResult SameAsAlone(const absl::Status& got, const core::Tensor& output,
                                       const absl::StatusOr<core::Tensor>& alone,
                                       const std::string& what) {
  if (!alone.ok() || !got.ok()) {
    if (alone.status() == got) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "got " << got << ", alone " << alone.status() << " for " << what;
  }
  if (!core::IdenticalTensors(output.view(), alone->view())) {
    return ::testing::AssertionFailure() << "output differs for " << what;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tensorcompute::batching::test_support
