// EmbeddingBag (core/embedding_bag.h): the documented examples, every validation error with its
// exact message, random cases compared byte for byte with a slow reference written here, and
// the thread pool's split giving the same bytes as one thread.

#include "core/embedding_bag.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/embedding_bag_kernels.h"
#include "core/embedding_bag_simd.h"
#include "core/half_float.h"
#include "core/thread_pool.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::StatusIs;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

using Mode = EmbeddingBagMode;

// ---- Helpers ----

Tensor Idx(Shape shape, const std::vector<int64_t>& values, DataType dtype = DataType::kInt64) {
  return MakeIndices(dtype, std::move(shape), values);
}

// The 10 x 3 table [[1,2,3],[4,5,6],...,[28,29,30]].
Tensor CountingTable() {
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[i] = static_cast<float>(i + 1);
  return MakeTensor<float>({10, 3}, v);
}

std::vector<float> Floats(const Tensor& t) {
  const auto v = t.values<float>();
  return {v.begin(), v.end()};
}

absl::StatusOr<Tensor> Bag(const Tensor& params, const Tensor& indices, const Tensor* offsets,
                           const Tensor* weights, const EmbeddingBagOptions& options) {
  std::optional<TensorView> o, w;
  if (offsets != nullptr) o = offsets->view();
  if (weights != nullptr) w = weights->view();
  return EmbeddingBag(params.view(), indices.view(), o ? &*o : nullptr, w ? &*w : nullptr, options);
}

EmbeddingBagOptions WithMode(Mode mode) {
  EmbeddingBagOptions options;
  options.mode = mode;
  return options;
}

// ---- (b) Documented examples ----

// The inputs of the examples of nn.EmbeddingBag and F.embedding_bag,
//   https://pytorch.org/docs/stable/generated/torch.nn.EmbeddingBag.html
//   https://pytorch.org/docs/stable/generated/torch.nn.functional.embedding_bag.html
// (input [1,2,4,5,4,3,2,9], offsets [0,4]; the padding example input [2,2,2,2,4,3,2,9] with
// padding_idx=2, whose first bag is all zeros). The docs draw the table at random, so their
// printed numbers cannot be reproduced; the table here is [[1,2,3],...,[28,29,30]] and the
// expected values are worked out by hand (bag 0 = rows 1,2,4,5; bag 1 = rows 4,3,2,9).
TEST(EmbeddingBagDocExamples, TorchSumMeanMaxWithOffsets) {
  const Tensor table = CountingTable();
  const Tensor input = Idx({8}, {1, 2, 4, 5, 4, 3, 2, 9});
  const Tensor offsets = Idx({2}, {0, 4});
  auto sum = Bag(table, input, &offsets, nullptr, WithMode(Mode::kSum));
  ASSERT_THAT(sum, IsOk());
  EXPECT_EQ(sum->shape(), (Shape{2, 3}));
  EXPECT_EQ(Floats(*sum), (std::vector<float>{40, 44, 48, 58, 62, 66}));
  auto mean = Bag(table, input, &offsets, nullptr, WithMode(Mode::kMean));
  ASSERT_THAT(mean, IsOk());
  EXPECT_EQ(Floats(*mean), (std::vector<float>{10, 11, 12, 14.5, 15.5, 16.5}));
  auto max = Bag(table, input, &offsets, nullptr, WithMode(Mode::kMax));
  ASSERT_THAT(max, IsOk());
  EXPECT_EQ(Floats(*max), (std::vector<float>{16, 17, 18, 28, 29, 30}));
  auto sqrtn = Bag(table, input, &offsets, nullptr, WithMode(Mode::kSqrtn));
  ASSERT_THAT(sqrtn, IsOk());
  EXPECT_EQ(Floats(*sqrtn), (std::vector<float>{20, 22, 24, 29, 31, 33}));  // sum / sqrt(4)
}

TEST(EmbeddingBagDocExamples, TorchTwoDimensionalInputIsFixedBags) {
  // "a batch of 2 samples of 4 indices each", as the 2D input [[1,2,4,5],[4,3,2,9]].
  const Tensor table = CountingTable();
  const Tensor input = Idx({2, 4}, {1, 2, 4, 5, 4, 3, 2, 9});
  auto sum = Bag(table, input, nullptr, nullptr, WithMode(Mode::kSum));
  ASSERT_THAT(sum, IsOk());
  EXPECT_EQ(Floats(*sum), (std::vector<float>{40, 44, 48, 58, 62, 66}));
}

TEST(EmbeddingBagDocExamples, TorchPaddingIdx) {
  const Tensor table = CountingTable();
  const Tensor input = Idx({8}, {2, 2, 2, 2, 4, 3, 2, 9});
  const Tensor offsets = Idx({2}, {0, 4});
  EmbeddingBagOptions options = WithMode(Mode::kSum);
  options.padding_idx = 2;
  auto sum = Bag(table, input, &offsets, nullptr, options);
  ASSERT_THAT(sum, IsOk());
  // Bag 0 is all padding: zeros. Bag 1 = rows 4, 3, 9 (row 2 skipped).
  EXPECT_EQ(Floats(*sum), (std::vector<float>{0, 0, 0, 51, 54, 57}));
  options.mode = Mode::kMean;  // padding rows do not count in the denominator
  auto mean = Bag(table, input, &offsets, nullptr, options);
  ASSERT_THAT(mean, IsOk());
  EXPECT_EQ(Floats(*mean), (std::vector<float>{0, 0, 0, 17, 18, 19}));
  options.padding_idx = -8;  // the same row, counted from the end
  auto neg = Bag(table, input, &offsets, nullptr, options);
  ASSERT_THAT(neg, IsOk());
  EXPECT_EQ(Floats(*neg), Floats(*mean));
}

