// Randomized property tests (STYLE.md section 14): thousands of random Gather and GatherNd
// requests, every dtype, int32 and int64 indices, every legal axis and batch_dims, shapes with
// zero-size dimensions, compared byte for byte with the slow reference. Each request runs
// inline and on a pool with forced splitting and streaming stores. Fixed seeds.

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/gather.h"
#include "core/thread_pool.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::ExpectedBadIndexMessage;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IndexedDims;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomRequestOptions;
using ::tensorcompute::testing::ReadIndexValue;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::UniformInt;

constexpr int kValidCasesPerOp = 10000;
constexpr int kOutOfRangeCasesPerOp = 2500;

// Two kinds of random request: high ranks with small dimensions (the default), and low ranks
// with dimensions up to 12; every third case is of the second kind.
RandomRequestOptions OptionsForCase(int i) {
  RandomRequestOptions options;
  if (i % 3 == 2) {
    options.max_params_rank = 3;
    options.max_indices_rank = 2;
    options.max_dim = 12;
  }
  return options;
}

ThreadPool& SharedPool() {
  static ThreadPool* const pool = new ThreadPool(4);
  return *pool;
}

absl::StatusOr<Tensor> RunCore(const GatherRequest& req, const GatherOptions& options) {
  return req.nd ? GatherNd(req.params.view(), req.indices.view(), req.batch_dims, options)
                : Gather(req.params.view(), req.indices.view(), req.axis, req.batch_dims, options);
}

// Core's execution variants: inline with the defaults; pooled with every request split and
// streaming stores on; pooled with streaming stores off.
std::vector<GatherOptions> Variants() {
  GatherOptions inline_defaults;
  GatherOptions pooled_streaming;
  pooled_streaming.execute.pool = &SharedPool();
  pooled_streaming.execute.min_parallel_bytes = 1;
  pooled_streaming.execute.streaming_store_bytes = 1;
  GatherOptions pooled_plain = pooled_streaming;
  pooled_plain.execute.streaming_store_bytes = 0;
  return {inline_defaults, pooled_streaming, pooled_plain};
}

// Checks one request against the reference under every variant.
::testing::AssertionResult CheckRequest(const GatherRequest& req) {
  const absl::StatusOr<Tensor> want = RunReference(req);
  const std::vector<GatherOptions> variants = Variants();
  for (size_t v = 0; v < variants.size(); ++v) {
    ::testing::AssertionResult r = AgreesWithReference(RunCore(req, variants[v]), want);
    if (!r) return r << "\nrequest: " << req.DebugString() << " (variant " << v << ")";
  }
  return ::testing::AssertionSuccess();
}

// What the random requests covered, so that the test can show it covered what it claims.
struct Coverage {
  std::map<DataType, int> dtypes;
  std::map<DataType, int> index_dtypes;
  int scalar_indices = 0, negative_axis = 0, unset_axis = 0, negative_batch_dims = 0;
  int batched = 0, empty_output = 0, zero_dim_errors = 0, full_depth = 0;

  void Add(const GatherRequest& req, const absl::StatusOr<Tensor>& ref) {
    ++dtypes[req.params.dtype()];
    ++index_dtypes[req.indices.dtype()];
    scalar_indices += req.indices.shape().empty();
    negative_axis += req.axis.has_value() && *req.axis < 0;
    unset_axis += !req.nd && !req.axis.has_value();
    negative_batch_dims += req.batch_dims < 0;
    batched += req.batch_dims != 0;
    empty_output += ref.ok() && ref->num_elements() == 0;
    zero_dim_errors += !ref.ok();
    full_depth += req.nd && req.indices.shape().back() + req.batch_dims ==
                                static_cast<int64_t>(req.params.shape().size());
  }
};

void Report(const char* what, int passed) {
  ::testing::Test::RecordProperty("randomized_cases", passed);
  std::cout << "randomized cases passed: " << passed << " (" << what << ")" << std::endl;
}

TEST(GatherRandom, MatchesReferenceOnValidRequests) {
  Rng rng(0x6a7e1);
  Coverage cov;
  int passed = 0;
  for (int i = 0; i < kValidCasesPerOp; ++i) {
    const DataType dtype = kAllDataTypes[i % std::size(kAllDataTypes)];
    const DataType index_dtype = (i / 16) % 2 ? DataType::kInt64 : DataType::kInt32;
    const GatherRequest req = RandomGatherRequest(dtype, index_dtype, rng, OptionsForCase(i));
    cov.Add(req, RunReference(req));
    ASSERT_TRUE(CheckRequest(req)) << "case " << i;
    ++passed;
  }
  Report("Gather", passed);
  EXPECT_EQ(cov.dtypes.size(), 16u);
  EXPECT_EQ(cov.index_dtypes.size(), 2u);
  EXPECT_GT(cov.scalar_indices, 100);
  EXPECT_GT(cov.negative_axis, 100);
  EXPECT_GT(cov.unset_axis, 100);
  EXPECT_GT(cov.negative_batch_dims, 100);
  EXPECT_GT(cov.batched, 100);
  EXPECT_GT(cov.empty_output, 100);
  EXPECT_GT(cov.zero_dim_errors, 10);  // a size-0 axis with indices: every index is bad
}

