// Tests of CpuExecutor's resident-table groups (core/batching/cpu_executor.h) and of
// core::ExecuteGatherGroup under them: random batches of tasks on a few tables (every dtype,
// strings included; int32 and int64 indices, negative values, empty indices, Gather on other
// axes and GatherNd in the same group) mixed with inline tasks, each task's answer compared
// byte for byte and word for word with computing that task alone; a bad index and a cancelled
// task inside a group; make_output per task; and one pass per group.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/gather.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "tests/batching/task_case.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::batching::test_support::Case;
using ::tensorcompute::batching::test_support::MakeCase;
using ::tensorcompute::batching::test_support::MakeOutputOnDemand;
using ::tensorcompute::batching::test_support::MakeTable;
using ::tensorcompute::batching::test_support::MakeTask;
using ::tensorcompute::batching::test_support::RunAndWait;
using ::tensorcompute::batching::test_support::SentinelIntact;
using ::tensorcompute::batching::test_support::SharedPool;
using ::tensorcompute::batching::test_support::WrittenAtFirstAnswer;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::Chance;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using Table = std::shared_ptr<const core::ResidentTensor>;

// A request on `table`: Gather on axis 0 (most), GatherNd with batch_dims 0, or Gather on
// another axis; indices of either dtype, valid (negative values included), sometimes empty.
GatherRequest RandomTableRequest(const core::Tensor& table, Rng& rng) {
  GatherRequest req;
  req.params = table.Clone();
  const core::Shape& shape = table.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  const core::DataType index_dtype =
      Chance(rng, 0.5) ? core::DataType::kInt32 : core::DataType::kInt64;
  core::Shape indices_shape;
  const int64_t index_rank = UniformInt(rng, 0, 2);
  for (int64_t d = 0; d < index_rank; ++d) {
    indices_shape.push_back(Chance(rng, 0.1) ? 0 : UniformInt(rng, 1, 6));
  }
  const int64_t kind = UniformInt(rng, 0, 9);
  if (kind < 6 || rank == 1) {
    req.axis = Chance(rng, 0.5) ? 0 : -rank;
    req.indices = RandomIndices(index_dtype, indices_shape, {shape[0]}, rng);
  } else if (kind < 8) {
    req.nd = true;
    const int64_t depth = UniformInt(rng, 1, rank);
    indices_shape.push_back(depth);
    std::vector<int64_t> dims(shape.begin(), shape.begin() + depth);
    req.indices = RandomIndices(index_dtype, indices_shape, dims, rng);
  } else {
    req.axis = UniformInt(rng, 1, rank - 1);
    req.indices = RandomIndices(index_dtype, indices_shape, {shape[*req.axis]}, rng);
  }
  return req;
}

// What core computes for `req` alone, one call.
absl::StatusOr<core::Tensor> ComputeAlone(const GatherRequest& req) {
  return req.nd ? core::GatherNd(req.params.view(), req.indices.view(), req.batch_dims)
                : core::Gather(req.params.view(), req.indices.view(), req.axis, req.batch_dims);
}

// Byte-identical output and the same status, code and words, as computing alone.
::testing::AssertionResult SameAsAlone(const Case& c) {
  return test_support::SameAsAlone(c.got, c.output, ComputeAlone(c.req), c.req.DebugString());
}

std::unique_ptr<Task> TableTask(Case& c, const Table& table) {
  return test_support::OnTable(MakeTask(c), table);
}

struct Mix {
  std::vector<Table> tables;
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<bool> cancelled;
  std::vector<int> made;  // make_output calls per case
};