TEST(EmbeddingBagDocExamples, TorchIncludeLastOffset) {
  const Tensor table = CountingTable();
  const Tensor input = Idx({8}, {1, 2, 4, 5, 4, 3, 2, 9});
  const Tensor offsets = Idx({3}, {0, 4, 8});
  EmbeddingBagOptions options = WithMode(Mode::kSum);
  options.include_last_offset = true;
  auto sum = Bag(table, input, &offsets, nullptr, options);
  ASSERT_THAT(sum, IsOk());
  EXPECT_EQ(sum->shape(), (Shape{2, 3}));
  EXPECT_EQ(Floats(*sum), (std::vector<float>{40, 44, 48, 58, 62, 66}));
}

TEST(EmbeddingBagDocExamples, TorchPerSampleWeightsSum) {
  // per_sample_weights "must have exactly the same shape as input"; SUM is Σ wᵢxᵢ.
  const Tensor table = CountingTable();
  const Tensor input = Idx({8}, {1, 2, 4, 5, 4, 3, 2, 9});
  const Tensor offsets = Idx({2}, {0, 4});
  const Tensor w = MakeTensor<float>({8}, {1, 0, 2, 0.5f, -1, 0, 0, 1});
  auto sum = Bag(table, input, &offsets, &w, WithMode(Mode::kSum));
  ASSERT_THAT(sum, IsOk());
  // Bag 0: [4,5,6] + 2*[13,14,15] + 0.5*[16,17,18]; bag 1: -[13,14,15] + [28,29,30].
  EXPECT_EQ(Floats(*sum), (std::vector<float>{38, 41.5f, 45, 15, 15, 15}));
  // TF's weighted mean and sqrtn: divide by Σw = 3.5 and √Σw² = √5.25 (bag 0), Σw = 0 and
  // √2 (bag 1, whose mean divides by zero as TensorFlow's does).
  auto mean = Bag(table, input, &offsets, &w, WithMode(Mode::kMean));
  ASSERT_THAT(mean, IsOk());
  EXPECT_FLOAT_EQ(Floats(*mean)[0], 38 / 3.5f);
  EXPECT_TRUE(std::isinf(Floats(*mean)[3]));
  auto sqrtn = Bag(table, input, &offsets, &w, WithMode(Mode::kSqrtn));
  ASSERT_THAT(sqrtn, IsOk());
  EXPECT_FLOAT_EQ(Floats(*sqrtn)[0], 38 / std::sqrt(5.25f));
  EXPECT_FLOAT_EQ(Floats(*sqrtn)[3], 15 / std::sqrt(2.0f));
}

// OpenVINO's EmbeddingBagOffsetsSum-3 example (an implementation of torch's EmbeddingBag):
//   https://docs.openvino.ai/2024/documentation/openvino-ir-format/operation-sets/operation-specs/sparse/embedding-bag-offsets-sum-3.html
// emb_table [[-0.2,-0.6],[-0.1,-0.4],[-1.9,-1.8],[-1,1.5],[0.8,-0.7]], indices [0,2,3,4],
// offsets [0,2,2]: 3 bags of [2, 0, 2] elements, the second one empty (zeros).
TEST(EmbeddingBagDocExamples, OpenVinoOffsetsSumWithEmptyBag) {
  const Tensor table =
      MakeTensor<float>({5, 2}, {-0.2f, -0.6f, -0.1f, -0.4f, -1.9f, -1.8f, -1, 1.5f, 0.8f, -0.7f});
  const Tensor indices = Idx({4}, {0, 2, 3, 4}, DataType::kInt32);
  const Tensor offsets = Idx({3}, {0, 2, 2}, DataType::kInt32);
  auto sum = Bag(table, indices, &offsets, nullptr, WithMode(Mode::kSum));
  ASSERT_THAT(sum, IsOk());
  const std::vector<float> got = Floats(*sum);
  const std::vector<float> want = {-2.1f, -2.4f, 0, 0, -0.2f, 0.8f};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  for (Mode mode : {Mode::kMean, Mode::kMax, Mode::kSqrtn}) {
    auto r = Bag(table, indices, &offsets, nullptr, WithMode(mode));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(Floats(*r)[2], 0.0f);
    EXPECT_FALSE(std::signbit(Floats(*r)[2]));
  }
}

TEST(EmbeddingBagSemantics, NegativeIndicesCountFromTheEnd) {
  const Tensor table = CountingTable();
  auto a = Bag(table, Idx({3}, {-1, -10, 2}), nullptr, nullptr, {});
  EXPECT_THAT(a, StatusIs(kInvalid));  // rank 1 needs offsets
  const Tensor offsets = Idx({1}, {0});
  a = Bag(table, Idx({3}, {-1, -10, 2}), &offsets, nullptr, {});
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(Floats(*a), (std::vector<float>{36, 39, 42}));  // rows 9, 0, 2
}

TEST(EmbeddingBagSemantics, MaxFollowsTorchCpuForNanAndSignedZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t dim : {1, 8, 64}) {  // the generic kernel; the vector kernel's (AVX2) widths
    std::vector<float> rows;
    for (float v : {nan, -0.0f, 0.0f}) rows.insert(rows.end(), dim, v);
    const Tensor table = MakeTensor<float>({3, dim}, rows);
    const Tensor offsets = Idx({4}, {0, 2, 4, 6});
    // Bags: [nan, -0] -> nan (first row); [-0, nan] -> -0 (NaN later is ignored);
    // [-0, +0] -> -0 (first of equals); [+0, -0] -> +0.
    const Tensor input = Idx({8}, {0, 1, 1, 0, 1, 2, 2, 1});
    auto r = Bag(table, input, &offsets, nullptr, WithMode(Mode::kMax));
    ASSERT_THAT(r, IsOk());
    const std::vector<float> got = Floats(*r);
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_TRUE(std::isnan(got[d])) << "dim " << dim;
      EXPECT_TRUE(got[dim + d] == 0 && std::signbit(got[dim + d])) << "dim " << dim;
      EXPECT_TRUE(got[2 * dim + d] == 0 && std::signbit(got[2 * dim + d])) << "dim " << dim;
      EXPECT_TRUE(got[3 * dim + d] == 0 && !std::signbit(got[3 * dim + d])) << "dim " << dim;
    }
  }
}

