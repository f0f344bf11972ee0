// Pooled lookups (EmbeddingBag tasks) in CpuExecutor (core/batching/cpu_executor.h) and
// core::ExecuteEmbeddingBagGroup under it: random batches of lookups on a few resident tables
// (every float dtype and mode, weights, offsets and fixed bags, padding_idx) mixed with
// gathers on the same tables and with inline lookups, each answer compared byte for byte and
// word for word with computing that lookup alone; a bad index and a cancelled task inside a
// group; make_output per task; and one pass per group.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/embedding_bag.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "tests/batching/task_case.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::batching::test_support::BagCase;
using ::tensorcompute::batching::test_support::Case;
using ::tensorcompute::batching::test_support::MakeBagCase;
using ::tensorcompute::batching::test_support::MakeBagTask;
using ::tensorcompute::batching::test_support::MakeCase;
using ::tensorcompute::batching::test_support::MakeOutputOnDemand;
using ::tensorcompute::batching::test_support::MakeTable;
using ::tensorcompute::batching::test_support::MakeTask;
using ::tensorcompute::batching::test_support::RunAndWait;
using ::tensorcompute::batching::test_support::SentinelIntact;
using ::tensorcompute::batching::test_support::SharedPool;
using ::tensorcompute::batching::test_support::WrittenAtFirstAnswer;
using ::tensorcompute::testing::BagForm;
using ::tensorcompute::testing::Chance;
using ::tensorcompute::testing::EmbeddingBagCase;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomBagOptions;
using ::tensorcompute::testing::RandomEmbeddingBagCase;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::SetIndexValue;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using Table = std::shared_ptr<const core::ResidentTensor>;

constexpr core::DataType kFloatTypes[] = {core::DataType::kFloat16, core::DataType::kBfloat16,
                                          core::DataType::kFloat32, core::DataType::kFloat64};
constexpr core::EmbeddingBagMode kModes[] = {
    core::EmbeddingBagMode::kSum, core::EmbeddingBagMode::kMean, core::EmbeddingBagMode::kMax,
    core::EmbeddingBagMode::kSqrtn};

// A random lookup on `table` (any mode, weights, bag form, padding).
EmbeddingBagCase RandomLookup(const Table& table, Rng& rng) {
  RandomBagOptions o;
  o.params = &table->tensor;
  o.dtype = table->tensor.dtype();
  o.mode = kModes[UniformInt(rng, 0, 3)];
  o.weighted = o.mode != core::EmbeddingBagMode::kMax && Chance(rng, 0.5);
  o.form = static_cast<BagForm>(UniformInt(rng, 0, 2));
  o.bags = UniformInt(rng, 1, 20);
  return RandomEmbeddingBagCase(o, rng);
}

// The same status, code and words, and byte-identical output, as core::EmbeddingBag alone.
::testing::AssertionResult SameAsAlone(const BagCase& c) {
  return test_support::SameAsAlone(c.got, c.output, c.req.Expected(), c.req.DebugString());
}

std::unique_ptr<Task> TableTask(BagCase& c, const Table& table) {
  return test_support::OnTable(MakeBagTask(c), table);
}

// Out of range for the case's params: the first index made `rows`.
bool MakeABadIndex(EmbeddingBagCase& req) {
  if (req.indices.num_elements() == 0) return false;
  SetIndexValue(req.indices, 0, req.params.shape()[0]);
  return true;
}

struct Mix {
  std::vector<Table> tables;
  std::vector<std::unique_ptr<BagCase>> lookups;
  std::vector<std::unique_ptr<Case>> gathers;
  std::vector<bool> cancelled;  // per lookup
  std::vector<int> made;        // make_output calls per lookup
};

