// Which tasks the GPU computes (core/cuda/task_routing.h), on hand-made plans, in every build:
// the longest bag of fixed bags and of offsets (with and without include_last_offset, empty
// bags, int32 and int64 offsets), lookups routed to the CPU by their longest bag, gathers by
// their kind and by whether the kernel can count their slice, and max_task_bytes with and
// without a resident copy on the device.

#include "core/cuda/task_routing.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "gtest/gtest.h"

#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor_registry.h"
#include "tests/testing/random_tensor.h"

namespace tensorcompute::cuda {
namespace {

using core::DataType;
using testing::MakeIndices;
using testing::MakeStrings;
using testing::MakeTensor;

// A lookup task on a float32 [10, 4] table with `indices` and `offsets` (none: fixed bags of
// `indices`' second dimension).
struct Lookup {
  core::Tensor params = MakeTensor<float>({10, 4}, std::vector<float>(40, 1.0f));
  core::Tensor indices;
  core::Tensor offsets;
  bool has_offsets = false;
  batching::Task task;

  void Plan(core::EmbeddingBagOptions options = {}) {
    const core::TensorView offsets_view = offsets.view();
    absl::StatusOr<core::EmbeddingBagPlan> plan = core::PlanEmbeddingBag(
        params.view(), indices.view(), has_offsets ? &offsets_view : nullptr, nullptr, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    task.plan = *plan;
    task.params = params.view();
    task.indices = indices.view();
    if (has_offsets) task.offsets = offsets_view;
  }
};

TEST(LongestBag, FixedBagsAreTheirSize) {
  Lookup l;
  l.indices = MakeIndices(DataType::kInt32, {3, 7}, std::vector<int64_t>(21, 1));
  l.Plan();
  EXPECT_EQ(LongestBag(*l.task.bag(), l.task.offsets), 7);
}

TEST(LongestBag, OffsetsGiveTheLargestGapTheLastBagRunningToTheEnd) {
  for (DataType offsets_dtype : {DataType::kInt32, DataType::kInt64}) {
    for (bool include_last : {false, true}) {
      Lookup l;
      l.indices = MakeIndices(DataType::kInt64, {12}, std::vector<int64_t>(12, 2));
      l.has_offsets = true;
      // Bags [0,2) [2,2) [2,5) and then [5,12) (7, the longest) or, with include_last_offset,
      // the same bags ending at 12.
      l.offsets = include_last ? MakeIndices(offsets_dtype, {5}, {0, 2, 2, 5, 12})
                               : MakeIndices(offsets_dtype, {4}, {0, 2, 2, 5});
      core::EmbeddingBagOptions options;
      options.include_last_offset = include_last;
      l.Plan(options);
      EXPECT_EQ(LongestBag(*l.task.bag(), l.task.offsets), 7)
          << core::DataTypeName(offsets_dtype) << (include_last ? " include_last_offset" : "");
    }
  }
}

TEST(LongestBag, NoBagsIsZero) {
  Lookup l;
  l.indices = MakeIndices(DataType::kInt32, {0}, {});
  l.has_offsets = true;
  l.offsets = MakeIndices(DataType::kInt32, {0}, {});
  l.Plan();
  EXPECT_EQ(LongestBag(*l.task.bag(), l.task.offsets), 0);
}

TEST(GpuComputes, LookupsWithABagLongerThanTheBoundGoToTheCpu) {
  Lookup l;
  l.indices = MakeIndices(DataType::kInt64, {9}, std::vector<int64_t>(9, 3));
  l.has_offsets = true;
  l.offsets = MakeIndices(DataType::kInt64, {2}, {0, 1});  // bags of 1 and 8
  l.Plan();
  EXPECT_TRUE(GpuComputes(l.task, 8));
  EXPECT_FALSE(GpuComputes(l.task, 7));
}

TEST(GpuComputes, LookupsWithNothingToReduceGoToTheCpu) {
  Lookup l;
  l.params = MakeTensor<float>({10, 0}, {});
  l.indices = MakeIndices(DataType::kInt32, {2, 3}, std::vector<int64_t>(6, 0));
  l.Plan();
  EXPECT_FALSE(GpuComputes(l.task, 4096));
}

// A gather task of `params` by `indices` on axis 0.
struct Gather {
  Gather(core::Tensor p, core::Tensor i) : params(std::move(p)), indices(std::move(i)) {}