TEST(EmbeddingBagSemantics, MisalignedViewsGiveTheSameBytes) {
  const Tensor table = CountingTable();
  const Tensor input = Idx({8}, {1, 2, 4, 5, 4, 3, 2, 9});
  const Tensor offsets = Idx({3}, {0, 4, 4}, DataType::kInt32);
  const Tensor w = MakeTensor<float>({8}, {1, 0, 2, 0.5f, -1, 0, 0, 1});
  auto aligned = Bag(table, input, &offsets, &w, WithMode(Mode::kMean));
  ASSERT_THAT(aligned, IsOk());
  // Every input one byte past an aligned address.
  std::vector<std::vector<uint8_t>> storage;
  auto shifted = [&](const Tensor& t) {
    storage.emplace_back(t.bytes().size() + 1);
    std::memcpy(storage.back().data() + 1, t.bytes().data(), t.bytes().size());
    TensorView v = t.view();
    v.data = absl::Span<const uint8_t>(storage.back().data() + 1, t.bytes().size());
    return v;
  };
  storage.reserve(4);
  const TensorView p = shifted(table), i = shifted(input), o = shifted(offsets), ww = shifted(w);
  auto got = EmbeddingBag(p, i, &o, &ww, WithMode(Mode::kMean));
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(IdenticalTensors(aligned->view(), got->view()));
}

// inf + -inf makes a NaN whose bytes the hardware picks (x86: 0xffc00000); every NaN result
// is written as the positive quiet NaN, in each dtype.
TEST(EmbeddingBagMath, NanResultsAreTheCanonicalQuietNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor table = MakeTensor<float>({2, 1}, {inf, -inf});
  const Tensor both = Idx({1, 2}, {0, 1});
  absl::StatusOr<Tensor> sum = Bag(table, both, nullptr, nullptr, WithMode(Mode::kSum));
  ASSERT_THAT(sum, IsOk());
  uint32_t bits = 0;
  std::memcpy(&bits, sum->bytes().data(), 4);
  EXPECT_EQ(bits, 0x7fc00000u);

  std::vector<uint16_t> halves = {FloatToHalf(inf), FloatToHalf(-inf)};
  Tensor half_table = *Tensor::Allocate(DataType::kFloat16, {2, 1});
  std::memcpy(half_table.mutable_bytes().data(), halves.data(), 4);
  absl::StatusOr<Tensor> half_mean = Bag(half_table, both, nullptr, nullptr, WithMode(Mode::kMean));
  ASSERT_THAT(half_mean, IsOk());
  uint16_t h = 0;
  std::memcpy(&h, half_mean->bytes().data(), 2);
  EXPECT_EQ(h, 0x7e00);

  EXPECT_EQ(CanonicalNan(1.5), 1.5);
  uint64_t dbits = 0;
  const double dnan = CanonicalNan(-std::numeric_limits<double>::quiet_NaN());
  std::memcpy(&dbits, &dnan, 8);
  EXPECT_EQ(dbits, 0x7ff8000000000000u);
}

TEST(EmbeddingBagMath, WeightedTermsRoundOnce) {
  // w * x = 1 + 2^-11 + 2^-24 is not a float; fma keeps the 2^-24 that mul-then-add loses.
  const float w = 1 + 0x1p-12f, x = 1 + 0x1p-12f;
  EXPECT_EQ(AccumulateWeighted(-1.0f, w, x), 0x1p-11f + 0x1p-24f);
  EXPECT_EQ(AccumulateUnweighted(1.0f, 0x1p-24f), 1.0f);
}

TEST(EmbeddingBagMath, BagResultDividesAsTheModeSays) {
  BagStats<double> stats;
  for (Mode mode : {Mode::kSum, Mode::kMean, Mode::kMax, Mode::kSqrtn}) {
    EXPECT_EQ(BagResult(mode, false, 5.0, stats), 0.0) << EmbeddingBagModeName(mode);
  }
  AddWeight(stats, 2.0);
  AddWeight(stats, -1.0);  // count 2, sum_w 1, sum_w2 5
  EXPECT_EQ(BagResult(Mode::kSum, true, 6.0, stats), 6.0);
  EXPECT_EQ(BagResult(Mode::kMean, true, 6.0, stats), 6.0);
  EXPECT_EQ(BagResult(Mode::kMean, false, 6.0, stats), 3.0);
  EXPECT_EQ(BagResult(Mode::kSqrtn, true, 6.0, stats), 6.0 / std::sqrt(5.0));
  EXPECT_EQ(BagResult(Mode::kSqrtn, false, 6.0, stats), 6.0 / std::sqrt(2.0));
}

TEST(EmbeddingBagMath, MaxKeepsTheFirstOfEqualsAndIgnoresLaterNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(AccumulateMax(0.0f, nan, /*first=*/true)));
  EXPECT_TRUE(std::isnan(AccumulateMax(nan, 5.0f, /*first=*/false)));
  EXPECT_EQ(AccumulateMax(1.0f, nan, /*first=*/false), 1.0f);
  EXPECT_TRUE(std::signbit(AccumulateMax(-0.0f, 0.0f, /*first=*/false)));
  EXPECT_EQ(AccumulateMax(7.0f, -3.0f, /*first=*/true), -3.0f);
  EXPECT_EQ(EmbeddingBagModeName(static_cast<Mode>(9)), "mode(9)");
}

// ---- (c) Errors, with their exact messages ----

class EmbeddingBagErrors : public ::testing::Test {
 protected:
  const Tensor table_ = CountingTable();  // 10 x 3 float32
  const Tensor input_ = Idx({4}, {1, 2, 3, 4});
  const Tensor offsets_ = Idx({2}, {0, 2});

  static void ExpectError(const absl::StatusOr<Tensor>& r, const std::string& message) {
    EXPECT_THAT(r, StatusIs(kInvalid, ::testing::Eq(message)));
  }
};

TEST_F(EmbeddingBagErrors, ParamsRankAndDtype) {
  ExpectError(Bag(MakeTensor<float>({30}, std::vector<float>(30)), input_, &offsets_, nullptr, {}),
              "EmbeddingBag: params must have rank 2 [rows, dim], got shape [30]");
  ExpectError(
      Bag(MakeTensor<int32_t>({10, 3}, std::vector<int32_t>(30)), input_, &offsets_, nullptr, {}),
      "EmbeddingBag: params must be float16, bfloat16, float32 or float64, got int32");
}

