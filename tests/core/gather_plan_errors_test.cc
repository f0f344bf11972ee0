// Every validation error of core/gather_plan.h (and the tensor checks it applies), with its
// status code and the facts its message must state; plus the plan's reduction to
// [batch, outer, rows, slice] on a documented example.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/gather.h"
#include "core/gather_plan.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeStrings;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kExhausted = absl::StatusCode::kResourceExhausted;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Tensor Floats(Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return MakeTensor<float>(std::move(shape), std::vector<float>(n, 1.0f));
}

Tensor Idx(Shape shape, const std::vector<int64_t>& values) {
  return MakeIndices(DataType::kInt64, std::move(shape), values);
}

TEST(PlanGatherErrors, ParamsDataTooShortOrTooLong) {
  const Tensor indices = Idx({1}, {0});
  for (size_t size : {23u, 25u}) {
    const std::vector<uint8_t> bytes(size);
    TensorView params{DataType::kFloat32, {2, 3}, bytes, {}};
    EXPECT_THAT(PlanGather(params, indices.view(), 0, 0),
                StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr(std::to_string(size)),
                                         HasSubstr("24"))));
    EXPECT_THAT(PlanGatherNd(params, Idx({1, 1}, {0}).view(), 0),
                StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr(std::to_string(size)),
                                         HasSubstr("24"))));
  }
}

TEST(PlanGatherErrors, IndicesDataLengthWrong) {
  const Tensor params = Floats({4});
  const std::vector<uint8_t> bytes(12);  // 3 x int32, but the shape says 2 x int64
  TensorView indices{DataType::kInt64, {2}, bytes, {}};
  EXPECT_THAT(PlanGather(params.view(), indices, 0, 0),
              StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("12"), HasSubstr("16"))));
}

TEST(PlanGatherErrors, StringCountWrong) {
  std::string a = "a", b = "b";
  const std::vector<const std::string*> ptrs = {&a, &b};
  TensorView params{DataType::kString, {3}, {}, ptrs};
  EXPECT_THAT(PlanGather(params, Idx({1}, {0}).view(), 0, 0),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("2 strings"),
                                       HasSubstr("3 elements"))));
}

TEST(PlanGatherErrors, NegativeDimension) {
  TensorView params{DataType::kFloat32, {2, -3}, {}, {}};
  EXPECT_THAT(PlanGather(params, Idx({1}, {0}).view(), 0, 0),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("-3"))));
  TensorView indices{DataType::kInt32, {-1}, {}, {}};
  EXPECT_THAT(PlanGatherNd(Floats({2}).view(), indices, 0),
              StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("-1"))));
}

TEST(PlanGatherErrors, UnknownAndUnspecifiedDtypes) {
  const std::vector<uint8_t> bytes(4);
  TensorView params{static_cast<DataType>(99), {4}, bytes, {}};
  EXPECT_THAT(PlanGather(params, Idx({1}, {0}).view(), 0, 0),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("99"))));
  params.dtype = DataType::kUnspecified;
  EXPECT_THAT(PlanGatherNd(params, Idx({1, 1}, {0}).view(), 0),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("unspecified"))));
}

TEST(PlanGatherErrors, IndicesMustBeInt32OrInt64) {
  const Tensor params = Floats({4});
  const Tensor float_indices = MakeTensor<float>({1}, {0.0f});
  EXPECT_THAT(PlanGather(params.view(), float_indices.view(), 0, 0),
              StatusIs(kInvalid, AllOf(HasSubstr("int32 or int64"), HasSubstr("float32"))));
  const Tensor u64 = MakeTensor<uint64_t>({1, 1}, {0});
  EXPECT_THAT(PlanGatherNd(params.view(), u64.view(), 0), StatusIs(kInvalid, HasSubstr("uint64")));
  const Tensor strings = MakeStrings({1}, {"0"});
  EXPECT_THAT(PlanGather(params.view(), strings.view(), 0, 0),
              StatusIs(kInvalid, HasSubstr("string")));
}

TEST(PlanGatherErrors, RankAboveMaxRank) {
  PlanOptions options;
  options.max_rank = 3;
  EXPECT_THAT(PlanGather(Floats({1, 1, 1, 1}).view(), Idx({1}, {0}).view(), 0, 0, options),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("rank 4"), HasSubstr("3"))));
  EXPECT_THAT(PlanGather(Floats({2}).view(), Idx({1, 1, 1, 1}, {0}).view(), 0, 0, options),
              StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("rank 4"))));
  EXPECT_THAT(PlanGather(Floats({1, 1, 1}).view(), Idx({1}, {0}).view(), 0, 0, options), IsOk());
  // The default cap is 32.
  EXPECT_THAT(PlanGather(Floats(Shape(33, 1)).view(), Idx({1}, {0}).view(), 0, 0),
              StatusIs(kInvalid, AllOf(HasSubstr("rank 33"), HasSubstr("32"))));
  EXPECT_THAT(PlanGather(Floats(Shape(32, 1)).view(), Idx({1}, {0}).view(), 0, 0), IsOk());
}

