// core/shard_spec.h and core/shard_split.h: the rows each shard holds, and lookups split by
// shard and put back together. Reassembled, every split equals the unsharded computation on
// random cases: Gather and GatherNd rows in order, and a pooled lookup over the fetched rows
// (its plan renumbered) byte for byte; bad indices get the unsharded error text.

#include "core/shard_split.h"

#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/shard_spec.h"
#include "core/tensor.h"
#include "tests/testing/status_matchers.h"

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::tensorcompute::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::tensorcompute::testing::IsOk())
namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ShardSpecTest, RowsArePartitionedInOrder) {
  EXPECT_EQ(RowsPerShard(10, 3), 4);
  const RowRange r0 = ShardRows(10, 3, 0), r1 = ShardRows(10, 3, 1), r2 = ShardRows(10, 3, 2);
  EXPECT_EQ(std::make_pair(r0.begin, r0.end), std::make_pair(int64_t{0}, int64_t{4}));
  EXPECT_EQ(std::make_pair(r1.begin, r1.end), std::make_pair(int64_t{4}, int64_t{8}));
  EXPECT_EQ(std::make_pair(r2.begin, r2.end), std::make_pair(int64_t{8}, int64_t{10}));
  // More shards than rows: the last ones are empty; no rows: all are.
  EXPECT_EQ(ShardRows(2, 4, 3).size(), 0);
  EXPECT_EQ(ShardRows(2, 4, 1).begin, 1);
  EXPECT_EQ(ShardRows(0, 3, 0).size(), 0);
  std::mt19937_64 rng(25);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(0, 5000)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 70)(rng);
    int64_t next = 0;
    for (int32_t s = 0; s < count; ++s) {
      const RowRange range = ShardRows(rows, count, s);
      ASSERT_EQ(range.begin, next) << rows << " / " << count << " shard " << s;
      ASSERT_GE(range.size(), 0);
      for (int64_t row = range.begin; row < range.end; ++row) {
        ASSERT_EQ(ShardOfRow(rows, count, row), s) << row;
      }
      next = range.end;
    }
    ASSERT_EQ(next, rows);
  }
}