TEST_F(EmbeddingBagErrors, MalformedTensorsAreNamed) {
  const std::vector<uint8_t> bytes(7);
  const TensorView bad{DataType::kInt64, {2}, bytes, {}};
  const TensorView params = table_.view(), indices = input_.view(), offsets = offsets_.view();
  EXPECT_THAT(PlanEmbeddingBag(params, indices, &bad, nullptr),
              StatusIs(kInvalid, ::testing::StartsWith("offsets")));
  EXPECT_THAT(PlanEmbeddingBag(params, indices, &offsets, &bad),
              StatusIs(kInvalid, ::testing::StartsWith("per_sample_weights")));
  EXPECT_THAT(PlanEmbeddingBag(params, bad, &offsets, nullptr),
              StatusIs(kInvalid, ::testing::StartsWith("indices")));
}

TEST_F(EmbeddingBagErrors, UnknownMode) {
  ExpectError(Bag(table_, input_, &offsets_, nullptr, WithMode(static_cast<Mode>(7))),
              "EmbeddingBag: unknown mode 7; expected SUM (0), MEAN (1), MAX (2) or SQRTN (3)");
}

TEST_F(EmbeddingBagErrors, IndicesDtypeAndRank) {
  ExpectError(Bag(table_, MakeTensor<float>({4}, {1, 2, 3, 4}), &offsets_, nullptr, {}),
              "indices must be int32 or int64, got float32");
  ExpectError(Bag(table_, Idx({1, 2, 2}, {1, 2, 3, 4}), nullptr, nullptr, {}),
              "EmbeddingBag: indices must have rank 1 (with offsets) or rank 2 [bags, n] "
              "(fixed-size bags, without offsets), got shape [1,2,2]");
  ExpectError(Bag(table_, input_, nullptr, nullptr, {}),
              "EmbeddingBag: indices of rank 1 need offsets (bag b is indices[offsets[b] : "
              "offsets[b+1]]); or pass indices of rank 2 [bags, n] for fixed-size bags");
}

TEST_F(EmbeddingBagErrors, OffsetsWithFixedBags) {
  const Tensor input = Idx({2, 2}, {1, 2, 3, 4});
  ExpectError(Bag(table_, input, &offsets_, nullptr, {}),
              "EmbeddingBag: offsets must be absent when indices has rank 2 [bags, n] "
              "(fixed-size bags), got offsets of shape [2]");
  EmbeddingBagOptions options;
  options.include_last_offset = true;
  ExpectError(Bag(table_, input, nullptr, nullptr, options),
              "EmbeddingBag: include_last_offset applies only to offsets, not to indices of "
              "rank 2 [bags, n]");
}

TEST_F(EmbeddingBagErrors, OffsetsValues) {
  const Tensor f = MakeTensor<float>({2}, {0, 2});
  ExpectError(Bag(table_, input_, &f, nullptr, {}), "offsets must be int32 or int64, got float32");
  const Tensor r2 = Idx({1, 2}, {0, 2});
  ExpectError(Bag(table_, input_, &r2, nullptr, {}),
              "EmbeddingBag: offsets must have rank 1, got shape [1,2]");
  const Tensor first = Idx({2}, {1, 2}, DataType::kInt32);
  ExpectError(Bag(table_, input_, &first, nullptr, {}),
              "offsets[0] = 1 must be 0 (the first bag starts at indices[0])");
  const Tensor decreasing = Idx({4}, {0, 3, 3, 2});
  ExpectError(Bag(table_, input_, &decreasing, nullptr, {}),
              "offsets[3] = 2 is less than offsets[2] = 3; offsets must not decrease");
  const Tensor past = Idx({3}, {0, 2, 5});
  ExpectError(Bag(table_, input_, &past, nullptr, {}),
              "offsets[2] = 5 is past the end of indices (4 values)");
  const Tensor none = Idx({0}, {});
  ExpectError(Bag(table_, input_, &none, nullptr, {}),
              "EmbeddingBag: offsets define no bag but indices has 4 values; every index must "
              "belong to a bag");
}

TEST_F(EmbeddingBagErrors, IncludeLastOffset) {
  EmbeddingBagOptions options;
  options.include_last_offset = true;
  const Tensor none = Idx({0}, {});
  ExpectError(Bag(table_, input_, &none, nullptr, options),
              "EmbeddingBag: with include_last_offset, offsets must have at least 1 entry (bags "
              "+ 1 entries, the last being the end of indices), got 0");
  const Tensor short_end = Idx({3}, {0, 2, 3});
  ExpectError(Bag(table_, input_, &short_end, nullptr, options),
              "offsets[2] = 3 is the end of the last bag (include_last_offset) and must equal "
              "the number of indices, 4");
  const Tensor only_end = Idx({1}, {0});
  ExpectError(Bag(table_, input_, &only_end, nullptr, options),
              "offsets[0] = 0 is the end of the last bag (include_last_offset) and must equal "
              "the number of indices, 4");
  // One entry and no indices: zero bags, accepted.
  auto r = Bag(table_, Idx({0}, {}), &only_end, nullptr, options);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->shape(), (Shape{0, 3}));
}

TEST_F(EmbeddingBagErrors, PerSampleWeights) {
  const Tensor short_w = MakeTensor<float>({3}, {1, 1, 1});
  ExpectError(Bag(table_, input_, &offsets_, &short_w, {}),
              "per_sample_weights must have the shape of indices [4], got [3]");
  const Tensor f64 = MakeTensor<double>({4}, {1, 1, 1, 1});
  ExpectError(Bag(table_, input_, &offsets_, &f64, {}),
              "per_sample_weights must be float32 (the params' dtype), got float64");
  const Tensor w = MakeTensor<float>({4}, {1, 1, 1, 1});
  ExpectError(Bag(table_, input_, &offsets_, &w, WithMode(Mode::kMax)),
              "EmbeddingBag: per_sample_weights are not supported with mode MAX (as in torch); "
              "use SUM, MEAN or SQRTN");
  const Tensor table64 = MakeTensor<double>({2, 1}, {1, 2});
  const Tensor f16 = MakeTensor<int16_t>({4}, {0, 0, 0, 0});
  ExpectError(Bag(table64, Idx({4}, {0, 1, 0, 1}), &offsets_, &f16, {}),
              "per_sample_weights must be float32 or float64 (the params' dtype), got int16");
}

