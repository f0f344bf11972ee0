// Tests of core/live_rows.h: an update message checked whole (every error, and nothing
// applied), applied on every storage kind, the sequence (advanced, carried across a
// replacement and a delete), retired tables, min_sequence, and the gate under threads: readers
// holding leases never see a row half written or half a message (run under TSan in CI).

#include "core/live_rows.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/half_float.h"
#include "core/table_storage.h"
#include "core/tensor_registry.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kRows = 8;
constexpr int64_t kDim = 4;

// A float32 [kRows, kDim] table stored as `storage` (its stored form all zeros: rows of 0.0 for
// AS_IS and FLOAT16; for INT8_ROWWISE codes, scale and bias 0, which read as 0.0 too).
std::shared_ptr<const ResidentTensor> PutTable(TensorRegistry& registry, const std::string& name,
                                               TableStorage storage = TableStorage::kAsIs,
                                               bool replace = false) {
  absl::StatusOr<TableLayout> layout = PlanTableLayout(
      name,
      storage == TableStorage::kInt8RowwisePrequantized ? TableStorage::kInt8RowwisePrequantized
                                                        : storage,
      storage == TableStorage::kInt8RowwisePrequantized ? DataType::kUint8 : DataType::kFloat32,
      storage == TableStorage::kInt8RowwisePrequantized ? Shape{kRows, kDim + 8}
                                                        : Shape{kRows, kDim});
  EXPECT_THAT(layout.status(), IsOk());
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(layout->stored_dtype, layout->stored_shape);
  EXPECT_THAT(tensor.status(), IsOk());
  std::memset(tensor->mutable_bytes().data(), 0, tensor->mutable_bytes().size());
  auto reservation = registry.Reserve(name, layout->stored_bytes);
  EXPECT_THAT(reservation.status(), IsOk());
  auto entry = registry.Put(name, *std::move(tensor), DeviceCopy{}, replace,
                            *std::move(reservation), storage);
  EXPECT_THAT(entry.status(), IsOk());
  return *entry;
}

Tensor Indices(std::vector<int64_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::FromValues<int64_t>(DataType::kInt64, {n}, values);
}

// n rows of kDim, row i holding values[i] in every element.
Tensor Rows(std::vector<float> values, int64_t dim = kDim) {
  std::vector<float> all;
  for (float v : values) all.insert(all.end(), static_cast<size_t>(dim), v);
  return Tensor::FromValues<float>(DataType::kFloat32, {static_cast<int64_t>(values.size()), dim},
                                   all);
}

float HostValue(const ResidentTensor& table, int64_t row, int64_t col) {
  const uint8_t* base = table.tensor.view().data.data();
  switch (table.storage) {
    case TableStorage::kAsIs: {
      float v;
      std::memcpy(&v, base + (row * kDim + col) * 4, 4);
      return v;
    }
    case TableStorage::kFloat16: {
      uint16_t h;
      std::memcpy(&h, base + (row * kDim + col) * 2, 2);
      return HalfToFloat(h);
    }
    default: {
      const uint8_t* r = base + row * (kDim + 8);
      float scale, bias;
      std::memcpy(&scale, r + kDim, 4);
      std::memcpy(&bias, r + kDim + 4, 4);
      return DequantizeRowwise8(r[col], scale, bias);
    }
  }
}

absl::StatusOr<int64_t> Update(const ResidentTensor& table, const Tensor& indices,
                               const Tensor& values) {
  absl::StatusOr<RowUpdate> update = PrepareRowUpdate(table, indices.view(), values.view());
  if (!update.ok()) return update.status();
  return ApplyRowUpdate(table, *update, nullptr);
}

