// Tests of the shared test helpers in tests/testing/: the status matchers must reject what
// they should, the random generators must honour their contracts (and be reproducible), and
// the reference's error text must have the documented form.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/tensor.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::testing {
namespace {

using core::DataType;
using core::Shape;
using core::Tensor;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusMatchers, IsOkOnStatusAndStatusOr) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(absl::StatusOr<int>(3), IsOk());
  EXPECT_THAT(absl::InternalError("x"), Not(IsOk()));
  EXPECT_THAT(absl::StatusOr<int>(absl::NotFoundError("x")), Not(IsOk()));
}

TEST(StatusMatchers, StatusIsChecksCodeAndMessage) {
  const absl::Status s = absl::InvalidArgumentError("indices[1] = 7 is not in [-3, 3)");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("= 7")));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, "indices[1] = 7 is not in [-3, 3)"));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kOutOfRange)));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("= 8"))));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kInvalidArgument, "indices[1] = 7")));
  const absl::StatusOr<Tensor> t = absl::ResourceExhaustedError("too big");
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kResourceExhausted, "too big"));
  EXPECT_THAT(t, Not(IsOk()));
}

TEST(StatusMatchers, ExplainsAMismatch) {
  const ::testing::Matcher<const absl::Status&> m = StatusIs(absl::StatusCode::kNotFound);
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(m.MatchAndExplain(absl::InternalError("boom"), &listener));
  EXPECT_THAT(listener.str(), HasSubstr("boom"));
}

TEST(RandomTensor, SameSeedSameTensor) {
  for (DataType d : core::kAllDataTypes) {
    Rng a(42), b(42);
    const Tensor x = RandomTensor(d, {3, 5}, a);
    const Tensor y = RandomTensor(d, {3, 5}, b);
    EXPECT_TRUE(core::IdenticalTensors(x.view(), y.view())) << core::DataTypeName(d);
  }
}

TEST(RandomTensor, BoolsAreZeroOrOneAndStringsAreShort) {
  Rng rng(1);
  const Tensor bools = RandomTensor(DataType::kBool, {1000}, rng);
  int ones = 0;
  for (uint8_t b : bools.bytes()) {
    ASSERT_LE(b, 1);
    ones += b;
  }
  EXPECT_GT(ones, 400);
  EXPECT_LT(ones, 600);
  const Tensor strings = RandomTensor(DataType::kString, {1000}, rng);
  bool saw_empty = false, saw_12 = false;
  for (const std::string& s : strings.strings()) {
    ASSERT_LE(s.size(), 12u);
    saw_empty |= s.empty();
    saw_12 |= s.size() == 12;
  }
  EXPECT_TRUE(saw_empty);
  EXPECT_TRUE(saw_12);
}

TEST(RandomIndices, ValuesCoverMinusDimToDimMinusOnePerComponent) {
  Rng rng(2);
  const Tensor idx = RandomIndices(DataType::kInt32, {5000, 2}, {3, 7}, rng);
  std::vector<int64_t> lo = {0, 0}, hi = {0, 0};
  for (int64_t p = 0; p < idx.num_elements(); ++p) {
    const int64_t v = ReadIndexValue(idx.view(), p);
    lo[p % 2] = std::min(lo[p % 2], v);
    hi[p % 2] = std::max(hi[p % 2], v);
  }
  EXPECT_EQ(lo, std::vector<int64_t>({-3, -7}));
  EXPECT_EQ(hi, std::vector<int64_t>({2, 6}));
}

TEST(RandomIndices, OutOfRangeValuesAreOutOfRangeAndFitTheType) {
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    for (DataType d : {DataType::kInt32, DataType::kInt64}) {
      const int64_t dim = UniformInt(rng, 0, 5);
      const int64_t v = RandomOutOfRangeValue(dim, d, rng);
      EXPECT_TRUE(v < -dim || v >= dim) << v << " dim " << dim;
      if (d == DataType::kInt32) {
        EXPECT_EQ(v, static_cast<int32_t>(v));
      }
    }
  }
}

TEST(ReferenceGather, BadIndexMessageForm) {
  EXPECT_EQ(ExpectedBadIndexMessage({2, 2}, 2, 7, 3), "indices[1,0] = 7 is not in [-3, 3)");
  EXPECT_EQ(ExpectedBadIndexMessage({}, 0, -4, 3), "indices = -4 is not in [-3, 3)");
  const Tensor params = MakeTensor<int32_t>({3}, {10, 20, 30});
  const Tensor indices = MakeIndices(DataType::kInt64, {2, 2}, {0, 2, 5, -9});
  EXPECT_THAT(ReferenceGather(params.view(), indices.view(), 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,0] = 5 is not in [-3, 3)"));
}

TEST(ReferenceGather, HandComputedBatchedCase) {
  // params[b, i, j], indices[b, n]; axis 2, batch_dims 1: out[b, i, n] = params[b, i, idx[b, n]].
  const Tensor params = MakeTensor<int32_t>({2, 2, 3}, {0, 1, 2, 10, 11, 12,  //
                                                        100, 101, 102, 110, 111, 112});
  const Tensor indices = MakeIndices(DataType::kInt32, {2, 2}, {2, 0, -1, 1});
  const absl::StatusOr<Tensor> out = ReferenceGather(params.view(), indices.view(), 2, 1);
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->shape(), Shape({2, 2, 2}));
  EXPECT_THAT(out->values<int32_t>(), ::testing::ElementsAre(2, 0, 12, 10, 102, 101, 112, 111));
}

TEST(RandomRequests, AreValidAndReproducible) {
  Rng a(7), b(7);
  for (int i = 0; i < 200; ++i) {
    const DataType d = core::kAllDataTypes[i % 16];
    const GatherRequest x = i % 2 ? RandomGatherNdRequest(d, DataType::kInt64, a)
                                  : RandomGatherRequest(d, DataType::kInt64, a);
    const GatherRequest y = i % 2 ? RandomGatherNdRequest(d, DataType::kInt64, b)
                                  : RandomGatherRequest(d, DataType::kInt64, b);
    EXPECT_EQ(x.DebugString(), y.DebugString());
    EXPECT_TRUE(core::IdenticalTensors(x.indices.view(), y.indices.view()));
    EXPECT_TRUE(core::IdenticalTensors(x.params.view(), y.params.view()));
    EXPECT_THAT(core::ValidateTensor(x.params.view(), "params", 32), IsOk());
    EXPECT_THAT(core::ValidateTensor(x.indices.view(), "indices", 32), IsOk());
  }
}

}  // namespace
}  // namespace tensorcompute::testing
