// CudaExecutor computing pooled lookups (EmbeddingBag tasks): the answers must be
// core::EmbeddingBag's bytes and errors exactly. Built into cuda_test, where every test skips,
// visibly, without a device (the kernel itself), and into cuda_fake_test, where the fake CUDA
// runtime runs the kernel's host twin on its streams (tests/cuda/testing/fake_cuda_runtime.h):
// random lookups of every mode, dtype, weights or not, offsets or fixed bags, 1 to 4096 bags,
// mixed with gathers in one batch; bad indices; lookups the GPU does not serve (no bags, rows
// of 0 elements) on the fallback; lookups larger than the staging buffer; cancelled tasks and
// make_output; lookups on a resident table reading its device copy in place.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/cuda/cuda_executor.h"
#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/table_storage.h"
#include "core/thread_pool.h"
#include "tests/batching/task_case.h"
#include "tests/cuda/executor_fixture.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using core::DataType;
using core::EmbeddingBagMode;
using ::tensorcompute::batching::test_support::BagCase;
using ::tensorcompute::batching::test_support::Case;
using ::tensorcompute::batching::test_support::MakeBagCase;
using ::tensorcompute::batching::test_support::MakeBagTask;
using ::tensorcompute::batching::test_support::MakeCase;
using ::tensorcompute::batching::test_support::MakeTask;
using ::tensorcompute::batching::test_support::SentinelIntact;
using ::tensorcompute::batching::test_support::SharedPool;
using ::tensorcompute::testing::BagForm;
using ::tensorcompute::testing::EmbeddingBagCase;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomBagOptions;
using ::tensorcompute::testing::RandomEmbeddingBagCase;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using ::testing::HasSubstr;

using ::tensorcompute::cuda::test_support::kBatchTimeout;

constexpr DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                    DataType::kFloat64};
constexpr EmbeddingBagMode kModes[] = {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean,
                                       EmbeddingBagMode::kMax, EmbeddingBagMode::kSqrtn};
constexpr BagForm kForms[] = {BagForm::kOffsets, BagForm::kIncludeLastOffset, BagForm::kFixed};