TEST(GatherNdRandom, MatchesReferenceOnValidRequests) {
  Rng rng(0x6a7e2);
  Coverage cov;
  int passed = 0;
  for (int i = 0; i < kValidCasesPerOp; ++i) {
    const DataType dtype = kAllDataTypes[i % std::size(kAllDataTypes)];
    const DataType index_dtype = (i / 16) % 2 ? DataType::kInt64 : DataType::kInt32;
    const GatherRequest req = RandomGatherNdRequest(dtype, index_dtype, rng, OptionsForCase(i));
    cov.Add(req, RunReference(req));
    ASSERT_TRUE(CheckRequest(req)) << "case " << i;
    ++passed;
  }
  Report("GatherNd", passed);
  EXPECT_EQ(cov.dtypes.size(), 16u);
  EXPECT_EQ(cov.index_dtypes.size(), 2u);
  EXPECT_GT(cov.batched, 100);
  EXPECT_GT(cov.full_depth, 100);
  EXPECT_GT(cov.empty_output, 100);
  EXPECT_GT(cov.zero_dim_errors, 10);
}

// Injects 1 to 3 out-of-range values into random valid requests with indices; core must
// report the lowest bad flat position in exactly the reference's words.
void RunOutOfRangeCases(bool nd, uint64_t seed) {
  Rng rng(seed);
  int passed = 0;
  for (int i = 0; i < kOutOfRangeCasesPerOp;) {
    const DataType dtype = kAllDataTypes[i % std::size(kAllDataTypes)];
    const DataType index_dtype = (i / 16) % 2 ? DataType::kInt64 : DataType::kInt32;
    GatherRequest req = nd ? RandomGatherNdRequest(dtype, index_dtype, rng, OptionsForCase(i))
                           : RandomGatherRequest(dtype, index_dtype, rng, OptionsForCase(i));
    if (req.indices.num_elements() == 0) continue;
    const int64_t lowest =
        InjectOutOfRangeIndices(req, static_cast<int>(UniformInt(rng, 1, 3)), rng);
    const absl::StatusOr<Tensor> want = RunReference(req);
    ASSERT_EQ(want.status().code(), absl::StatusCode::kInvalidArgument) << req.DebugString();
    const std::vector<int64_t> dims = IndexedDims(req);
    if (std::find(dims.begin(), dims.end(), 0) == dims.end()) {
      // No size-0 dimension: the injected lowest position is the first bad one.
      const int64_t dim = dims[lowest % dims.size()];
      ASSERT_EQ(std::string(want.status().message()),
                ExpectedBadIndexMessage(req.indices.shape(), lowest,
                                        ReadIndexValue(req.indices.view(), lowest), dim))
          << req.DebugString();
    }
    ASSERT_TRUE(CheckRequest(req)) << "case " << i;
    ++passed;
    ++i;
  }
  Report(nd ? "GatherNd out-of-range" : "Gather out-of-range", passed);
}

TEST(GatherRandom, OutOfRangeIndexReportsTheLowestPosition) { RunOutOfRangeCases(false, 0xbad1); }

TEST(GatherNdRandom, OutOfRangeIndexReportsTheLowestPosition) { RunOutOfRangeCases(true, 0xbad2); }

TEST(GatherRandom, ScalarIndicesReportBadValuesWithoutAPosition) {
  const Tensor params = ::tensorcompute::testing::MakeTensor<int16_t>({3, 2}, {1, 2, 3, 4, 5, 6});
  for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
    for (int64_t v : {int64_t{3}, int64_t{-4}, int64_t{2147483647}}) {
      const Tensor indices = ::tensorcompute::testing::MakeIndices(index_dtype, {}, {v});
      const absl::StatusOr<Tensor> got = Gather(params.view(), indices.view(), 0, 0);
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(got.status().message(), absl::StrCat("indices = ", v, " is not in [-3, 3)"));
    }
  }
}

// Rank 16 (dims of 1 and 2) for params and indices: every axis, batch_dims and depth.
TEST(GatherRandom, Rank16MatchesReference) {
  Rng rng(16);
  RandomRequestOptions options;
  options.min_params_rank = 16;
  options.max_params_rank = 16;
  options.max_indices_rank = 16;
  options.max_dim = 2;
  options.zero_probability = 0;
  options.max_elements = 4096;
  std::set<int64_t> axes, depths;
  int passed = 0;
  for (int i = 0; i < 300; ++i) {
    const DataType dtype = kAllDataTypes[i % std::size(kAllDataTypes)];
    const DataType index_dtype = i % 2 ? DataType::kInt64 : DataType::kInt32;
    const GatherRequest g = RandomGatherRequest(dtype, index_dtype, rng, options);
    const GatherRequest nd = RandomGatherNdRequest(dtype, index_dtype, rng, options);
    ASSERT_EQ(g.params.shape().size(), 16u);
    const int64_t q = static_cast<int64_t>(g.indices.shape().size());
    const int64_t axis = g.axis.value_or(g.batch_dims < 0 ? g.batch_dims + q : g.batch_dims);
    axes.insert(axis < 0 ? axis + 16 : axis);
    depths.insert(nd.indices.shape().back());
    ASSERT_TRUE(CheckRequest(g)) << "case " << i;
    ASSERT_TRUE(CheckRequest(nd)) << "case " << i;
    passed += 2;
  }
  Report("rank 16", passed);
  EXPECT_GE(axes.size(), 12u);
  EXPECT_GE(depths.size(), 10u);
}

}  // namespace
}  // namespace tensorcompute::core