TEST_F(EmbeddingBagErrors, PaddingIdxRange) {
  EmbeddingBagOptions options;
  options.padding_idx = 10;
  ExpectError(Bag(table_, input_, &offsets_, nullptr, options),
              "padding_idx = 10 is not in [-10, 10) for params with 10 rows");
  options.padding_idx = -11;
  ExpectError(Bag(table_, input_, &offsets_, nullptr, options),
              "padding_idx = -11 is not in [-10, 10) for params with 10 rows");
}

TEST_F(EmbeddingBagErrors, OutputTooLarge) {
  EmbeddingBagOptions options;
  options.max_output_bytes = 23;
  EXPECT_THAT(Bag(table_, input_, &offsets_, nullptr, options),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::Eq("output of shape [2,3] needs 24 bytes, over the limit of 23 "
                                     "bytes (max_output_bytes)")));
}

TEST_F(EmbeddingBagErrors, IndexOutOfRangeNamesTheFirstPosition) {
  const Tensor offsets = Idx({3}, {0, 2, 3});
  ExpectError(Bag(table_, Idx({5}, {1, 2, 10, -11, 99}), &offsets, nullptr, {}),
              "indices[2] = 10 is not in [-10, 10)");
  ExpectError(Bag(table_, Idx({2, 2}, {1, 2, -11, 3}, DataType::kInt32), nullptr, nullptr, {}),
              "indices[1,0] = -11 is not in [-10, 10)");
  // Even in a bag whose other rows are padding, and for a table of 0 rows.
  const Tensor empty_table = MakeTensor<float>({0, 3}, {});
  ExpectError(Bag(empty_table, Idx({1, 1}, {0}), nullptr, nullptr, {}),
              "indices[0,0] = 0 is out of range: params dimension 0 has size 0, so no index is "
              "valid");
}

// ---- (a) Random cases against a slow reference ----

// A float as stored in `dtype`, and back: the reference's own conversions.
void StoreValue(DataType dtype, double v, uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat16: {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kBfloat16: {
      const uint16_t h = FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    default:
      std::memcpy(p, &v, 8);
  }
}

double LoadValue(DataType dtype, const uint8_t* p) {
  uint16_t h;
  float f;
  double d;
  switch (dtype) {
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    case DataType::kBfloat16:
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    case DataType::kFloat32:
      std::memcpy(&f, p, 4);
      return f;
    default:
      std::memcpy(&d, p, 8);
      return d;
  }
}

struct Case {
  Mode mode = Mode::kSum;
  DataType dtype = DataType::kFloat32;
  bool weighted = false;
  bool fixed = false;
  bool include_last_offset = false;
  Tensor params, indices, offsets, weights;
  std::vector<int64_t> bag_starts;  // bags + 1 entries
  std::optional<int64_t> padding_idx;

  std::string DebugString() const {
    return absl::StrCat(
        EmbeddingBagModeName(mode), " ", DataTypeName(dtype), weighted ? " weighted" : "",
        fixed ? " fixed" : " offsets", include_last_offset ? " include_last_offset" : "",
        " params ", ShapeToString(params.shape()), " indices ", ShapeToString(indices.shape()),
        " padding ", padding_idx ? absl::StrCat(*padding_idx) : std::string("none"));
  }
  EmbeddingBagOptions Options() const {
    EmbeddingBagOptions o;
    o.mode = mode;
    o.include_last_offset = include_last_offset;
    o.padding_idx = padding_idx;
    return o;
  }
};

// Values mostly in [-8, 8], sometimes NaN, ±inf, ±0 or a subnormal of float16 or float32.
double RandomValue(testing::Rng& rng) {
  if (testing::Chance(rng, 0.03)) {
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               -0.0,
                               0.0,
                               3e-6,
                               -2e-40};
    return specials[testing::UniformInt(rng, 0, 6)];
  }
  return std::uniform_real_distribution<double>(-8, 8)(rng);
}

// The shape of a random case: dim (< 0: uniform in [1, 12], or 0 one time in 20) and the
// largest bag (offsets: 1 to max_bag rows, or empty; fixed bags: 0 to max_bag - 1).
struct CaseShape {
  int64_t dim = -1;
  int64_t max_bag = 6;
};