// Answered once, with the CPU's exact answer (the same error, or the same bytes).
::testing::AssertionResult AgreesWithCpu(const BagCase& c) {
  if (c.calls.load() != 1) {
    return ::testing::AssertionFailure()
           << "done called " << c.calls.load() << " times for " << c.req.DebugString();
  }
  const absl::StatusOr<core::Tensor> got = c.Result();
  const absl::StatusOr<core::Tensor> cpu = c.req.Expected();
  if (got.ok() != cpu.ok() || (!got.ok() && got.status() != cpu.status())) {
    return ::testing::AssertionFailure()
           << c.req.DebugString() << "\nGPU: " << got.status() << "\nCPU: " << cpu.status();
  }
  if (got.ok() && !core::IdenticalTensors(got->view(), cpu->view())) {
    return ::testing::AssertionFailure() << c.req.DebugString() << ": GPU and CPU bytes differ";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult GatherAgreesWithCpu(const Case& c) {
  const absl::StatusOr<core::Tensor> got = c.Result();
  const absl::StatusOr<core::Tensor> cpu =
      c.req.nd
          ? core::GatherNd(c.req.params.view(), c.req.indices.view(), c.req.batch_dims)
          : core::Gather(c.req.params.view(), c.req.indices.view(), c.req.axis, c.req.batch_dims);
  if (c.calls.load() != 1 || got.ok() != cpu.ok() || (!got.ok() && got.status() != cpu.status()) ||
      (got.ok() && !core::IdenticalTensors(got->view(), cpu->view()))) {
    return ::testing::AssertionFailure() << "gather differs: " << c.req.DebugString();
  }
  return ::testing::AssertionSuccess();
}

// A random lookup: the i-th combination of mode, dtype, weights and form, `bags` bags.
EmbeddingBagCase RandomLookup(int i, int64_t bags, Rng& rng) {
  RandomBagOptions options;
  options.mode = kModes[i % 4];
  options.dtype = kFloatTypes[(i / 4) % 4];
  options.weighted = (i / 16) % 2 == 1 && options.mode != EmbeddingBagMode::kMax;
  options.form = kForms[(i / 2) % 3];
  options.bags = bags;
  if (bags > 1000) options.max_dim = 24;
  return RandomEmbeddingBagCase(options, rng);
}

class CudaExecutorBagTest : public ::tensorcompute::cuda::test_support::CudaExecutorFixture {
 protected:
  static void RunBags(CudaExecutor& executor, std::vector<std::unique_ptr<BagCase>>& cases) {
    batching::Batch batch;
    for (std::unique_ptr<BagCase>& c : cases) batch.push_back(MakeBagTask(*c));
    Run(executor, std::move(batch));
  }
};

TEST_F(CudaExecutorBagTest, RandomLookupsMixedWithGathersMatchTheCpu) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xe3bc);
  const int64_t bag_counts[] = {1, 2, 5, 33, 130, 4096};
  int checked = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<std::unique_ptr<BagCase>> bags;
    std::vector<std::unique_ptr<Case>> gathers;
    batching::Batch batch;
    for (int i = 0; i < 32; ++i) {
      const int64_t n = bag_counts[(i + round) % std::size(bag_counts)];
      bags.push_back(MakeBagCase(RandomLookup(i + round, n, rng)));
      ASSERT_NE(bags.back(), nullptr);
      batch.push_back(MakeBagTask(*bags.back()));
      if (i % 4 == 0) {  // gathers in the same batch take their own pass
        gathers.push_back(MakeCase(testing::RandomGatherRequest(
            DataType::kFloat32, i % 8 ? DataType::kInt32 : DataType::kInt64, rng)));
        ASSERT_NE(gathers.back(), nullptr);
        batch.push_back(MakeTask(*gathers.back()));
      }
    }
    Run(*executor, std::move(batch));
    for (const std::unique_ptr<BagCase>& c : bags) {
      ASSERT_TRUE(AgreesWithCpu(*c)) << "round " << round;
      ++checked;
    }
    for (const std::unique_ptr<Case>& c : gathers) ASSERT_TRUE(GatherAgreesWithCpu(*c));
  }
  std::cout << "random lookups checked through CudaExecutor: " << checked << std::endl;
}

TEST_F(CudaExecutorBagTest, BadIndicesGiveTheCpusError) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xbad5);
  std::vector<std::unique_ptr<BagCase>> cases;
  int bad = 0;
  for (int i = 0; i < 48; ++i) {
    EmbeddingBagCase r = RandomLookup(i, UniformInt(rng, 1, 200), rng);
    const int64_t n = r.indices.num_elements();
    if (i % 4 != 3 && n > 0) {
      const int64_t rows = r.params.shape()[0];
      const int64_t pos = UniformInt(rng, 0, n - 1);
      testing::SetIndexValue(r.indices, pos,
                             testing::RandomOutOfRangeValue(rows, r.indices.dtype(), rng));
      if (pos + 1 < n) testing::SetIndexValue(r.indices, n - 1, rows);
      ++bad;
    }
    cases.push_back(MakeBagCase(std::move(r)));
    ASSERT_NE(cases.back(), nullptr);
  }
  RunBags(*executor, cases);
  int invalid = 0;
  for (const std::unique_ptr<BagCase>& c : cases) {
    ASSERT_TRUE(AgreesWithCpu(*c));
    invalid += absl::IsInvalidArgument(c->got);
  }
  EXPECT_EQ(invalid, bad);
  EXPECT_GT(bad, 30);
}