TEST(PlanGatherErrors, ScalarParams) {
  const Tensor scalar = Floats({});
  EXPECT_THAT(PlanGather(scalar.view(), Idx({}, {0}).view(), std::nullopt, 0),
              StatusIs(kInvalid, AllOf(HasSubstr("params"), HasSubstr("scalar"))));
  EXPECT_THAT(PlanGatherNd(scalar.view(), Idx({1, 0}, {}).view(), 0),
              StatusIs(kInvalid, AllOf(HasSubstr("params"), HasSubstr("scalar"))));
}

TEST(PlanGatherErrors, AxisOutOfRange) {
  const Tensor params = Floats({2, 3});
  const Tensor indices = Idx({1}, {0});
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, 0),
              StatusIs(kInvalid, "axis = 2 is not in [-2, 2) for params of rank 2"));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), -3, 0),
              StatusIs(kInvalid, "axis = -3 is not in [-2, 2) for params of rank 2"));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), kMax, 0),
              StatusIs(kInvalid, HasSubstr(std::to_string(kMax))));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), kMin, 0),
              StatusIs(kInvalid, HasSubstr(std::to_string(kMin))));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), -2, 0), IsOk());
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 1, 0), IsOk());
}

TEST(PlanGatherErrors, BatchDimsOutOfRange) {
  const Tensor params = Floats({2, 3, 4});
  const Tensor indices = Idx({2, 1}, {0, 0});
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, 3),
              StatusIs(kInvalid, "batch_dims = 3 is not in [-2, 2] for indices of rank 2"));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, -3),
              StatusIs(kInvalid, HasSubstr("batch_dims = -3 is not in [-2, 2]")));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, kMax),
              StatusIs(kInvalid, HasSubstr(std::to_string(kMax))));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, kMin),
              StatusIs(kInvalid, HasSubstr(std::to_string(kMin))));
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 2, -2), IsOk());  // = 0
}

TEST(PlanGatherErrors, BatchDimsMustBeBelowParamsRank) {
  // batch_dims = rank(indices) = 2 is legal for indices, but params has rank 2.
  EXPECT_THAT(
      PlanGather(Floats({2, 3}).view(), Idx({2, 3}, {0, 0, 0, 0, 0, 0}).view(), std::nullopt, 2),
      StatusIs(kInvalid, AllOf(HasSubstr("batch_dims = 2"), HasSubstr("rank(params) = 2"))));
}

TEST(PlanGatherErrors, BatchDimsGreaterThanAxis) {
  EXPECT_THAT(PlanGather(Floats({2, 3}).view(), Idx({2, 1}, {0, 0}).view(), 0, 1),
              StatusIs(kInvalid, AllOf(HasSubstr("axis = 0"), HasSubstr("batch_dims = 1"))));
  EXPECT_THAT(PlanGather(Floats({2, 3}).view(), Idx({2, 1}, {0, 0}).view(), -2, -1),
              StatusIs(kInvalid, HasSubstr("axis = -2")));
}

TEST(PlanGatherErrors, MismatchedBatchDimensionsShowBothShapes) {
  const auto shows_both = AllOf(HasSubstr("[2,3,4]"), HasSubstr("[2,4,1]"));
  EXPECT_THAT(
      PlanGather(Floats({2, 3, 4}).view(), Idx({2, 4, 1}, std::vector<int64_t>(8)).view(), 2, 2),
      StatusIs(kInvalid, shows_both));
  EXPECT_THAT(
      PlanGatherNd(Floats({2, 3, 4}).view(), Idx({2, 4, 1}, std::vector<int64_t>(8)).view(), 2),
      StatusIs(kInvalid, shows_both));
}

TEST(PlanGatherNdErrors, ScalarIndices) {
  EXPECT_THAT(PlanGatherNd(Floats({2}).view(), Idx({}, {0}).view(), 0),
              StatusIs(kInvalid, AllOf(HasSubstr("indices"), HasSubstr("scalar"))));
}