Case RandomCase(Mode mode, DataType dtype, bool weighted, int form, int64_t bags, testing::Rng& rng,
                CaseShape shape = {}) {
  Case c;
  c.mode = mode;
  c.dtype = dtype;
  c.weighted = weighted;
  c.fixed = form == 2;
  c.include_last_offset = form == 1;
  const int64_t rows = testing::UniformInt(rng, 1, 40);
  const int64_t dim = shape.dim >= 0               ? shape.dim
                      : testing::Chance(rng, 0.05) ? 0
                                                   : testing::UniformInt(rng, 1, 12);
  const size_t es = ElementSize(dtype);
  c.params = *Tensor::Allocate(dtype, {rows, dim});
  for (int64_t i = 0; i < rows * dim; ++i) {
    StoreValue(dtype, RandomValue(rng), c.params.mutable_bytes().data() + i * es);
  }
  c.bag_starts = {0};
  const int64_t fixed_n = testing::UniformInt(rng, 0, shape.max_bag - 1);
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t n = c.fixed                     ? fixed_n
                      : testing::Chance(rng, 0.2) ? 0
                                                  : testing::UniformInt(rng, 1, shape.max_bag);
    c.bag_starts.push_back(c.bag_starts.back() + n);
  }
  const int64_t num = c.bag_starts.back();
  std::vector<int64_t> idx(num);
  for (auto& v : idx) v = testing::UniformInt(rng, -rows, rows - 1);
  const DataType index_dtype = testing::Chance(rng, 0.5) ? DataType::kInt32 : DataType::kInt64;
  if (c.fixed) {
    c.indices = MakeIndices(index_dtype, {bags, fixed_n}, idx);
  } else {
    c.indices = MakeIndices(index_dtype, {num}, idx);
    std::vector<int64_t> offs(c.bag_starts.begin(),
                              c.bag_starts.end() - (c.include_last_offset ? 0 : 1));
    const DataType off_dtype = testing::Chance(rng, 0.5) ? DataType::kInt32 : DataType::kInt64;
    c.offsets = MakeIndices(off_dtype, {static_cast<int64_t>(offs.size())}, offs);
  }
  if (weighted) {
    const DataType wd = testing::Chance(rng, 0.5) ? DataType::kFloat32 : dtype;
    c.weights = *Tensor::Allocate(wd, c.indices.shape());
    for (int64_t i = 0; i < num; ++i) {
      const double w =
          testing::Chance(rng, 0.1) ? 0.0 : std::uniform_real_distribution<double>(-2, 2)(rng);
      StoreValue(wd, w, c.weights.mutable_bytes().data() + i * ElementSize(wd));
    }
  }
  if (testing::Chance(rng, 0.5)) c.padding_idx = testing::UniformInt(rng, -rows, rows - 1);
  return c;
}

// The slow reference: one output element at a time, plain loops, the rules of the issue.
template <typename Acc>
std::vector<uint8_t> ReferenceBytes(const Case& c) {
  const int64_t rows = c.params.shape()[0], dim = c.params.shape()[1];
  const size_t es = ElementSize(c.dtype);
  const int64_t bags = static_cast<int64_t>(c.bag_starts.size()) - 1;
  std::vector<uint8_t> out(bags * dim * es);
  std::vector<int64_t> idx(c.indices.num_elements());
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = c.indices.dtype() == DataType::kInt32 ? c.indices.values<int32_t>()[i]
                                                   : c.indices.values<int64_t>()[i];
  }
  int64_t pad = -1;
  if (c.padding_idx) pad = *c.padding_idx < 0 ? *c.padding_idx + rows : *c.padding_idx;
  for (int64_t b = 0; b < bags; ++b) {
    for (int64_t d = 0; d < dim; ++d) {
      Acc acc = 0, sum_w = 0, sum_w2 = 0;
      int64_t count = 0;
      for (int64_t i = c.bag_starts[b]; i < c.bag_starts[b + 1]; ++i) {
        const int64_t row = idx[i] < 0 ? idx[i] + rows : idx[i];
        if (row == pad) continue;
        const Acc x =
            static_cast<Acc>(LoadValue(c.dtype, c.params.bytes().data() + (row * dim + d) * es));
        if (c.weighted) {
          const Acc w = static_cast<Acc>(LoadValue(
              c.weights.dtype(), c.weights.bytes().data() + i * ElementSize(c.weights.dtype())));
          acc = std::fma(w, x, acc);
          sum_w = sum_w + w;
          sum_w2 = std::fma(w, w, sum_w2);
        } else if (c.mode == Mode::kMax) {
          if (count == 0 || x > acc) acc = x;
        } else {
          acc = acc + x;
        }
        ++count;
      }
      Acc result = acc;
      if (count == 0) {
        result = 0;
      } else if (c.mode == Mode::kMean) {
        result = acc / (c.weighted ? sum_w : static_cast<Acc>(count));
      } else if (c.mode == Mode::kSqrtn) {
        result = acc / std::sqrt(c.weighted ? sum_w2 : static_cast<Acc>(count));
      }
      if (std::isnan(result)) result = std::numeric_limits<Acc>::quiet_NaN();  // positive, quiet
      StoreValue(c.dtype, result, out.data() + (b * dim + d) * es);
    }
  }
  return out;
}

std::vector<uint8_t> Reference(const Case& c) {
  return c.dtype == DataType::kFloat64 ? ReferenceBytes<double>(c) : ReferenceBytes<float>(c);
}

absl::StatusOr<Tensor> RunCase(const Case& c, ThreadPool* pool, int64_t min_parallel_bytes) {
  const TensorView params = c.params.view(), indices = c.indices.view();
  const TensorView offsets = c.offsets.view(), weights = c.weights.view();
  const TensorView* o = c.fixed ? nullptr : &offsets;
  const TensorView* w = c.weighted ? &weights : nullptr;
  auto plan = PlanEmbeddingBag(params, indices, o, w, c.Options());
  if (!plan.ok()) return plan.status();
  auto out = Tensor::Allocate(plan->dtype, plan->output_shape);
  if (!out.ok()) return out.status();
  const absl::Status s = ExecuteEmbeddingBag(*plan, params, indices, o, w, out->mutable_view(),
                                             pool, min_parallel_bytes);
  if (!s.ok()) return s;
  return out;
}

constexpr DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                    DataType::kFloat64};
constexpr Mode kModes[] = {Mode::kSum, Mode::kMean, Mode::kMax, Mode::kSqrtn};