TEST(ShardSpecTest, ValidateNamesEachFault) {
  EXPECT_OK(ValidateShardSpec("t", {1, 3, 10}, 4));
  EXPECT_THAT(ValidateShardSpec("t", {0, 0, 10}, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard count 0")));
  EXPECT_THAT(ValidateShardSpec("t", {3, 3, 10}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard index 3")));
  EXPECT_THAT(ValidateShardSpec("t", {0, 2, -1}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(ValidateShardSpec("t", {2, 3, 10}, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds rows [8, 10), 2 rows, but 3 were given")));
}

Tensor RandomTable(std::mt19937_64& rng, int64_t rows, int64_t dim) {
  std::vector<float> values(static_cast<size_t>(rows * dim));
  std::normal_distribution<float> normal;
  for (float& v : values) v = normal(rng);
  return Tensor::FromValues<float>(DataType::kFloat32, {rows, dim}, absl::MakeConstSpan(values));
}

Tensor RandomIndices(std::mt19937_64& rng, int64_t n, int64_t lo, int64_t hi) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t& v : values) v = std::uniform_int_distribution<int64_t>(lo, hi - 1)(rng);
  return Tensor::FromValues<int64_t>(DataType::kInt64, {n}, absl::MakeConstSpan(values));
}

// The rows of `table` that `split` sends each shard, gathered shard by shard and put back
// in output order.
std::vector<uint8_t> Reassemble(const Tensor& table, const RowSplit& split, int64_t row_bytes) {
  std::vector<size_t> next(split.values.size(), 0);
  std::vector<uint8_t> out;
  for (int32_t shard : split.shard_of_row) {
    const int64_t row = split.values[static_cast<size_t>(shard)][next[static_cast<size_t>(shard)]];
    next[static_cast<size_t>(shard)] += static_cast<size_t>(split.depth);
    const uint8_t* src = table.bytes().data() + row * row_bytes;
    out.insert(out.end(), src, src + row_bytes);
  }
  return out;
}

TEST(ShardSplitTest, GatherRowsReassembleToTheUnshardedOutput) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    const int64_t dim = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 8)(rng);
    const Tensor table = RandomTable(rng, rows, dim);
    const Tensor indices =
        RandomIndices(rng, std::uniform_int_distribution<int64_t>(0, 100)(rng), -rows, rows);
    ASSERT_OK_AND_ASSIGN(const GatherPlan plan, PlanGather(table.view(), indices.view(), 0, 0, {}));
    ASSERT_OK_AND_ASSIGN(const RowSplit split, SplitRows(plan, indices.view(), count));
    for (int32_t s = 0; s < count; ++s) {
      for (int64_t row : split.values[static_cast<size_t>(s)]) {
        ASSERT_TRUE(ShardRows(rows, count, s).contains(row)) << row << " on shard " << s;
      }
    }
    ASSERT_OK_AND_ASSIGN(const Tensor want, Gather(table.view(), indices.view(), 0, 0));
    const std::vector<uint8_t> got = Reassemble(table, split, dim * 4);
    ASSERT_EQ(got.size(), want.bytes().size());
    EXPECT_TRUE(got.empty() || std::memcmp(got.data(), want.bytes().data(), got.size()) == 0)
        << trial;
  }
}

TEST(ShardSplitTest, GatherNdRoutesByTheFirstComponent) {
  std::mt19937_64 rng(2);
  const Tensor table = RandomTable(rng, 50, 4);
  // Depth 2: [row, column] pairs; the column stays as sent (negative included).
  std::vector<int64_t> pairs = {49, -1, 0, 3, -50, 0, 25, -4, 12, 2};
  const Tensor indices =
      Tensor::FromValues<int64_t>(DataType::kInt64, {5, 2}, absl::MakeConstSpan(pairs));
  ASSERT_OK_AND_ASSIGN(const GatherPlan plan, PlanGatherNd(table.view(), indices.view(), 0, {}));
  ASSERT_OK_AND_ASSIGN(const RowSplit split, SplitRows(plan, indices.view(), 3));
  EXPECT_EQ(split.depth, 2);
  EXPECT_EQ(split.shard_of_row, (std::vector<int32_t>{2, 0, 0, 1, 0}));
  EXPECT_EQ(split.values[0], (std::vector<int64_t>{0, 3, 0, 0, 12, 2}));
  EXPECT_EQ(split.values[1], (std::vector<int64_t>{25, -4}));
  EXPECT_EQ(split.values[2], (std::vector<int64_t>{49, -1}));
}

TEST(ShardSplitTest, BadIndicesGetTheUnshardedError) {
  std::mt19937_64 rng(3);
  const Tensor table = RandomTable(rng, 10, 2);
  std::vector<int64_t> values = {1, 2, 9, 10, -11};
  const Tensor indices =
      Tensor::FromValues<int64_t>(DataType::kInt64, {5}, absl::MakeConstSpan(values));
  ASSERT_OK_AND_ASSIGN(const GatherPlan plan, PlanGather(table.view(), indices.view(), 0, 0, {}));
  const absl::Status want = Gather(table.view(), indices.view(), 0, 0).status();
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(SplitRows(plan, indices.view(), 3).status(), want);
  // GatherNd: a bad second component is reported at its own position.
  std::vector<int64_t> pairs = {1, 0, 2, 5};
  const Tensor nd =
      Tensor::FromValues<int64_t>(DataType::kInt64, {2, 2}, absl::MakeConstSpan(pairs));
  ASSERT_OK_AND_ASSIGN(const GatherPlan nd_plan, PlanGatherNd(table.view(), nd.view(), 0, {}));
  EXPECT_EQ(SplitRows(nd_plan, nd.view(), 3).status(),
            GatherNd(table.view(), nd.view(), 0).status());
  // EmbeddingBag, pooled (one bag of every index) and unpooled.
  std::vector<int64_t> zero = {0};
  const Tensor offsets =
      Tensor::FromValues<int64_t>(DataType::kInt64, {1}, absl::MakeConstSpan(zero));
  const TensorView offsets_view = offsets.view();
  ASSERT_OK_AND_ASSIGN(const EmbeddingBagPlan bag,
                       PlanEmbeddingBag(table.view(), indices.view(), &offsets_view, nullptr, {}));
  const absl::Status bag_want =
      EmbeddingBag(table.view(), indices.view(), &offsets_view, nullptr, {}).status();
  ASSERT_FALSE(bag_want.ok());
  EXPECT_EQ(SplitBagRows(bag, indices.view(), 3).status(), bag_want);
  ASSERT_OK_AND_ASSIGN(
      const EmbeddingBagPlan unpooled,
      PlanUnpooledGather(table.view(), TableEncoding::kNone, indices.view(), 0, 0, {}));
  EXPECT_EQ(SplitRows(unpooled, indices.view(), 3).status(), want);
}

TEST(ShardSplitTest, PooledLookupsOverFetchedRowsAreTheUnshardedBytes) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    const int64_t dim = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 6)(rng);
    const Tensor table = RandomTable(rng, rows, dim);
    const int64_t bags = std::uniform_int_distribution<int64_t>(0, 10)(rng);
    // A few distinct rows, used repeatedly.
    const Tensor pool = RandomIndices(rng, 6, -rows, rows);
    std::vector<int64_t> flat, offsets;
    for (int64_t b = 0; b < bags; ++b) {
      offsets.push_back(static_cast<int64_t>(flat.size()));
      const int64_t size = std::uniform_int_distribution<int64_t>(0, 8)(rng);
      for (int64_t k = 0; k < size; ++k) {
        flat.push_back(pool.values<int64_t>()[std::uniform_int_distribution<size_t>(0, 5)(rng)]);
      }
    }
    const Tensor indices = Tensor::FromValues<int64_t>(
        DataType::kInt64, {static_cast<int64_t>(flat.size())}, absl::MakeConstSpan(flat));
    const Tensor offs = Tensor::FromValues<int64_t>(
        DataType::kInt64, {static_cast<int64_t>(offsets.size())}, absl::MakeConstSpan(offsets));
    std::vector<float> w(flat.size());
    for (float& v : w) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
    const Tensor weights = Tensor::FromValues<float>(
        DataType::kFloat32, {static_cast<int64_t>(w.size())}, absl::MakeConstSpan(w));
    EmbeddingBagOptions options;
    options.mode = static_cast<EmbeddingBagMode>(trial % 4);
    if (trial % 3 == 0) options.padding_idx = pool.values<int64_t>()[0];
    const bool weighted = options.mode != EmbeddingBagMode::kMax && trial % 2 == 0;
    const TensorView offsets_view = offs.view(), weights_view = weights.view();
    const TensorView* weights_ptr = weighted ? &weights_view : nullptr;
    ASSERT_OK_AND_ASSIGN(
        const EmbeddingBagPlan plan,
        PlanEmbeddingBag(table.view(), indices.view(), &offsets_view, weights_ptr, options));
    ASSERT_OK_AND_ASSIGN(const Tensor want, EmbeddingBag(table.view(), indices.view(),
                                                         &offsets_view, weights_ptr, options));
    ASSERT_OK_AND_ASSIGN(const BagRowSplit split, SplitBagRows(plan, indices.view(), count));
    // Each distinct row fetched once, from its shard.
    int64_t fetched = 0;
    for (int32_t s = 0; s < count; ++s) {
      for (int64_t row : split.rows[static_cast<size_t>(s)]) {
        ASSERT_TRUE(ShardRows(rows, count, s).contains(row));
        ++fetched;
      }
    }
    ASSERT_EQ(fetched + (split.padding_slot >= 0 ? 1 : 0), split.fetched_rows);
    ASSERT_OK_AND_ASSIGN(Tensor rows_table,
                         Tensor::Allocate(DataType::kFloat32, {split.fetched_rows, dim}));
    uint8_t* dst = rows_table.mutable_bytes().data();
    for (const auto& part : split.rows) {
      for (int64_t row : part) {
        std::memcpy(dst, table.bytes().data() + row * dim * 4, static_cast<size_t>(dim) * 4);
        dst += dim * 4;
      }
    }
    if (split.padding_slot >= 0) std::memset(dst, 0, static_cast<size_t>(dim) * 4);
    const Tensor renumbered = Tensor::FromValues<int64_t>(DataType::kInt64, indices.shape(),
                                                          absl::MakeConstSpan(split.indices));
    const EmbeddingBagPlan fetched_plan = PlanOnFetchedRows(plan, split);
    ASSERT_OK_AND_ASSIGN(Tensor got, Tensor::Allocate(DataType::kFloat32, plan.output_shape));
    MutableTensorView out{DataType::kFloat32, plan.output_shape, got.mutable_bytes(), {}};
    ASSERT_OK(ExecuteEmbeddingBag(fetched_plan, rows_table.view(), renumbered.view(), &offsets_view,
                                  weights_ptr, out));
    ASSERT_EQ(got.bytes().size(), want.bytes().size());
    EXPECT_TRUE(got.bytes().empty() ||
                std::memcmp(got.bytes().data(), want.bytes().data(), got.bytes().size()) == 0)
        << "trial " << trial;
  }
}

}  // namespace
}  // namespace tensorcompute::core