// No bags, or rows of 0 elements: only the indices need checking, on the fallback.
TEST_F(CudaExecutorBagTest, LookupsWithNothingToReduceGoToTheFallback) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  std::vector<std::unique_ptr<BagCase>> cases;
  EmbeddingBagCase no_bags;
  no_bags.params = testing::MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  no_bags.indices = testing::MakeIndices(DataType::kInt64, {0}, {});
  no_bags.offsets = testing::MakeIndices(DataType::kInt64, {0}, {});
  cases.push_back(MakeBagCase(std::move(no_bags)));
  EmbeddingBagCase empty_rows;
  empty_rows.params = testing::MakeTensor<float>({3, 0}, {});
  empty_rows.indices = testing::MakeIndices(DataType::kInt32, {2, 2}, {0, 2, -3, 1});
  cases.push_back(MakeBagCase(std::move(empty_rows)));
  EmbeddingBagCase empty_rows_bad;
  empty_rows_bad.params = testing::MakeTensor<float>({3, 0}, {});
  empty_rows_bad.indices = testing::MakeIndices(DataType::kInt32, {2, 2}, {0, 2, 3, 1});
  cases.push_back(MakeBagCase(std::move(empty_rows_bad)));
  Rng rng(3);
  for (int i = 0; i < 6; ++i) cases.push_back(MakeBagCase(RandomLookup(i, 9, rng)));
  for (const std::unique_ptr<BagCase>& c : cases) ASSERT_NE(c, nullptr);
  RunBags(*executor, cases);
  for (const std::unique_ptr<BagCase>& c : cases) ASSERT_TRUE(AgreesWithCpu(*c));
  EXPECT_THAT(cases[2]->got,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices[1,0] = 3")));
}

TEST_F(CudaExecutorBagTest, LookupsLargerThanTheStagingBufferAreChunked) {
  CudaExecutorOptions options;
  options.staging_bytes = int64_t{64} << 10;  // halves of 32 KiB
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(64);
  std::vector<std::unique_ptr<BagCase>> cases;
  for (int i = 0; i < 4; ++i) cases.push_back(MakeBagCase(RandomLookup(i, 17, rng)));
  RandomBagOptions large;  // about 1 MiB of params, 256 KiB of indices and output each
  large.mode = EmbeddingBagMode::kMean;
  large.weighted = true;
  large.max_rows = 4096;
  large.max_dim = 64;
  large.bags = 4096;
  large.max_bag_size = 12;
  cases.push_back(MakeBagCase(RandomEmbeddingBagCase(large, rng)));
  for (int i = 4; i < 8; ++i) cases.push_back(MakeBagCase(RandomLookup(i, 300, rng)));
  for (const std::unique_ptr<BagCase>& c : cases) ASSERT_NE(c, nullptr);
  RunBags(*executor, cases);
  for (const std::unique_ptr<BagCase>& c : cases) ASSERT_TRUE(AgreesWithCpu(*c));
}

TEST_F(CudaExecutorBagTest, CancelledLookupsAreNotComputedAndMakeOutputIsCalledOnce) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(7);
  std::vector<std::unique_ptr<BagCase>> cases;
  for (int i = 0; i < 12; ++i) cases.push_back(MakeBagCase(RandomLookup(i, 20, rng)));
  std::vector<int> made(cases.size(), 0);
  batching::Batch batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_NE(cases[i], nullptr);
    std::unique_ptr<batching::Task> task = MakeBagTask(*cases[i]);
    task->output = core::MutableTensorView();
    task->make_output = [&c = *cases[i], &n = made[i]] {
      ++n;
      return c.output.mutable_view();
    };
    if (i == 0) task->cancel->Cancel();
    if (i == 1) task->deadline = absl::Now() - absl::Seconds(1);
    batch.push_back(std::move(task));
  }
  Run(*executor, std::move(batch));
  EXPECT_THAT(cases[0]->got, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(cases[1]->got, StatusIs(absl::StatusCode::kDeadlineExceeded));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(SentinelIntact(cases[i]->output));
    EXPECT_EQ(made[i], 0);
  }
  for (size_t i = 2; i < cases.size(); ++i) {
    ASSERT_TRUE(AgreesWithCpu(*cases[i]));
    EXPECT_EQ(made[i], 1) << cases[i]->req.DebugString();
  }
}