  core::Tensor params;
  core::Tensor indices;
  batching::Task task;

  void Plan() {
    absl::StatusOr<core::GatherPlan> plan = core::PlanGather(params.view(), indices.view(), 0, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    task.plan = *plan;
    task.params = params.view();
    task.indices = indices.view();
  }
};

TEST(GpuComputes, GathersOfFixedSizeDtypesWithOutputGoToTheGpuTheRestToTheCpu) {
  Gather g{MakeTensor<float>({4, 3}, std::vector<float>(12, 0)),
           MakeIndices(DataType::kInt32, {2}, {1, 3})};
  g.Plan();
  EXPECT_TRUE(GpuComputes(g.task, 4096));

  Gather strings{MakeStrings({2}, {"a", "b"}), MakeIndices(DataType::kInt32, {1}, {1})};
  strings.Plan();
  EXPECT_FALSE(GpuComputes(strings.task, 4096));

  Gather no_rows{MakeTensor<float>({4, 3}, std::vector<float>(12, 0)),
                 MakeIndices(DataType::kInt32, {0}, {})};
  no_rows.Plan();
  EXPECT_FALSE(GpuComputes(no_rows.task, 4096));

  Gather empty_slices{MakeTensor<float>({4, 0}, {}), MakeIndices(DataType::kInt32, {2}, {0, 1})};
  empty_slices.Plan();
  EXPECT_FALSE(GpuComputes(empty_slices.task, 4096));
}

TEST(GpuComputes, GathersWhoseSliceTheKernelCannotCountGoToTheCpu) {
  // GatherSliceFitsKernel (gather_batch_test.cc checks its edges) decides; a 4 GiB + 1 byte
  // slice cannot be allocated here, so the rule is checked through a plan that says so.
  Gather g(MakeTensor<uint8_t>({1, 3}, {1, 2, 3}), MakeIndices(DataType::kInt32, {1}, {0}));
  g.Plan();
  ASSERT_TRUE(GpuComputes(g.task, 4096));
  core::GatherPlan& plan = std::get<core::GatherPlan>(g.task.plan);
  plan.slice = (int64_t{1} << 32) + 1;  // 2^32 + 1 chunks of 1 byte
  EXPECT_FALSE(GpuComputes(g.task, 4096));
}

TEST(GpuFits, ResidentParamsOnTheDeviceDoNotCount) {
  Gather g{MakeTensor<float>({256, 4}, std::vector<float>(1024, 0)),
           MakeIndices(DataType::kInt32, {2}, {1, 3})};
  g.Plan();
  // 4 KiB of params, 8 bytes of indices, 32 bytes of output.
  EXPECT_TRUE(GpuFits(g.task, 0, 4096 + 8 + 32));
  EXPECT_FALSE(GpuFits(g.task, 0, 4096 + 8 + 31));
  auto table = std::make_shared<core::ResidentTensor>();
  table->device_copy.gpu = 0;
  table->device_copy.data = g.params.bytes().data();  // any address: it is only compared
  g.task.table = table;
  EXPECT_EQ(ResidentParams(g.task, 0), g.params.bytes().data());
  EXPECT_EQ(ResidentParams(g.task, 1), nullptr);
  EXPECT_TRUE(GpuFits(g.task, 0, 8 + 32));
  EXPECT_FALSE(GpuFits(g.task, 1, 8 + 32)) << "a copy on another device travels";
}

}  // namespace
}  // namespace tensorcompute::cuda
