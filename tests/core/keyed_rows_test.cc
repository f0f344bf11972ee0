// Tests of core/keyed_rows.h: a keyed table's description and layout, its default row in every
// storage, its keys (duplicates refused with both positions), the resolution of keys into
// slots under every missing-keys policy against a std::unordered_map reference (keys random,
// negative and extreme), the found mask, and a keyed table's views in the registry.

#include "core/keyed_rows.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/compact_row.h"
#include "core/half_float.h"
#include "core/table_storage.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// `n` distinct random keys, the extremes and small values among them.
std::vector<int64_t> RandomKeys(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> keys = {std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), 0, -1, 1};
  std::unordered_set<int64_t> seen(keys.begin(), keys.end());
  while (static_cast<int64_t>(keys.size()) < n) {
    const int64_t k = static_cast<int64_t>(rng()) >> (rng() % 60);  // all magnitudes
    if (seen.insert(k).second) keys.push_back(k);
  }
  keys.resize(static_cast<size_t>(n));
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

TEST(KeyedDescription, CapacityDefaultsToTheRowsAndIsChecked) {
  EXPECT_EQ(*CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 0, false, MissingKeys::kTable),
            5);
  EXPECT_EQ(*CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 9, false, MissingKeys::kZero),
            9);
  EXPECT_THAT(CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 3, false, MissingKeys::kError)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 't': capacity 3 is below the 5 rows put"));
  EXPECT_THAT(
      CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, kMaxKeyedCapacity + 1, false,
                            MissingKeys::kError)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rows a keyed table may have")));
  EXPECT_THAT(
      CheckKeyedDescription("t", DataType::kString, {5}, 0, false, MissingKeys::kError).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "tensor 't': DT_STRING tables are not keyed"));
  EXPECT_THAT(
      CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 0, true, MissingKeys::kError).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not sharded by row ranges")));
  EXPECT_THAT(
      CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 0, false, MissingKeys::kSkip).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a table's policy")));
  EXPECT_THAT(
      CheckKeyedDescription("t", DataType::kFloat32, {5, 4}, 0, false, static_cast<MissingKeys>(9))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown missing-keys")));
}

TEST(KeyedDescription, TheLayoutAddsTheHiddenRowsAfterTheCapacity) {
  for (TableStorage storage :
       {TableStorage::kAsIs, TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    absl::StatusOr<TableLayout> layout = PlanTableLayout("t", storage, DataType::kFloat32, {5, 4});
    ASSERT_THAT(layout.status(), IsOk());
    const TableLayout keyed = KeyedLayout(*layout, 7);
    EXPECT_EQ(keyed.stored_shape[0], 7 + kKeyedHiddenRows);
    EXPECT_EQ(keyed.stored_bytes, layout->stored_bytes / 5 * (7 + kKeyedHiddenRows));
    EXPECT_EQ(keyed.sent_bytes, layout->sent_bytes);
  }
  // An empty table has rows of a size all the same.
  absl::StatusOr<TableLayout> empty =
      PlanTableLayout("t", TableStorage::kAsIs, DataType::kInt32, {0, 3});
  ASSERT_THAT(empty.status(), IsOk());
  EXPECT_EQ(KeyedLayout(*empty, 2).stored_bytes, 4 * 3 * 4);
}

TEST(KeyedNames, MissingKeysSpellings) {
  EXPECT_EQ(ParseMissingKeys("error"), MissingKeys::kError);
  EXPECT_EQ(ParseMissingKeys("ZERO"), MissingKeys::kZero);
  EXPECT_EQ(ParseMissingKeys("default"), MissingKeys::kDefaultRow);
  EXPECT_EQ(ParseMissingKeys("DEFAULT_ROW"), MissingKeys::kDefaultRow);
  EXPECT_EQ(ParseMissingKeys("skip"), MissingKeys::kSkip);
  EXPECT_EQ(ParseMissingKeys("table"), MissingKeys::kTable);
  EXPECT_EQ(ParseMissingKeys("zeros"), std::nullopt);
  for (MissingKeys m : {MissingKeys::kTable, MissingKeys::kError, MissingKeys::kZero,
                        MissingKeys::kDefaultRow, MissingKeys::kSkip}) {
    EXPECT_EQ(ParseMissingKeys(MissingKeysName(m)), m);
  }
}

// A stored table of `storage` with capacity `capacity` and room for the hidden rows.
Tensor StoredTable(TableStorage storage, int64_t capacity, int64_t dim) {
  const DataType dtype = storage == TableStorage::kFloat16 ? DataType::kFloat16
                         : storage == TableStorage::kAsIs  ? DataType::kFloat32
                                                           : DataType::kUint8;
  const int64_t cols = storage == TableStorage::kFloat16 || storage == TableStorage::kAsIs
                           ? dim
                           : dim + kRowwise8Trailer;
  absl::StatusOr<Tensor> t = Tensor::Allocate(dtype, {capacity + kKeyedHiddenRows, cols});
  EXPECT_THAT(t.status(), IsOk());
  std::memset(t->mutable_bytes().data(), 0, t->mutable_bytes().size());
  return *std::move(t);
}

MutableTensorView Mutable(Tensor& t) {
  MutableTensorView v;
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.data = t.mutable_bytes();
  return v;
}

TensorView FloatRow(const std::vector<float>& values) {
  TensorView v;
  v.dtype = DataType::kFloat32;
  v.shape = {static_cast<int64_t>(values.size())};
  v.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                     values.size() * sizeof(float));
  return v;
}