// Lookups on uploaded tables read the device copy: their params views show zeroed host
// tensors of the same shape, and max_task_bytes is below the tables' size, so a lookup whose
// params travelled (or that ran on the CPU) would come back wrong. Inline lookups and a bad
// index share the batch.
TEST_F(CudaExecutorBagTest, LookupsOnAResidentTableReduceItsDeviceCopy) {
  CudaExecutorOptions options;
  options.max_task_bytes = 16 << 10;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(0x7ab1e);
  struct Resident {
    std::shared_ptr<core::ResidentTensor> table;
    core::Tensor zeros;
  };
  std::vector<Resident> tables;
  for (DataType dtype : kFloatTypes) {
    core::Tensor t = testing::RandomTensor(dtype, {2048, 16}, rng);
    absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, t);
    ASSERT_THAT(copy, IsOk());
    auto entry = std::make_shared<core::ResidentTensor>();
    entry->name = "table";
    entry->device = "gpu:0";
    entry->device_copy = *std::move(copy);
    core::Tensor zeros = t.Clone();
    std::memset(zeros.mutable_bytes().data(), 0, zeros.mutable_bytes().size());
    ASSERT_GT(static_cast<int64_t>(t.bytes().size()), options.max_task_bytes);
    entry->tensor = std::move(t);
    tables.push_back({std::move(entry), std::move(zeros)});
  }
  std::vector<std::unique_ptr<BagCase>> cases;
  std::vector<int> table_of;
  for (int i = 0; i < 32; ++i) {
    EmbeddingBagCase r = RandomLookup(i, UniformInt(rng, 1, 40), rng);
    const int t = i % 5 == 4 ? -1 : static_cast<int>((i / 4) % 4);
    if (t >= 0) {  // the same request over the resident table (of the request's dtype)
      const core::Tensor& table = tables[t].table->tensor;
      r.params = table.Clone();
      std::vector<int64_t> values(r.indices.num_elements());
      for (int64_t& v : values) v = UniformInt(rng, -2048, 2047);
      r.indices = testing::MakeIndices(r.indices.dtype(), r.indices.shape(), values);
      r.options.padding_idx.reset();
      if (i == 6 && !values.empty()) testing::SetIndexValue(r.indices, 0, 2048);
    }
    cases.push_back(MakeBagCase(std::move(r)));
    ASSERT_NE(cases.back(), nullptr);
    table_of.push_back(t);
  }
  batching::Batch batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::unique_ptr<batching::Task> task = MakeBagTask(*cases[i]);
    if (table_of[i] >= 0) {
      task->params = tables[table_of[i]].zeros.view();
      task->table = tables[table_of[i]].table;
    }
    batch.push_back(std::move(task));
  }
  Run(*executor, std::move(batch));
  for (size_t i = 0; i < cases.size(); ++i) ASSERT_TRUE(AgreesWithCpu(*cases[i])) << "task " << i;
}