// A batch of random lookups on two tables per float dtype (a bad index and a cancelled task
// in some groups; make_output on every other task), gathers on the same tables, and inline
// lookups, shuffled.
Batch RandomMix(Mix& mix, Rng& rng) {
  for (core::DataType dtype : kFloatTypes) {
    for (int t = 0; t < 2; ++t) {
      const int64_t dim = Chance(rng, 0.5) ? 8 * UniformInt(rng, 1, 4) : UniformInt(rng, 1, 12);
      mix.tables.push_back(MakeTable(
          tensorcompute::testing::RandomTensor(dtype, {UniformInt(rng, 1, 40), dim}, rng)));
    }
  }
  struct Planned {
    Table table;  // null: inline
    bool cancel = false;
  };
  std::vector<Planned> planned;
  for (const Table& table : mix.tables) {
    const int64_t n = UniformInt(rng, 1, 6);
    const int64_t bad = Chance(rng, 0.4) ? UniformInt(rng, 0, n - 1) : -1;
    const int64_t cancel = Chance(rng, 0.3) ? UniformInt(rng, 0, n - 1) : -1;
    for (int64_t i = 0; i < n; ++i) {
      EmbeddingBagCase req = RandomLookup(table, rng);
      if (i == bad) MakeABadIndex(req);
      mix.lookups.push_back(MakeBagCase(std::move(req)));
      planned.push_back({table, i == cancel});
    }
    // A gather on the same table (a group of its own kind) and an inline lookup.
    GatherRequest gather;
    gather.params = table->tensor.Clone();
    gather.indices = RandomIndices(core::DataType::kInt64, {3}, {table->tensor.shape()[0]}, rng);
    gather.axis = 0;
    mix.gathers.push_back(MakeCase(std::move(gather)));
    RandomBagOptions inline_options;
    inline_options.dtype = table->tensor.dtype();
    inline_options.bags = UniformInt(rng, 1, 10);
    mix.lookups.push_back(MakeBagCase(RandomEmbeddingBagCase(inline_options, rng)));
    planned.push_back({nullptr, false});
  }
  mix.cancelled.assign(planned.size(), false);
  mix.made.assign(planned.size(), 0);
  Batch batch;
  for (size_t i = 0; i < planned.size(); ++i) {
    BagCase& c = *mix.lookups[i];
    std::unique_ptr<Task> task = planned[i].table ? TableTask(c, planned[i].table) : MakeBagTask(c);
    if (i % 2 == 0) MakeOutputOnDemand(*task, c.output, &mix.made[i]);
    if (planned[i].cancel) {
      task->cancel->Cancel();
      mix.cancelled[i] = true;
    }
    batch.push_back(std::move(task));
  }
  for (size_t g = 0; g < mix.gathers.size(); ++g) {
    batch.push_back(test_support::OnTable(MakeTask(*mix.gathers[g]), mix.tables[g]));
  }
  std::shuffle(batch.begin(), batch.end(), rng);
  return batch;
}

TEST(CpuExecutorBags, RandomMixesMatchComputingEachLookupAlone) {
  const core::ExecuteOptions defaults;
  const int64_t split_thresholds[] = {defaults.min_parallel_bytes, 1};  // 1: every group splits
  Rng rng(2311);
  for (int64_t min_parallel_bytes : split_thresholds) {
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE(::testing::Message()
                   << "min_parallel_bytes " << min_parallel_bytes << ", round " << round);
      CpuExecutorOptions options;
      options.execute.min_parallel_bytes = min_parallel_bytes;
      CpuExecutor executor(&SharedPool(), options);
      Mix mix;
      RunAndWait(executor, RandomMix(mix, rng));
      for (size_t i = 0; i < mix.lookups.size(); ++i) {
        const BagCase& c = *mix.lookups[i];
        ASSERT_EQ(c.calls.load(), 1) << c.req.DebugString();
        if (mix.cancelled[i]) {
          EXPECT_THAT(c.got, StatusIs(absl::StatusCode::kCancelled));
          EXPECT_EQ(mix.made[i], 0) << "make_output called for a cancelled task";
          EXPECT_TRUE(SentinelIntact(c.output));
          continue;
        }
        if (i % 2 == 0) {
          EXPECT_EQ(mix.made[i], 1) << c.req.DebugString();
        }
        ASSERT_TRUE(SameAsAlone(c));
      }
      for (const std::unique_ptr<Case>& g : mix.gathers) {
        ASSERT_EQ(g->calls.load(), 1);
        EXPECT_THAT(g->got, IsOk());
      }
    }
  }
}