TEST(KeyedDefaultRow, IsStoredAfterTheZeroRowInEveryStorage) {
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f};
  const int64_t capacity = 3;
  {
    Tensor t = StoredTable(TableStorage::kAsIs, capacity, 4);
    ASSERT_THAT(WriteDefaultRow("t", TableStorage::kAsIs, capacity, FloatRow(row), Mutable(t)),
                IsOk());
    EXPECT_EQ(std::memcmp(t.bytes().data() + (capacity + 1) * 16, row.data(), 16), 0);
    // The zero row stays zeros.
    for (int i = 0; i < 16; ++i) EXPECT_EQ(t.bytes()[capacity * 16 + i], 0);
  }
  {
    Tensor t = StoredTable(TableStorage::kFloat16, capacity, 4);
    ASSERT_THAT(WriteDefaultRow("t", TableStorage::kFloat16, capacity, FloatRow(row), Mutable(t)),
                IsOk());
    std::vector<uint8_t> expected(8);
    ASSERT_THAT(EncodeFloat16Row("t", 0, row.data(), 4, expected.data()), IsOk());
    EXPECT_EQ(std::memcmp(t.bytes().data() + (capacity + 1) * 8, expected.data(), 8), 0);
  }
  {
    Tensor t = StoredTable(TableStorage::kInt8Rowwise, capacity, 4);
    ASSERT_THAT(
        WriteDefaultRow("t", TableStorage::kInt8Rowwise, capacity, FloatRow(row), Mutable(t)),
        IsOk());
    std::vector<uint8_t> expected(12);
    ASSERT_THAT(EncodeRowwise8Row("t", 0, row.data(), 4, expected.data()), IsOk());
    EXPECT_EQ(std::memcmp(t.bytes().data() + (capacity + 1) * 12, expected.data(), 12), 0);
  }
  {
    // Prequantized rows are sent as stored.
    Tensor t = StoredTable(TableStorage::kInt8RowwisePrequantized, capacity, 4);
    std::vector<uint8_t> stored(12, 7);
    TensorView v;
    v.dtype = DataType::kUint8;
    v.shape = {12};
    v.data = stored;
    ASSERT_THAT(
        WriteDefaultRow("t", TableStorage::kInt8RowwisePrequantized, capacity, v, Mutable(t)),
        IsOk());
    EXPECT_EQ(std::memcmp(t.bytes().data() + (capacity + 1) * 12, stored.data(), 12), 0);
  }
}

