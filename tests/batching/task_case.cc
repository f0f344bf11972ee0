#include "tests/batching/task_case.h"

#include <cstring>
#include <utility>

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

}  // namespace tensorcompute::batching::test_support