TEST(EmbeddingBagRandom, MatchesReferenceByteForByte) {
  testing::Rng rng(20261125);
  const int64_t bag_counts[] = {1, 2, 3, 7, 33, 130, 4096};
  int cases = 0;
  for (Mode mode : kModes) {
    for (DataType dtype : kFloatTypes) {
      for (bool weighted : {false, true}) {
        if (weighted && mode == Mode::kMax) continue;
        for (int form = 0; form < 3; ++form) {
          for (int64_t bags : bag_counts) {
            const Case c = RandomCase(mode, dtype, weighted, form, bags, rng);
            auto got = RunCase(c, nullptr, kEmbeddingBagMinParallelBytes);
            ASSERT_THAT(got, IsOk()) << c.DebugString();
            const std::vector<uint8_t> want = Reference(c);
            ASSERT_EQ(got->shape(), (Shape{bags, c.params.shape()[1]})) << c.DebugString();
            ASSERT_TRUE(
                std::equal(want.begin(), want.end(), got->bytes().begin(), got->bytes().end()))
                << c.DebugString();
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, (4 * 4 * 2 - 4) * 3 * 7);
}

TEST(EmbeddingBagRandom, FirstOutOfRangeIndexIsReported) {
  testing::Rng rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Case c = RandomCase(kModes[trial % 4], kFloatTypes[trial % 4], false, trial % 3,
                        testing::UniformInt(rng, 1, 50), rng);
    const int64_t n = c.indices.num_elements();
    if (n == 0) continue;
    const int64_t rows = c.params.shape()[0];
    const int64_t pos = testing::UniformInt(rng, 0, n - 1);
    const int64_t value = testing::RandomOutOfRangeValue(rows, c.indices.dtype(), rng);
    testing::SetIndexValue(c.indices, pos, value);
    if (pos + 1 < n) testing::SetIndexValue(c.indices, n - 1, rows);  // a later bad one
    auto got = RunCase(c, nullptr, kEmbeddingBagMinParallelBytes);
    EXPECT_THAT(got, StatusIs(kInvalid, ::testing::HasSubstr(absl::StrCat(
                                            " = ", value, " is not in [-", rows, ", ", rows, ")"))))
        << c.DebugString();
  }
}

// ---- (d) The pool's split gives the same bytes ----

TEST(EmbeddingBagParallel, PoolMatchesOneThread) {
  ThreadPool pool(3);
  testing::Rng rng(99);
  for (Mode mode : kModes) {
    for (DataType dtype : kFloatTypes) {
      const bool weighted = mode != Mode::kMax && testing::Chance(rng, 0.5);
      const Case c = RandomCase(mode, dtype, weighted, testing::UniformInt(rng, 0, 2), 4096, rng);
      auto one = RunCase(c, nullptr, 0);
      auto split = RunCase(c, &pool, 0);  // min_parallel_bytes 0: always split
      ASSERT_THAT(one, IsOk());
      ASSERT_THAT(split, IsOk());
      EXPECT_TRUE(IdenticalTensors(one->view(), split->view())) << c.DebugString();
      const std::vector<uint8_t> want = Reference(c);
      EXPECT_TRUE(
          std::equal(want.begin(), want.end(), split->bytes().begin(), split->bytes().end()))
          << c.DebugString();
    }
  }
}

TEST(EmbeddingBagParallel, PoolReportsTheLowestBadPosition) {
  ThreadPool pool(3);
  testing::Rng rng(5);
  Case c = RandomCase(Mode::kSum, DataType::kFloat32, false, 0, 4096, rng);
  const int64_t n = c.indices.num_elements();
  const int64_t rows = c.params.shape()[0];
  testing::SetIndexValue(c.indices, n - 1, rows);
  testing::SetIndexValue(c.indices, n / 2, -rows - 1);
  auto one = RunCase(c, nullptr, 0);
  auto split = RunCase(c, &pool, 0);
  EXPECT_THAT(
      one,
      StatusIs(kInvalid, ::testing::HasSubstr(absl::StrCat("indices[", n / 2, "] = ", -rows - 1))));
  EXPECT_EQ(one.status(), split.status());
}

// ---- (e) The vector kernel (core/embedding_bag_simd.h) writes the reference's bytes ----

// What one kernel wrote for a case, and the bad position it reported.
struct KernelRun {
  std::vector<uint8_t> bytes;
  int64_t bad = -1;
  bool vector = false;  // the vector kernel served the plan
};

// Runs ReduceBags over all of `c`'s bags into an output at `shift` bytes past a 32-byte
// boundary.
KernelRun RunKernel(const Case& c, BagKernel kernel, bool streaming, size_t shift = 0) {
  const TensorView params = c.params.view(), indices = c.indices.view();
  const TensorView offsets = c.offsets.view(), weights = c.weights.view();
  auto plan = PlanEmbeddingBag(params, indices, c.fixed ? nullptr : &offsets,
                               c.weighted ? &weights : nullptr, c.Options());
  EXPECT_THAT(plan, IsOk()) << c.DebugString();
  if (!plan.ok()) return {};
  std::vector<uint8_t> storage(plan->output_bytes + 64, 0xAB);
  uint8_t* out = storage.data() + (32 - reinterpret_cast<uintptr_t>(storage.data()) % 32) + shift;
  BagViews v;
  v.params = params.data.data();
  v.indices = indices.data.data();
  if (!c.fixed) {
    v.offsets = offsets.data.data();
    v.num_offsets = offsets.shape[0];
  }
  if (c.weighted) v.weights = weights.data.data();
  v.output = out;
  KernelRun run;
  run.bad = ReduceBags(*plan, v, 0, plan->bags, streaming, kernel);
  run.bytes.assign(out, out + plan->output_bytes);
  run.vector = kernel == BagKernel::kBest && BagVectorKernelServes(*plan);
  return run;
}

// Row widths that reach every pass width (1, 2, 4 and 8 registers), one pass and several,
// and the first beyond kMaxVectorAccumulatorBytes (the generic kernel's).
std::vector<int64_t> VectorDims(DataType dtype) {
  if (dtype == DataType::kFloat64) return {4, 8, 12, 16, 24, 32, 64, 128, 512, 516};
  return {8, 16, 24, 32, 48, 64, 128, 136, 256, 1024, 1032};
}

bool VectorKernelRunsHere() {
  EmbeddingBagPlan plan;
  plan.dtype = DataType::kFloat32;
  plan.dim = 8;
  return BagVectorKernelServes(plan);
}

constexpr const char* kNoVectorKernel =
    "this CPU lacks AVX2, FMA or F16C: the vector kernel is not used on it, so not tested";

TEST(EmbeddingBagVectorKernel, MatchesTheReferenceAtEveryWidth) {
  if (!VectorKernelRunsHere()) GTEST_SKIP() << kNoVectorKernel;
  testing::Rng rng(20261127);
  int vector_cases = 0;
  for (Mode mode : kModes) {
    for (DataType dtype : kFloatTypes) {
      const int64_t acc_size = dtype == DataType::kFloat64 ? 8 : 4;
      for (bool weighted : {false, true}) {
        if (weighted && mode == Mode::kMax) continue;
        for (int form = 0; form < 3; ++form) {
          for (int64_t dim : VectorDims(dtype)) {
            // Bags of up to 40 rows: longer than every prefetch distance.
            const Case c = RandomCase(mode, dtype, weighted, form, testing::UniformInt(rng, 1, 40),
                                      rng, {dim, 40});
            const std::vector<uint8_t> want = Reference(c);
            const KernelRun best = RunKernel(c, BagKernel::kBest, false);
            const KernelRun generic = RunKernel(c, BagKernel::kGeneric, false);
            ASSERT_EQ(best.bad, -1) << c.DebugString();
            ASSERT_EQ(best.vector, dim * acc_size <= kMaxVectorAccumulatorBytes) << c.DebugString();
            ASSERT_EQ(best.bytes, want) << c.DebugString();
            ASSERT_EQ(generic.bytes, want) << c.DebugString();
            vector_cases += best.vector;
          }
        }
      }
    }
  }
  // 10 served widths for float accumulators, 9 for float64.
  EXPECT_EQ(vector_cases, (4 * 2 - 1) * 3 * (3 * 10 + 9));
}

TEST(EmbeddingBagVectorKernel, StreamingStoresWriteTheSameBytes) {
  if (!VectorKernelRunsHere()) GTEST_SKIP() << kNoVectorKernel;
  testing::Rng rng(31);
  for (DataType dtype : kFloatTypes) {
    const int64_t dim = dtype == DataType::kFloat64 ? 32 : 64;
    for (Mode mode : {Mode::kSum, Mode::kMean, Mode::kMax}) {
      const Case c = RandomCase(mode, dtype, mode != Mode::kMax, 0, 500, rng, {dim, 3});
      const std::vector<uint8_t> want = Reference(c);
      EXPECT_EQ(RunKernel(c, BagKernel::kBest, true).bytes, want) << c.DebugString();
      // An output off a 32-byte boundary is written with ordinary stores.
      EXPECT_EQ(RunKernel(c, BagKernel::kBest, true, 16).bytes, want) << c.DebugString();
      EXPECT_EQ(RunKernel(c, BagKernel::kBest, true, 4).bytes, want) << c.DebugString();
    }
  }
  // Through ExecuteEmbeddingBag, an output past the streaming threshold (8 MiB).
  const Case big = RandomCase(Mode::kSum, DataType::kFloat32, false, 0, 33000, rng, {64, 2});
  auto got = RunCase(big, nullptr, kEmbeddingBagMinParallelBytes);
  ASSERT_THAT(got, IsOk());
  ASSERT_GE(got->bytes().size(), size_t{8} << 20);
  const std::vector<uint8_t> want = Reference(big);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got->bytes().begin(), got->bytes().end()));
}

TEST(EmbeddingBagVectorKernel, ReportsTheFirstBadPositionAfterWritingTheBagsBefore) {
  if (!VectorKernelRunsHere()) GTEST_SKIP() << kNoVectorKernel;
  testing::Rng rng(77);
  for (int64_t dim : {8, 64, 128, 256}) {  // one pass, and 2 and 4 passes of 8 registers
    for (int trial = 0; trial < 10; ++trial) {
      Case c = RandomCase(kModes[trial % 4], DataType::kFloat32, false, trial % 3,
                          testing::UniformInt(rng, 1, 60), rng, {dim, 40});
      const int64_t n = c.indices.num_elements();
      if (n == 0) continue;
      const int64_t rows = c.params.shape()[0];
      const int64_t pos = testing::UniformInt(rng, 0, n - 1);
      testing::SetIndexValue(c.indices, pos,
                             testing::RandomOutOfRangeValue(rows, c.indices.dtype(), rng));
      if (pos + 1 < n) testing::SetIndexValue(c.indices, n - 1, -rows - 1);
      const KernelRun best = RunKernel(c, BagKernel::kBest, false);
      const KernelRun generic = RunKernel(c, BagKernel::kGeneric, false);
      ASSERT_TRUE(best.vector);
      EXPECT_EQ(best.bad, pos) << c.DebugString();
      EXPECT_EQ(generic.bad, pos) << c.DebugString();
      // The bags before the bad one's are written, and alike.
      const int64_t bag = std::upper_bound(c.bag_starts.begin(), c.bag_starts.end(), pos) -
                          c.bag_starts.begin() - 1;
      const size_t written = static_cast<size_t>(bag * dim * 4);
      EXPECT_TRUE(
          std::equal(best.bytes.begin(), best.bytes.begin() + written, generic.bytes.begin()))
          << c.DebugString();
    }
  }
}

TEST(EmbeddingBagVectorKernel, MisalignedViewsGiveTheSameBytes) {
  if (!VectorKernelRunsHere()) GTEST_SKIP() << kNoVectorKernel;
  testing::Rng rng(12);
  for (DataType dtype : kFloatTypes) {
    const Case c = RandomCase(Mode::kMean, dtype, true, 0, 40, rng, {64, 20});
    std::vector<std::vector<uint8_t>> storage;
    storage.reserve(4);
    auto shifted = [&](const Tensor& t) {  // one byte past an aligned address
      storage.emplace_back(t.bytes().size() + 1);
      std::memcpy(storage.back().data() + 1, t.bytes().data(), t.bytes().size());
      TensorView v = t.view();
      v.data = absl::Span<const uint8_t>(storage.back().data() + 1, t.bytes().size());
      return v;
    };
    const TensorView p = shifted(c.params), i = shifted(c.indices), o = shifted(c.offsets),
                     w = shifted(c.weights);
    auto got = EmbeddingBag(p, i, &o, &w, c.Options());
    ASSERT_THAT(got, IsOk());
    const std::vector<uint8_t> want = Reference(c);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got->bytes().begin(), got->bytes().end()))
        << c.DebugString();
  }
}

}  // namespace
}  // namespace tensorcompute::core