TEST(LiveRows, AppliesRowsOnEveryStorageKindAndAdvancesTheSequence) {
  for (TableStorage storage :
       {TableStorage::kAsIs, TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    SCOPED_TRACE(TableStorageName(storage));
    TensorRegistry registry(1 << 20);
    auto table = PutTable(registry, "t", storage);
    EXPECT_EQ(table->live->sequence(), 0);
    // Negative indices count from the end, as in Gather.
    ASSERT_THAT(Update(*table, Indices({1, -1}), Rows({3, 5})), IsOk());
    EXPECT_EQ(table->live->sequence(), 1);
    absl::StatusOr<int64_t> second = Update(*table, Indices({2}), Rows({-7}));
    ASSERT_THAT(second.status(), IsOk());
    EXPECT_EQ(*second, 2);
    for (int64_t col = 0; col < kDim; ++col) {
      EXPECT_EQ(HostValue(*table, 0, col), 0.0f);
      EXPECT_EQ(HostValue(*table, 1, col), 3.0f);
      EXPECT_EQ(HostValue(*table, 2, col), -7.0f);
      EXPECT_EQ(HostValue(*table, kRows - 1, col), 5.0f);
    }
  }
}

TEST(LiveRows, CompactRowsAreEncodedAsAtUpload) {
  TensorRegistry registry(1 << 20);
  auto table = PutTable(registry, "q", TableStorage::kInt8Rowwise);
  const std::vector<float> row = {0.5f, -1.25f, 3.0f, 2.0f};
  Tensor values = Tensor::FromValues<float>(DataType::kFloat32, {1, kDim}, row);
  ASSERT_THAT(Update(*table, Indices({4}), values), IsOk());
  std::vector<uint8_t> expected(kDim + 8);
  ASSERT_THAT(EncodeRowwise8Row("q", 0, row.data(), kDim, expected.data()), IsOk());
  const uint8_t* stored = table->tensor.view().data.data() + 4 * (kDim + 8);
  EXPECT_EQ(std::memcmp(stored, expected.data(), expected.size()), 0);
}

TEST(LiveRows, PrequantizedTablesTakeStoredRows) {
  TensorRegistry registry(1 << 20);
  auto table = PutTable(registry, "p", TableStorage::kInt8RowwisePrequantized);
  std::vector<uint8_t> row(kDim + 8, 7);
  const float scale = 0.5f, bias = 1.0f;
  std::memcpy(row.data() + kDim, &scale, 4);
  std::memcpy(row.data() + kDim + 4, &bias, 4);
  Tensor values = Tensor::FromValues<uint8_t>(DataType::kUint8, {1, kDim + 8}, row);
  ASSERT_THAT(Update(*table, Indices({0}), values), IsOk());
  EXPECT_EQ(HostValue(*table, 0, 0), 7 * 0.5f + 1.0f);
  // A NaN scale is refused, as at upload.
  const float nan = std::nanf("");
  std::memcpy(row.data() + kDim, &nan, 4);
  Tensor bad = Tensor::FromValues<uint8_t>(DataType::kUint8, {1, kDim + 8}, row);
  EXPECT_THAT(Update(*table, Indices({1}), bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row 0 has scale nan")));
}

TEST(LiveRows, ABadMessageIsRefusedWholeAndChangesNothing) {
  TensorRegistry registry(1 << 20);
  auto table = PutTable(registry, "t");
  const auto invalid = [](const char* words) {
    return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(words));
  };
  // The good first row must not be applied when a later one is bad.
  EXPECT_THAT(Update(*table, Indices({0, 8}), Rows({1, 2})).status(),
              invalid("indices[1] = 8 is not in [-8, 8)"));
  EXPECT_THAT(Update(*table, Indices({0, -9}), Rows({1, 2})).status(),
              invalid("indices[1] = -9 is not in [-8, 8)"));
  EXPECT_THAT(Update(*table, Indices({3, 5, -5}), Rows({1, 2, 3})).status(),
              invalid("indices[2] = -5 names row 3 again (indices[0]); a message updates a row "
                      "at most once"));
  EXPECT_THAT(Update(*table, Indices({0, 1}), Rows({1})).status(),
              invalid("values: table 't' takes float32 [2,4] for these indices, got float32 "
                      "[1,4]"));
  EXPECT_THAT(Update(*table, Indices({0}), Rows({1}, kDim + 1)).status(),
              invalid("takes float32 [1,4] for these indices, got float32 [1,5]"));
  Tensor doubles = Tensor::FromValues<double>(DataType::kFloat64, {1, kDim}, {1, 1, 1, 1});
  EXPECT_THAT(Update(*table, Indices({0}), doubles).status(), invalid("got float64 [1,4]"));
  Tensor float_indices = Tensor::FromValues<float>(DataType::kFloat32, {1}, {0});
  EXPECT_THAT(Update(*table, float_indices, Rows({1})).status(),
              invalid("indices: UpdateRows takes int32 or int64 indices of rank 1, got float32 "
                      "[1]"));
  Tensor matrix_indices = Tensor::FromValues<int32_t>(DataType::kInt32, {1, 1}, {0});
  EXPECT_THAT(Update(*table, matrix_indices, Rows({1})).status(), invalid("got int32 [1,1]"));
  // A malformed view (data not matching its shape) is refused before it is read.
  TensorView short_values = Rows({1, 2}).view();
  short_values.data = short_values.data.subspan(0, 4);
  Tensor two = Indices({0, 1});
  EXPECT_THAT(PrepareRowUpdate(*table, two.view(), short_values).status(), invalid("values"));
  for (int64_t row = 0; row < kRows; ++row) EXPECT_EQ(HostValue(*table, row, 0), 0.0f);
  EXPECT_EQ(table->live->sequence(), 0);
  // float16 overflow: the encoder's words.
  auto half = PutTable(registry, "h", TableStorage::kFloat16);
  EXPECT_THAT(Update(*half, Indices({0}), Rows({1e6f})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'h'")));
  EXPECT_EQ(HostValue(*half, 0, 0), 0.0f);
}

TEST(LiveRows, StringTablesAreNotUpdated) {
  TensorRegistry registry(1 << 20);
  std::vector<std::string> strings = {"a", "b"};
  absl::StatusOr<Tensor> tensor = Tensor::FromStrings({2}, strings);
  ASSERT_THAT(tensor.status(), IsOk());
  auto reservation = registry.Reserve("s", 100);
  auto table = registry.Put("s", *std::move(tensor), DeviceCopy{}, false, *std::move(reservation));
  ASSERT_THAT(table.status(), IsOk());
  EXPECT_THAT(Update(**table, Indices({0}), Rows({1})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds strings; UpdateRows does not change string tables")));
}

TEST(LiveRows, RowsOfAnotherShardAreRefused) {
  TensorRegistry registry(1 << 20);
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(DataType::kFloat32, {4, kDim});
  ASSERT_THAT(tensor.status(), IsOk());
  std::memset(tensor->mutable_bytes().data(), 0, tensor->mutable_bytes().size());
  auto reservation = registry.Reserve("sh", 64);
  // Shard 1 of 2 of a table of 8 rows: rows [4, 8).
  auto table = registry.Put("sh", *std::move(tensor), DeviceCopy{}, false, *std::move(reservation),
                            TableStorage::kAsIs, ShardSpec{1, 2, 8});
  ASSERT_THAT(table.status(), IsOk());
  ASSERT_THAT(Update(**table, Indices({5, -1}), Rows({2, 3})), IsOk());
  float v;
  std::memcpy(&v, (*table)->tensor.view().data.data() + 1 * kDim * 4, 4);
  EXPECT_EQ(v, 2.0f);  // global row 5 is local row 1
  EXPECT_THAT(Update(**table, Indices({6, 2}), Rows({2, 3})).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("row 2 of table 'sh' is held by shard 0 of 2; this server "
                                 "holds shard 1 (rows [4, 8))")));
}

TEST(LiveRows, SplitRowUpdateChecksTheWholeTableAndSplitsByShard) {
  TensorRegistry registry(1 << 20);
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(DataType::kFloat32, {3, kDim});
  ASSERT_THAT(tensor.status(), IsOk());
  auto reservation = registry.Reserve("sh", 64);
  // Shard 0 of 3 of a table of 8 rows: rows [0, 3); shard 1 holds [3, 6), shard 2 [6, 8).
  auto table = registry.Put("sh", *std::move(tensor), DeviceCopy{}, false, *std::move(reservation),
                            TableStorage::kAsIs, ShardSpec{0, 3, 8});
  ASSERT_THAT(table.status(), IsOk());
  const Tensor indices = Indices({7, 1, -4, 2});
  const Tensor values = Rows({1, 2, 3, 4});
  absl::StatusOr<ShardedRowUpdate> split = SplitRowUpdate(**table, indices.view(), values.view());
  ASSERT_THAT(split.status(), IsOk());
  ASSERT_EQ(split->shards.size(), 3u);
  EXPECT_THAT(split->shards[0].positions, ElementsAre(1, 3));
  EXPECT_THAT(split->shards[0].rows, ElementsAre(1, 2));
  EXPECT_THAT(split->shards[1].positions, ElementsAre(2));
  EXPECT_THAT(split->shards[1].rows, ElementsAre(4));  // -4 of 8 rows
  EXPECT_THAT(split->shards[2].rows, ElementsAre(7));
  // PrepareRowUpdate's words, against the whole table.
  const Tensor past = Indices({1, 8});
  EXPECT_THAT(
      SplitRowUpdate(**table, past.view(), Rows({1, 2}).view()).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices[1] = 8 is not in [-8, 8)")));
  const Tensor twice = Indices({7, -1});
  EXPECT_THAT(SplitRowUpdate(**table, twice.view(), Rows({1, 2}).view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names row 7 again")));
}

TEST(LiveRows, TheSequenceNeverGoesBackAndRetiredTablesRefuseUpdates) {
  TensorRegistry registry(1 << 20);
  auto first = PutTable(registry, "t");
  ASSERT_THAT(Update(*first, Indices({0}), Rows({1})), IsOk());
  ASSERT_THAT(Update(*first, Indices({0}), Rows({2})), IsOk());
  auto second = PutTable(registry, "t", TableStorage::kAsIs, /*replace=*/true);
  EXPECT_EQ(second->live->sequence(), 3);  // continues after the replaced one's 2
  EXPECT_THAT(Update(*first, Indices({0}), Rows({9})).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("tensor 't' was replaced while rows were being updated")));
  EXPECT_EQ(HostValue(*first, 0, 0), 2.0f);
  ASSERT_THAT(Update(*second, Indices({0}), Rows({4})), IsOk());
  ASSERT_THAT(registry.Delete("t").status(), IsOk());
  EXPECT_THAT(Update(*second, Indices({0}), Rows({5})).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tensor 't' was deleted")));
  auto third = PutTable(registry, "t");
  EXPECT_EQ(third->live->sequence(), 5);
}

TEST(LiveRows, MinSequence) {
  TensorRegistry registry(1 << 20);
  auto table = PutTable(registry, "t");
  EXPECT_THAT(CheckMinSequence(*table, 0), IsOk());
  EXPECT_THAT(CheckMinSequence(*table, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("table 't' is at sequence 0 on this server; the request needs "
                                 "min_sequence 1")));
  ASSERT_THAT(Update(*table, Indices({0}), Rows({1})), IsOk());
  EXPECT_THAT(CheckMinSequence(*table, 1), IsOk());
  EXPECT_THAT(CheckMinSequence(*table, -1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LiveRows, ADeviceWriteErrorLeavesTheHostRowsAsTheyWere) {
  TensorRegistry registry(1 << 20);
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(DataType::kFloat32, {kRows, kDim});
  std::memset(tensor->mutable_bytes().data(), 0, tensor->mutable_bytes().size());
  auto reservation = registry.Reserve("g", kRows * kDim * 4);
  DeviceCopy copy;
  copy.gpu = 0;
  auto table = registry.Put("g", *std::move(tensor), copy, false, *std::move(reservation));
  ASSERT_THAT(table.status(), IsOk());
  Tensor indices = Indices({1});
  Tensor values = Rows({6});
  absl::StatusOr<RowUpdate> update = PrepareRowUpdate(**table, indices.view(), values.view());
  ASSERT_THAT(update.status(), IsOk());
  std::vector<int64_t> device_rows;
  auto failing = [](const DeviceCopy&, absl::Span<const int64_t>, int64_t,
                    absl::Span<const uint8_t>) { return absl::InternalError("kernel failed"); };
  EXPECT_THAT(ApplyRowUpdate(**table, *update, failing).status(),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(HostValue(**table, 1, 0), 0.0f);
  EXPECT_EQ((*table)->live->sequence(), 0);
  // A lost device (UNAVAILABLE) is never read again: the host rows are written.
  auto lost = [&](const DeviceCopy&, absl::Span<const int64_t> rows, int64_t row_bytes,
                  absl::Span<const uint8_t> stored) {
    device_rows.assign(rows.begin(), rows.end());
    EXPECT_EQ(row_bytes, kDim * 4);
    EXPECT_EQ(stored.size(), size_t{kDim * 4});
    return absl::UnavailableError("GPU 0 is out of service");
  };
  EXPECT_THAT(ApplyRowUpdate(**table, *update, lost).status(), IsOk());
  EXPECT_THAT(device_rows, ElementsAre(1));
  EXPECT_EQ(HostValue(**table, 1, 0), 6.0f);
  // Without a writer, a table on a GPU is not updated.
  EXPECT_THAT(ApplyRowUpdate(**table, *update, nullptr).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("lives on gpu:0")));
}

// A batch's tasks, which hold its tables, may be destroyed before the batch lets its leases go
// (a replaced table then goes with its last task): the leases keep the gates (ASan caught the
// use after free when they did not).
TEST(LiveRows, LeasesOutliveTheTablesTheyGuard) {
  TensorRegistry registry(1 << 20);
  std::shared_ptr<const ResidentTensor> table = PutTable(registry, "t");
  TableLeases leases;
  leases.Acquire({table->live});
  PutTable(registry, "t", TableStorage::kAsIs, /*replace=*/true);
  table.reset();  // the replaced table is freed here
  leases.Release();
}

// Torn-row detector: each message sets rows {g, g + kGroups, ...} (one group) to one version
// in every element; readers holding a lease must find every row uniform and every group's
// rows at one version.
TEST(LiveRows, ReadersNeverSeeATornRowOrHalfAMessage) {
  constexpr int64_t kTableRows = 64;
  constexpr int64_t kWidth = 256;
  constexpr int64_t kGroups = 8;
  TensorRegistry registry(1 << 24);
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(DataType::kFloat32, {kTableRows, kWidth});
  std::memset(tensor->mutable_bytes().data(), 0, tensor->mutable_bytes().size());
  auto reservation = registry.Reserve("torn", kTableRows * kWidth * 4);
  auto put = registry.Put("torn", *std::move(tensor), DeviceCopy{}, false, *std::move(reservation));
  ASSERT_THAT(put.status(), IsOk());
  const std::shared_ptr<const ResidentTensor> table = *put;

  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0}, torn{0}, split{0};
  auto reader = [&] {
    std::vector<float> copy(kTableRows * kWidth);
    while (!stop.load()) {
      TableLeases leases;
      leases.Acquire({table->live});
      std::memcpy(copy.data(), table->tensor.view().data.data(), copy.size() * 4);
      leases.Release();
      for (int64_t r = 0; r < kTableRows; ++r) {
        for (int64_t c = 1; c < kWidth; ++c) {
          if (copy[r * kWidth + c] != copy[r * kWidth]) {
            torn.fetch_add(1);
            break;
          }
        }
        if (copy[r * kWidth] != copy[(r % kGroups) * kWidth]) split.fetch_add(1);
      }
      reads.fetch_add(1);
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) readers.emplace_back(reader);
  int64_t writes = 0;
  const absl::Time end = absl::Now() + absl::Milliseconds(800);
  for (float version = 1; absl::Now() < end || reads.load() < 50; ++version) {
    const int64_t group = static_cast<int64_t>(version) % kGroups;
    std::vector<int64_t> rows;
    std::vector<float> values;
    for (int64_t r = group; r < kTableRows; r += kGroups) {
      rows.push_back(r);
      values.push_back(version);
    }
    ASSERT_THAT(Update(*table, Indices(rows), Rows(values, kWidth)), IsOk());
    ++writes;
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(split.load(), 0);
  EXPECT_EQ(table->live->sequence(), writes);
  std::printf("torn-row detector: %lld reads of %lld rows beside %lld updates\n",
              static_cast<long long>(reads.load()), static_cast<long long>(kTableRows),
              static_cast<long long>(writes));
}

}  // namespace
}  // namespace tensorcompute::core