TEST(PlanGatherNdErrors, DepthZero) {
  EXPECT_THAT(PlanGatherNd(Floats({2, 3}).view(), Idx({4, 0}, {}).view(), 0),
              StatusIs(kInvalid, AllOf(HasSubstr("= 0"), HasSubstr("[1, 2]"), HasSubstr("[4,0]"),
                                       HasSubstr("[2,3]"))));
}

TEST(PlanGatherNdErrors, DepthAboveRankMinusBatchDims) {
  EXPECT_THAT(PlanGatherNd(Floats({2, 3}).view(), Idx({1, 3}, {0, 0, 0}).view(), 0),
              StatusIs(kInvalid, AllOf(HasSubstr("= 3"), HasSubstr("[1, 2]"))));
  EXPECT_THAT(PlanGatherNd(Floats({2, 3}).view(), Idx({2, 2}, {0, 0, 0, 0}).view(), 1),
              StatusIs(kInvalid, AllOf(HasSubstr("= 2"), HasSubstr("[1, 1]"))));
  EXPECT_THAT(PlanGatherNd(Floats({2, 3}).view(), Idx({2, 1}, {0, 0}).view(), 1), IsOk());
}

TEST(PlanGatherNdErrors, BatchDimsOutOfRange) {
  const Tensor params = Floats({2, 3});
  const Tensor indices = Idx({2, 1}, {0, 0});
  for (int64_t b : {int64_t{-1}, int64_t{2}, int64_t{3}, kMin, kMax}) {
    EXPECT_THAT(PlanGatherNd(params.view(), indices.view(), b),
                StatusIs(kInvalid, HasSubstr("batch_dims = " + std::to_string(b))))
        << b;
  }
  // b < min(rank(params), rank(indices)): rank(indices) 1 allows only 0.
  EXPECT_THAT(PlanGatherNd(params.view(), Idx({2}, {0, 0}).view(), 1),
              StatusIs(kInvalid, HasSubstr("[0, 1)")));
}

TEST(PlanGatherErrors, ShapeProductOverflow) {
  TensorView params{DataType::kInt8, {int64_t{1} << 62, 4}, {}, {}};
  EXPECT_THAT(PlanGather(params, Idx({1}, {0}).view(), 0, 0),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("too many elements"))));
  // Each input fits, but the output [0, 2^62, 4] does not: RESOURCE_EXHAUSTED, with a message
  // that does not claim that an empty output has too many elements.
  TensorView indices{DataType::kInt64, {0, int64_t{1} << 62}, {}, {}};
  EXPECT_THAT(PlanGather(Floats({1, 4}).view(), indices, 0, 0),
              StatusIs(kExhausted, Eq("output shape [0,4611686018427387904,4]: the product of "
                                      "its nonzero dimensions must fit in int64, even though a "
                                      "dimension is 0 (the output is empty)")));
}

TEST(PlanGatherErrors, OutputAboveMaxOutputBytes) {
  PlanOptions options;
  options.max_output_bytes = 99;
  // 5 x 5 float32 = 100 bytes.
  const Tensor params = Floats({5, 5});
  const Tensor indices = Idx({5}, {0, 1, 2, 3, 4});
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 0, 0, options),
              StatusIs(kExhausted, AllOf(HasSubstr("100"), HasSubstr("99"), HasSubstr("[5,5]"))));
  EXPECT_THAT(PlanGatherNd(params.view(), Idx({5, 1}, {0, 1, 2, 3, 4}).view(), 0, options),
              StatusIs(kExhausted, AllOf(HasSubstr("100"), HasSubstr("99"))));
  GatherOptions gather_options;
  gather_options.plan = options;
  EXPECT_THAT(Gather(params.view(), indices.view(), 0, 0, gather_options), StatusIs(kExhausted));
  options.max_output_bytes = 100;
  EXPECT_THAT(PlanGather(params.view(), indices.view(), 0, 0, options), IsOk());
}

TEST(PlanGatherErrors, StringOutputCapCountsPerElementOverheadAtPlanTime) {
  PlanOptions options;
  options.max_output_bytes = 3 * kStringElementOverhead - 1;
  const Tensor params = MakeStrings({3}, {"", "", ""});
  EXPECT_THAT(PlanGather(params.view(), Idx({3}, {0, 1, 2}).view(), 0, 0, options),
              StatusIs(kExhausted));
}