// Builds a batch of random tasks on a few tables per dtype (one bad index and one cancelled
// task in some groups, make_output on every other task) with inline tasks among them.
Batch RandomMix(Mix& mix, Rng& rng) {
  for (core::DataType dtype : core::kAllDataTypes) {
    for (int t = 0; t < 2; ++t) {
      core::Shape shape = {UniformInt(rng, 1, 40)};
      const int64_t extra = UniformInt(rng, 0, 2);
      for (int64_t d = 0; d < extra; ++d) shape.push_back(UniformInt(rng, 1, 4));
      if (Chance(rng, 0.1)) shape.push_back(0);  // empty slices: indices are only checked
      mix.tables.push_back(MakeTable(RandomTensor(dtype, shape, rng)));
    }
  }
  struct Planned {
    Table table;  // null: inline
    bool cancel = false;
  };
  std::vector<Planned> planned;
  for (const Table& table : mix.tables) {
    const int64_t n = UniformInt(rng, 1, 8);
    const int64_t bad = Chance(rng, 0.4) ? UniformInt(rng, 0, n - 1) : -1;
    const int64_t cancel = Chance(rng, 0.3) ? UniformInt(rng, 0, n - 1) : -1;
    for (int64_t i = 0; i < n; ++i) {
      GatherRequest req = RandomTableRequest(table->tensor, rng);
      if (i == bad && req.indices.num_elements() > 0) InjectOutOfRangeIndices(req, 1, rng);
      mix.cases.push_back(MakeCase(std::move(req)));
      planned.push_back({table, i == cancel});
    }
    // An inline request between groups.
    const core::DataType dtype =
        core::kAllDataTypes[planned.size() % std::size(core::kAllDataTypes)];
    mix.cases.push_back(MakeCase(RandomGatherRequest(dtype, core::DataType::kInt64, rng)));
    planned.push_back({nullptr, false});
  }
  // Shuffle so that a table's tasks are not adjacent in the batch.
  std::vector<size_t> order(planned.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  mix.cancelled.assign(planned.size(), false);
  mix.made.assign(planned.size(), 0);
  Batch batch;
  for (size_t i : order) {
    Case& c = *mix.cases[i];
    std::unique_ptr<Task> task = planned[i].table ? TableTask(c, planned[i].table) : MakeTask(c);
    if (i % 2 == 0) MakeOutputOnDemand(*task, c.output, &mix.made[i]);
    if (planned[i].cancel) {
      task->cancel->Cancel();
      mix.cancelled[i] = true;
    }
    batch.push_back(std::move(task));
  }
  return batch;
}

TEST(CpuExecutorGroups, RandomMixesMatchComputingEachTaskAlone) {
  struct Variant {
    const char* name;
    int64_t min_parallel_bytes;
    int64_t streaming_store_bytes;
  };
  const core::ExecuteOptions defaults;
  const Variant variants[] = {
      {"defaults", defaults.min_parallel_bytes, defaults.streaming_store_bytes},
      {"every group split across the pool", 1, defaults.streaming_store_bytes},
      {"streaming stores", 1, 1},
  };
  Rng rng(91);
  for (const Variant& v : variants) {
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE(::testing::Message() << v.name << ", round " << round);
      CpuExecutorOptions options;
      options.execute.min_parallel_bytes = v.min_parallel_bytes;
      options.execute.streaming_store_bytes = v.streaming_store_bytes;
      CpuExecutor executor(&SharedPool(), options);
      Mix mix;
      Batch batch = RandomMix(mix, rng);
      RunAndWait(executor, std::move(batch));
      for (size_t i = 0; i < mix.cases.size(); ++i) {
        const Case& c = *mix.cases[i];
        ASSERT_EQ(c.calls.load(), 1) << c.req.DebugString();
        if (mix.cancelled[i]) {
          EXPECT_THAT(c.got, StatusIs(absl::StatusCode::kCancelled));
          EXPECT_EQ(mix.made[i], 0) << "make_output called for a cancelled task";
          if (c.plan.dtype != core::DataType::kString) {
            EXPECT_TRUE(SentinelIntact(c.output));
          }
          continue;
        }
        if (i % 2 == 0) {
          EXPECT_EQ(mix.made[i], 1) << c.req.DebugString();
        }
        ASSERT_TRUE(SameAsAlone(c));
        ASSERT_TRUE(AgreesWithReference(c.Result(), RunReference(c.req))) << c.req.DebugString();
      }
    }
  }
}

// Three small tasks on one [3, 2] table, the middle one with a bad index.
struct BadIndexGroup {
  Table table = MakeTable(MakeIndices(core::DataType::kInt64, {3, 2}, {10, 11, 20, 21, 30, 31}));
  std::vector<std::unique_ptr<Case>> cases;

  BadIndexGroup() {
    const std::vector<std::vector<int64_t>> values = {{2, -3}, {0, 1, 7, 2}, {-1}};
    const std::vector<core::Shape> shapes = {{2}, {2, 2}, {1}};
    for (size_t i = 0; i < values.size(); ++i) {
      GatherRequest req;
      req.params = table->tensor.Clone();
      req.indices = MakeIndices(core::DataType::kInt32, shapes[i], values[i]);
      req.axis = 0;
      cases.push_back(MakeCase(std::move(req)));
    }
  }
};