// Compact tables (issue 24) on the GPU: pooled lookups of every mode and unpooled gathers on a
// float16 and an 8-bit row-wise table, read from the table's device copy and sent inline, give
// the CPU's bytes (the answers on the float32 table the stored values mean: the values here
// hold no -0 or NaN, so a one-row SUM is the row itself, which is what a gather returns).
TEST_F(CudaExecutorBagTest, LookupsOnCompactTablesMatchTheCpu) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xc0ac7);
  std::vector<std::unique_ptr<BagCase>> cases;
  batching::Batch batch;
  std::vector<std::shared_ptr<core::ResidentTensor>> tables;
  std::vector<core::Tensor> meanings;
  std::vector<core::TensorView> flat_indices;
  flat_indices.reserve(64);
  meanings.reserve(4);
  for (core::TableStorage storage :
       {core::TableStorage::kFloat16, core::TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {5, 64}) {
      const int64_t rows = 300;
      std::vector<float> values(static_cast<size_t>(rows * dim));
      for (float& v : values) v = static_cast<float>(UniformInt(rng, 1, 8000)) / 64 - 62.4f;
      const core::Tensor table = testing::MakeTensor<float>({rows, dim}, values);
      const core::TableLayout layout =
          *core::PlanTableLayout("t", storage, DataType::kFloat32, table.shape());
      core::Tensor stored = *core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
      core::TableEncoder encoder("t", layout, stored.mutable_bytes().data());
      ASSERT_THAT(encoder.Append(table.view().data), IsOk());
      // The float32 table the stored values mean, by the CPU's own reading (an unpooled
      // gather of every row; tests/core/table_storage_test.cc checks it against the formula).
      std::vector<int64_t> all(rows);
      for (int64_t r = 0; r < rows; ++r) all[r] = r;
      const core::Tensor all_rows = testing::MakeIndices(DataType::kInt64, {rows}, all);
      const core::EmbeddingBagPlan read = *core::PlanUnpooledGather(
          stored.view(), core::EncodingOf(storage), all_rows.view(), 0, 0);
      meanings.push_back(*core::Tensor::Allocate(DataType::kFloat32, {rows, dim}));
      ASSERT_THAT(core::ExecuteEmbeddingBag(read, stored.view(), all_rows.view(), nullptr, nullptr,
                                            meanings.back().mutable_view()),
                  IsOk());
      absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, stored);
      ASSERT_THAT(copy, IsOk());
      auto entry = std::make_shared<core::ResidentTensor>();
      entry->name = "compact";
      entry->device = "gpu:0";
      entry->device_copy = *std::move(copy);
      entry->storage = storage;
      entry->tensor = std::move(stored);
      tables.push_back(entry);
      for (int i = 0; i < 12; ++i) {
        RandomBagOptions options;
        options.mode = kModes[i % 4];
        options.weighted = i % 3 == 1 && options.mode != EmbeddingBagMode::kMax;
        options.form = i >= 8 ? BagForm::kFixed : kForms[i % 3];
        options.bags = UniformInt(rng, 1, 40);
        options.params = &meanings.back();
        EmbeddingBagCase r = RandomEmbeddingBagCase(options, rng);
        const bool gather = i >= 8;  // bags of one row, as a gather of the same indices
        if (gather) {
          r.options = core::EmbeddingBagOptions{};
          r.weights.reset();
          std::vector<int64_t> ids(static_cast<size_t>(options.bags));
          for (int64_t& v : ids) v = UniformInt(rng, -rows, rows - 1);
          r.indices = testing::MakeIndices(DataType::kInt64, {options.bags, 1}, ids);
        }
        cases.push_back(MakeBagCase(std::move(r)));
        ASSERT_NE(cases.back(), nullptr);
        BagCase& c = *cases.back();
        core::EmbeddingBagOptions compact = c.req.options;
        compact.params_encoding = core::EncodingOf(storage);
        const core::TensorView offsets = c.req.offsets_view(), weights = c.req.weights_view();
        if (gather) {
          flat_indices.push_back(
              core::TensorView{DataType::kInt64, {options.bags}, c.req.indices.view().data, {}});
          c.plan = *core::PlanUnpooledGather(entry->tensor.view(), compact.params_encoding,
                                             flat_indices.back(), 0, 0);
        } else {
          c.plan = *core::PlanEmbeddingBag(entry->tensor.view(), c.req.indices.view(),
                                           c.req.offsets ? &offsets : nullptr,
                                           c.req.weights ? &weights : nullptr, compact);
        }
        std::unique_ptr<batching::Task> task = MakeBagTask(c);
        task->params = entry->tensor.view();
        if (gather) task->indices = flat_indices.back();
        if (i % 2 == 0) task->table = entry;  // else the stored bytes travel inline
        batch.push_back(std::move(task));
      }
    }
  }
  Run(*executor, std::move(batch));
  for (size_t i = 0; i < cases.size(); ++i) ASSERT_TRUE(AgreesWithCpu(*cases[i])) << "task " << i;
}

}  // namespace
}  // namespace tensorcompute::cuda