// Three lookups on one table, the middle one with a bad index.
struct BadIndexGroup {
  Table table;
  std::vector<std::unique_ptr<BagCase>> cases;

  explicit BadIndexGroup(Rng& rng)
      : table(MakeTable(
            tensorcompute::testing::RandomTensor(core::DataType::kFloat32, {30, 16}, rng))) {
    for (int i = 0; i < 3; ++i) {
      EmbeddingBagCase req = RandomLookup(table, rng);
      while (i == 1 && !MakeABadIndex(req)) req = RandomLookup(table, rng);
      cases.push_back(MakeBagCase(std::move(req)));
    }
  }
};

TEST(CpuExecutorBags, ABadIndexFailsOnlyItsOwnTaskWithCoresWords) {
  Rng rng(5);
  BadIndexGroup group(rng);
  Batch batch;
  for (std::unique_ptr<BagCase>& c : group.cases) batch.push_back(TableTask(*c, group.table));
  CpuExecutor executor(&SharedPool());
  RunAndWait(executor, std::move(batch));
  EXPECT_THAT(group.cases[1]->got,
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("= 30 is not in")));
  for (const std::unique_ptr<BagCase>& c : group.cases) EXPECT_TRUE(SameAsAlone(*c));
  EXPECT_THAT(group.cases[0]->got, IsOk());
  EXPECT_THAT(group.cases[2]->got, IsOk());
}

TEST(CoreExecuteEmbeddingBagGroup, AnswersEachJobAsExecuteEmbeddingBagAlone) {
  Rng rng(6);
  for (int64_t min_parallel_bytes : {core::kEmbeddingBagMinParallelBytes, int64_t{0}}) {
    BadIndexGroup group(rng);
    std::vector<core::EmbeddingBagJob> jobs;
    for (std::unique_ptr<BagCase>& c : group.cases) {
      jobs.push_back({&c->plan, group.table->tensor.view(), c->req.indices.view(),
                      c->req.offsets_view(), c->req.weights_view(), c->output.mutable_view()});
    }
    const std::vector<absl::Status> statuses =
        core::ExecuteEmbeddingBagGroup(jobs, &SharedPool(), min_parallel_bytes);
    ASSERT_EQ(statuses.size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
      group.cases[j]->got = statuses[j];
      EXPECT_TRUE(SameAsAlone(*group.cases[j]));
    }
    EXPECT_FALSE(statuses[1].ok());
  }
  EXPECT_TRUE(core::ExecuteEmbeddingBagGroup({}).empty());
}

// One pass: by the time the first lookup of a group is answered, every lookup of the group has
// its output written (per task, with one task per job, that would not hold).
TEST(CpuExecutorBags, AGroupIsComputedBeforeAnyOfItsTasksIsAnswered) {
  Rng rng(93);
  Table table =
      MakeTable(tensorcompute::testing::RandomTensor(core::DataType::kFloat32, {1000, 64}, rng));
  std::vector<std::unique_ptr<BagCase>> cases;
  for (int i = 0; i < 64; ++i) {
    RandomBagOptions o;
    o.params = &table->tensor;
    o.form = BagForm::kFixed;
    o.bags = 4;
    o.max_bag_size = 4;
    EmbeddingBagCase req = RandomEmbeddingBagCase(o, rng);
    while (req.indices.num_elements() == 0) req = RandomEmbeddingBagCase(o, rng);
    cases.push_back(MakeBagCase(std::move(req)));
  }
  Batch batch;
  std::vector<const core::Tensor*> outputs;
  for (std::unique_ptr<BagCase>& c : cases) {
    batch.push_back(TableTask(*c, table));
    outputs.push_back(&c->output);
  }
  CpuExecutorOptions options;
  options.small_job_bytes = 1;  // the per-task path would answer task by task
  CpuExecutor executor(&SharedPool(), options);
  EXPECT_EQ(WrittenAtFirstAnswer(executor, std::move(batch), outputs), 64);
  for (const std::unique_ptr<BagCase>& c : cases) EXPECT_TRUE(SameAsAlone(*c));
}

}  // namespace
}  // namespace tensorcompute::batching