TEST(KeyedDefaultRow, RefusesAnotherShapeOrAValueTheStorageCannotHold) {
  Tensor t = StoredTable(TableStorage::kFloat16, 2, 4);
  EXPECT_THAT(WriteDefaultRow("t", TableStorage::kFloat16, 2, FloatRow({1, 2}), Mutable(t)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 't': default_row must be float32 [4], got float32 [2]"));
  EXPECT_THAT(
      WriteDefaultRow("t", TableStorage::kFloat16, 2, FloatRow({1, 2, 1e9f, 4}), Mutable(t)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 't': default_row: element [0, 2] = 1e+09 is beyond float16's")));
  Tensor q = StoredTable(TableStorage::kInt8RowwisePrequantized, 2, 4);
  EXPECT_THAT(WriteDefaultRow("t", TableStorage::kInt8RowwisePrequantized, 2,
                              FloatRow({1, 2, 3, 4}), Mutable(q)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 't': default_row must be uint8 [12], got float32 [4]"));
}

TEST(KeyedRowsBuild, ADuplicateKeyNamesBothPositions) {
  const std::vector<int64_t> keys = {10, -42, 7, 8, 99, 5, 1, -42, 10};
  EXPECT_THAT(KeyedRows::Build("users", keys, 9, MissingKeys::kError, false, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'users': keys[7] = -42 repeats keys[1]"));
  ThreadPool pool(2);
  EXPECT_THAT(KeyedRows::Build("users", keys, 9, MissingKeys::kError, false, &pool).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'users': keys[7] = -42 repeats keys[1]"));
}

TEST(KeyedRowsEffective, PolicyRules) {
  auto with_default =
      KeyedRows::Build("t", std::vector<int64_t>{1}, 1, MissingKeys::kZero, true, nullptr);
  auto without =
      KeyedRows::Build("t", std::vector<int64_t>{1}, 1, MissingKeys::kTable, false, nullptr);
  ASSERT_THAT(with_default.status(), IsOk());
  ASSERT_THAT(without.status(), IsOk());
  EXPECT_EQ((*without)->missing(), MissingKeys::kError);  // kTable at put means kError
  EXPECT_EQ(*(*with_default)->Effective(MissingKeys::kTable, false), MissingKeys::kZero);
  EXPECT_EQ(*(*without)->Effective(MissingKeys::kTable, false), MissingKeys::kError);
  EXPECT_EQ(*(*with_default)->Effective(MissingKeys::kDefaultRow, false), MissingKeys::kDefaultRow);
  EXPECT_EQ(*(*without)->Effective(MissingKeys::kSkip, true), MissingKeys::kSkip);
  EXPECT_THAT((*without)->Effective(MissingKeys::kDefaultRow, true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "table 't' has no default row (put it with one); missing=DEFAULT_ROW "
                       "needs it"));
  EXPECT_THAT((*without)->Effective(MissingKeys::kSkip, false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing=SKIP is for")));
  EXPECT_THAT((*without)->Effective(static_cast<MissingKeys>(7), false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown policy 7")));
}

TEST(KeyedRowsResolve, RandomKeysAgainstAMapUnderEveryPolicy) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t capacity = n + static_cast<int64_t>(rng() % 10);
    std::vector<int64_t> keys = RandomKeys(n + 200, rng);
    const std::vector<int64_t> absent(keys.begin() + n, keys.end());
    keys.resize(static_cast<size_t>(n));
    std::unordered_map<int64_t, int64_t> reference;
    for (int64_t i = 0; i < n; ++i) reference[keys[i]] = i;
    ThreadPool pool(2);
    auto table = KeyedRows::Build("t", keys, capacity, MissingKeys::kError, true,
                                  trial % 2 ? &pool : nullptr);
    ASSERT_THAT(table.status(), IsOk());
    EXPECT_EQ((*table)->size(), n);
    // A request of present keys (repeats allowed) and some absent ones.
    const int64_t m = 1 + static_cast<int64_t>(rng() % 500);
    std::vector<int64_t> request(static_cast<size_t>(m));
    for (int64_t& k : request) {
      k = rng() % 5 == 0 ? absent[rng() % absent.size()] : keys[rng() % keys.size()];
    }
    for (MissingKeys policy : {MissingKeys::kZero, MissingKeys::kDefaultRow, MissingKeys::kSkip}) {
      std::vector<int64_t> slots(request.size(), -7);
      std::vector<uint8_t> found(request.size(), 9);
      ASSERT_THAT((*table)->Resolve(request, {m}, policy, slots.data(), found.data()), IsOk());
      for (int64_t i = 0; i < m; ++i) {
        auto it = reference.find(request[i]);
        const int64_t fill =
            policy == MissingKeys::kDefaultRow ? capacity + 1 : capacity;  // the hidden rows
        EXPECT_EQ(slots[i], it == reference.end() ? fill : it->second) << i;
        EXPECT_EQ(found[i], it == reference.end() ? 0 : 1) << i;
      }
    }
    // kError: the first missing key, by position; OK without a found mask when none is.
    std::vector<int64_t> slots(request.size());
    int64_t first_missing = -1;
    for (int64_t i = 0; i < m && first_missing < 0; ++i) {
      if (!reference.count(request[i])) first_missing = i;
    }
    const absl::Status error =
        (*table)->Resolve(request, {m}, MissingKeys::kError, slots.data(), nullptr);
    if (first_missing < 0) {
      EXPECT_THAT(error, IsOk());
    } else {
      EXPECT_THAT(error,
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           absl::StrCat("keys[", first_missing, "] = ", request[first_missing],
                                        " is not a key of table 't'")));
    }
  }
}

TEST(KeyedRowsResolve, ErrorsNameTheKeysPositionInTheirShape) {
  auto table = KeyedRows::Build("users", std::vector<int64_t>{4, 5, 6}, 3, MissingKeys::kError,
                                false, nullptr);
  ASSERT_THAT(table.status(), IsOk());
  const std::vector<int64_t> request = {4, 5, 6, 6, 90210, 4};
  std::vector<int64_t> slots(request.size());
  EXPECT_THAT((*table)->Resolve(request, {2, 3}, MissingKeys::kError, slots.data(), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "keys[1,1] = 90210 is not a key of table 'users'"));
}

TEST(KeyedRegistry, ViewsHideTheHiddenRowsFromLookupsByPosition) {
  TensorRegistry registry(1 << 20);
  Tensor t = StoredTable(TableStorage::kAsIs, 6, 4);
  auto keyed =
      KeyedRows::Build("k", std::vector<int64_t>{3, 1, 2}, 6, MissingKeys::kZero, false, nullptr);
  ASSERT_THAT(keyed.status(), IsOk());
  auto reservation = registry.Reserve("k", t.bytes().size());
  ASSERT_THAT(reservation.status(), IsOk());
  auto entry = registry.Put("k", std::move(t), DeviceCopy{}, false, *std::move(reservation),
                            TableStorage::kAsIs, std::nullopt, *keyed);
  ASSERT_THAT(entry.status(), IsOk());
  EXPECT_EQ((*entry)->plan_view().shape, (Shape{6, 4}));
  EXPECT_EQ((*entry)->plan_view().data.size(), 6u * 16);
  EXPECT_EQ((*entry)->local_view().shape, (Shape{6, 4}));
  EXPECT_EQ((*entry)->logical_shape(), (Shape{6, 4}));
  EXPECT_EQ((*entry)->keyed_view().shape, (Shape{8, 4}));
  EXPECT_EQ((*entry)->keyed_view().data.size(), 8u * 16);
}

}  // namespace
}  // namespace tensorcompute::core