TEST(CpuExecutorGroups, ABadIndexFailsOnlyItsOwnTaskWithCoresWords) {
  BadIndexGroup group;
  Batch batch;
  for (std::unique_ptr<Case>& c : group.cases) batch.push_back(TableTask(*c, group.table));
  CpuExecutor executor(&SharedPool());
  RunAndWait(executor, std::move(batch));
  EXPECT_THAT(group.cases[1]->got,
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,0] = 7 is not in [-3, 3)"));
  EXPECT_TRUE(SameAsAlone(*group.cases[1]));
  for (int i : {0, 2}) {
    EXPECT_THAT(group.cases[i]->got, tensorcompute::testing::IsOk());
    EXPECT_TRUE(SameAsAlone(*group.cases[i]));
  }
  EXPECT_THAT(group.cases[0]->output.values<int64_t>(), ::testing::ElementsAre(30, 31, 10, 11));
}

TEST(CoreExecuteGatherGroup, AnswersEachJobAsExecuteGatherAlone) {
  BadIndexGroup group;
  std::vector<core::GatherJob> jobs;
  for (std::unique_ptr<Case>& c : group.cases) {
    jobs.push_back(
        {&c->plan, group.table->tensor.view(), c->req.indices.view(), c->output.mutable_view()});
  }
  const std::vector<absl::Status> statuses = core::ExecuteGatherGroup(jobs);
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_THAT(statuses[1],
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,0] = 7 is not in [-3, 3)"));
  EXPECT_THAT(statuses[0], tensorcompute::testing::IsOk());
  EXPECT_THAT(statuses[2], tensorcompute::testing::IsOk());
  EXPECT_THAT(group.cases[2]->output.values<int64_t>(), ::testing::ElementsAre(30, 31));
  EXPECT_TRUE(core::ExecuteGatherGroup({}).empty());
}

TEST(CpuExecutorGroups, StringOutputsOverTheCapFailOnlyTheirTask) {
  Table table = MakeTable(tensorcompute::testing::MakeStrings({2}, {"a", std::string(100, 'x')}));
  core::PlanOptions small_cap;
  small_cap.max_output_bytes = 2 * core::kStringElementOverhead + 50;
  std::vector<std::unique_ptr<Case>> cases;
  for (const std::vector<int64_t>& values : std::vector<std::vector<int64_t>>{{0, 0}, {0, 1}}) {
    GatherRequest req;
    req.params = table->tensor.Clone();
    req.indices = MakeIndices(core::DataType::kInt64, {2}, values);
    req.axis = 0;
    cases.push_back(MakeCase(std::move(req)));
    cases.back()->plan.max_output_bytes = small_cap.max_output_bytes;
  }
  Batch batch;
  for (std::unique_ptr<Case>& c : cases) batch.push_back(TableTask(*c, table));
  CpuExecutor executor(&SharedPool());
  RunAndWait(executor, std::move(batch));
  EXPECT_THAT(cases[0]->got, tensorcompute::testing::IsOk());
  EXPECT_EQ(cases[0]->output.strings()[0], "a");
  EXPECT_THAT(cases[1]->got, StatusIs(absl::StatusCode::kResourceExhausted));
}

// One pass: by the time the first task of a group is answered, every task of the group has
// its output written (per task, with one task per job, that would not hold).
TEST(CpuExecutorGroups, AGroupIsComputedBeforeAnyOfItsTasksIsAnswered) {
  Rng rng(92);
  Table table = MakeTable(RandomTensor(core::DataType::kFloat32, {1000, 64}, rng));
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < 64; ++i) {
    GatherRequest req;
    req.params = table->tensor.Clone();
    req.indices = RandomIndices(core::DataType::kInt32, {16}, {1000}, rng);
    req.axis = 0;
    cases.push_back(MakeCase(std::move(req)));
  }
  Batch batch;
  std::vector<const core::Tensor*> outputs;
  for (std::unique_ptr<Case>& c : cases) {
    batch.push_back(TableTask(*c, table));
    outputs.push_back(&c->output);
  }
  CpuExecutorOptions options;
  options.small_job_bytes = 1;  // the per-task path would answer task by task
  CpuExecutor executor(&SharedPool(), options);
  EXPECT_EQ(WrittenAtFirstAnswer(executor, std::move(batch), outputs), 64);
  for (const std::unique_ptr<Case>& c : cases) EXPECT_TRUE(SameAsAlone(*c));
}

}  // namespace
}  // namespace tensorcompute::batching