TEST(ExecuteGatherErrors, StringBytesOverTheCapAreFoundAtExecuteTime) {
  // 4 output strings of 100 characters: 4 x 32 overhead at plan time (128 bytes) fits a cap of
  // 500, but 400 characters + 128 do not.
  const Tensor params = MakeStrings({2}, {std::string(100, 'x'), std::string(100, 'y')});
  const Tensor indices = Idx({4}, {0, 1, 1, 0});
  GatherOptions options;
  options.plan.max_output_bytes = 500;
  ASSERT_THAT(PlanGather(params.view(), indices.view(), 0, 0, options.plan), IsOk());
  EXPECT_THAT(Gather(params.view(), indices.view(), 0, 0, options),
              StatusIs(kExhausted, AllOf(HasSubstr("528"), HasSubstr("500"))));
  EXPECT_THAT(GatherNd(params.view(), Idx({4, 1}, {0, 1, 1, 0}).view(), 0, options),
              StatusIs(kExhausted, AllOf(HasSubstr("528"), HasSubstr("500"))));
  options.plan.max_output_bytes = 528;
  EXPECT_THAT(Gather(params.view(), indices.view(), 0, 0, options), IsOk());
}

TEST(ExecuteGatherErrors, OutOfRangeIndexExactText) {
  const Tensor params = Floats({3, 2});
  EXPECT_THAT(GatherNd(params.view(), Idx({2, 1}, {0, 7}).view(), 0),
              StatusIs(kInvalid, "indices[1,0] = 7 is not in [-3, 3)"));
  EXPECT_THAT(Gather(params.view(), Idx({2, 2}, {0, 1, -4, 9}).view(), 0, 0),
              StatusIs(kInvalid, "indices[1,0] = -4 is not in [-3, 3)"));
  EXPECT_THAT(GatherNd(params.view(), Idx({1, 2}, {2, 2}).view(), 0),
              StatusIs(kInvalid, "indices[0,1] = 2 is not in [-2, 2)"));
  EXPECT_THAT(Gather(params.view(), Idx({}, {3}).view(), 0, 0),
              StatusIs(kInvalid, "indices = 3 is not in [-3, 3)"));
}

TEST(ExecuteGatherErrors, SizeZeroDimensionNamesPositionAndValue) {
  const Tensor params = Floats({2, 0, 3});
  EXPECT_THAT(Gather(params.view(), Idx({2}, {0, 0}).view(), 1, 0),
              StatusIs(kInvalid, AllOf(StartsWith("indices[0] = 0 "), HasSubstr("0"))));
  EXPECT_THAT(GatherNd(params.view(), Idx({1, 2}, {1, -1}).view(), 0),
              StatusIs(kInvalid, StartsWith("indices[0,1] = -1 ")));
}

TEST(PlanGather, ReducesToBatchOuterRowsSlice) {
  // tf.gather's example: params (5, 6, 7, 8), indices (10, 11), axis 2.
  const Tensor params = Floats({5, 6, 7, 8});
  const Tensor indices = Idx({10, 11}, std::vector<int64_t>(110, 0));
  const absl::StatusOr<GatherPlan> plan = PlanGather(params.view(), indices.view(), 2, 0);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output_shape, Shape({5, 6, 10, 11, 8}));
  EXPECT_EQ(plan->output_elements, 5 * 6 * 10 * 11 * 8);
  EXPECT_EQ(plan->output_bytes, 5 * 6 * 10 * 11 * 8 * 4);
  EXPECT_EQ(plan->batch, 1);
  EXPECT_EQ(plan->outer, 30);
  EXPECT_EQ(plan->num_indices, 110);
  EXPECT_EQ(plan->rows, 7);
  EXPECT_EQ(plan->slice, 8);
  EXPECT_EQ(plan->depth, 1);
}

TEST(PlanGatherNd, ReducesToBatchRowsSlice) {
  const Tensor params = Floats({5, 7, 3, 2});
  const Tensor indices = Idx({5, 4, 2}, std::vector<int64_t>(40, 0));
  const absl::StatusOr<GatherPlan> plan = PlanGatherNd(params.view(), indices.view(), 1);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output_shape, Shape({5, 4, 2}));
  EXPECT_EQ(plan->batch, 5);
  EXPECT_EQ(plan->outer, 1);
  EXPECT_EQ(plan->num_indices, 4);
  EXPECT_EQ(plan->depth, 2);
  EXPECT_EQ(plan->rows, 21);
  EXPECT_EQ(plan->slice, 2);
}

TEST(PlanGather, InvalidArgumentsWinOverBadIndexValues) {
  // Index values are not read at plan time: a bad value never hides an argument error.
  EXPECT_THAT(Gather(Floats({2}).view(), Idx({1}, {99}).view(), 1, 0),
              StatusIs(kInvalid, HasSubstr("axis = 1")));
}

}  // namespace
}  // namespace tensorcompute::core
