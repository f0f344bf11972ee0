// Tests of core/keyed_rows.h: a keyed table's description and layout, its default row in every
// storage, its keys (duplicates refused with both positions), the resolution of keys into
// slots under every missing-keys policy against a std::unordered_map reference (keys random,
// negative and extreme), the found mask, and a keyed table's views in the registry.

#include "core/keyed_rows.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/compact_row.h"
#include "core/half_float.h"
#include "core/live_rows.h"
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

TEST(KeyedRowsResolve, APoolGivesTheSameSlotsAndTheSameFirstMissingKey) {
  std::mt19937_64 rng(5);
  const std::vector<int64_t> keys = RandomKeys(50000, rng);
  auto table = KeyedRows::Build("t", keys, 50000, MissingKeys::kError, false, nullptr);
  ASSERT_THAT(table.status(), IsOk());
  ThreadPool pool(3);
  const int64_t m = 200000;
  std::vector<int64_t> request(static_cast<size_t>(m));
  for (int64_t& k : request) k = keys[rng() % keys.size()];
  std::vector<int64_t> alone(request.size()), split(request.size());
  std::vector<uint8_t> found_alone(request.size()), found_split(request.size());
  // Missing keys late in the request, in several pieces: the first is named either way.
  const std::unordered_set<int64_t> held(keys.begin(), keys.end());
  int64_t a = 3;
  while (held.count(a)) ++a;
  int64_t b = a + 1;
  while (held.count(b)) ++b;
  request[150000] = a;
  request[m - 5] = a;
  request[70001] = b;
  ASSERT_THAT((*table)->Resolve(request, {m}, MissingKeys::kZero, alone.data(), found_alone.data(),
                                nullptr),
              IsOk());
  ASSERT_THAT(
      (*table)->Resolve(request, {m}, MissingKeys::kZero, split.data(), found_split.data(), &pool),
      IsOk());
  EXPECT_EQ(alone, split);
  EXPECT_EQ(found_alone, found_split);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    EXPECT_THAT((*table)->Resolve(request, {m}, MissingKeys::kError, split.data(), nullptr, p),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("keys[70001] = ", b, " is not a key of table 't'")));
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

namespace tensorcompute::core {
namespace {

constexpr int64_t kDim = 16;

// A row's every element: a tag of its key and of the write that put it there.
float Tag(int64_t key, int64_t write) {
  return static_cast<float>((static_cast<uint64_t>(key) % 100003) * 64 + write % 64);
}
int64_t KeyPartOf(float tag) { return static_cast<int64_t>(tag) / 64; }

// A keyed float32 [rows, kDim] table of `capacity` slots in `registry`: row i is key keys[i]'s,
// tagged with write 0.
std::shared_ptr<const ResidentTensor> PutKeyed(TensorRegistry& registry,
                                               const std::vector<int64_t>& keys, int64_t capacity) {
  Tensor t = StoredTable(TableStorage::kAsIs, capacity, kDim);
  float* rows = reinterpret_cast<float*>(t.mutable_bytes().data());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int64_t d = 0; d < kDim; ++d) rows[i * kDim + d] = Tag(keys[i], 0);
  }
  auto keyed = KeyedRows::Build("live", keys, capacity, MissingKeys::kZero, false, nullptr);
  EXPECT_THAT(keyed.status(), IsOk());
  auto reservation = registry.Reserve("live", t.bytes().size());
  EXPECT_THAT(reservation.status(), IsOk());
  auto entry = registry.Put("live", std::move(t), DeviceCopy{}, false, *std::move(reservation),
                            TableStorage::kAsIs, std::nullopt, *keyed);
  EXPECT_THAT(entry.status(), IsOk());
  return *entry;
}

TensorView Int64s(const std::vector<int64_t>& v) {
  TensorView t;
  t.dtype = DataType::kInt64;
  t.shape = {static_cast<int64_t>(v.size())};
  t.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                     v.size() * sizeof(int64_t));
  return t;
}

TensorView Floats(const std::vector<float>& v, int64_t rows) {
  TensorView t;
  t.dtype = DataType::kFloat32;
  t.shape = {rows, kDim};
  t.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                     v.size() * sizeof(float));
  return t;
}

const float* Row(const ResidentTensor& table, int64_t slot) {
  return reinterpret_cast<const float*>(table.keyed_view().data.data()) + slot * kDim;
}

TEST(KeyedUpdates, UpsertsReplaceAddAndDeleteKeysMessageByMessage) {
  TensorRegistry registry(1 << 20);
  auto table = PutKeyed(registry, {10, 20, 30}, 5);
  // Replace 20, add 40 and -7: the table holds 5 keys.
  std::vector<int64_t> keys = {20, 40, -7};
  std::vector<float> values;
  for (int64_t k : keys) values.insert(values.end(), kDim, Tag(k, 1));
  auto update = PrepareKeyedRowUpdate(*table, Int64s(keys), Floats(values, 3), TensorView{});
  ASSERT_THAT(update.status(), IsOk());
  EXPECT_EQ(*ApplyRowUpdate(*table, *update, nullptr), 1);
  EXPECT_EQ(table->keyed->size(), 5);
  std::vector<int64_t> slots(4);
  ASSERT_THAT(table->keyed->Resolve(std::vector<int64_t>{10, 20, 40, -7}, {4}, MissingKeys::kError,
                                    slots.data(), nullptr),
              IsOk());
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(slots[1], 1);
  EXPECT_EQ(Row(*table, slots[0])[0], Tag(10, 0));
  EXPECT_EQ(Row(*table, slots[1])[0], Tag(20, 1));
  EXPECT_EQ(Row(*table, slots[2])[0], Tag(40, 1));
  EXPECT_EQ(Row(*table, slots[3])[kDim - 1], Tag(-7, 1));
  // Full: one more key is refused whole, the replacement beside it too.
  std::vector<int64_t> more = {10, 50};
  std::vector<float> more_values(2 * kDim, 1.0f);
  auto full = PrepareKeyedRowUpdate(*table, Int64s(more), Floats(more_values, 2), TensorView{});
  ASSERT_THAT(full.status(), IsOk());
  EXPECT_THAT(ApplyRowUpdate(*table, *full, nullptr).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "table 'live' is full: the message adds 1 keys and 0 slots of its "
                       "capacity 5 are free (put it again with a larger capacity)"));
  EXPECT_EQ(Row(*table, 0)[0], Tag(10, 0));
  EXPECT_EQ(table->live->sequence(), 1);
  // Deleting 30 (and 99, absent: no change) makes room for 50 in the same message.
  std::vector<int64_t> doomed = {99, 30};
  const std::vector<float> fifty(kDim, Tag(50, 2));  // viewed by the update until it is applied
  auto swap = PrepareKeyedRowUpdate(*table, Int64s({50}), Floats(fifty, 1), Int64s(doomed));
  ASSERT_THAT(swap.status(), IsOk());
  EXPECT_EQ(*ApplyRowUpdate(*table, *swap, nullptr), 2);
  EXPECT_EQ(table->keyed->size(), 5);
  std::vector<uint8_t> found(2);
  ASSERT_THAT(table->keyed->Resolve(std::vector<int64_t>{30, 50}, {2}, MissingKeys::kZero,
                                    slots.data(), found.data()),
              IsOk());
  EXPECT_EQ(found[0], 0);
  EXPECT_EQ(slots[0], table->keyed->zero_slot());
  EXPECT_EQ(found[1], 1);
  EXPECT_EQ(slots[1], 2);  // 30's slot, freed and taken in one message
  EXPECT_EQ(Row(*table, 2)[0], Tag(50, 2));
  // Deletes alone.
  auto deletes = PrepareKeyedRowUpdate(*table, TensorView{}, TensorView{}, Int64s({10, 20}));
  ASSERT_THAT(deletes.status(), IsOk());
  EXPECT_EQ(*ApplyRowUpdate(*table, *deletes, nullptr), 3);
  EXPECT_EQ(table->keyed->size(), 3);
}

TEST(KeyedUpdates, AMessageIsCheckedWholeBeforeAnythingIsApplied) {
  TensorRegistry registry(1 << 20);
  auto table = PutKeyed(registry, {1, 2}, 4);
  std::vector<float> two(2 * kDim, 0.5f);
  EXPECT_THAT(PrepareKeyedRowUpdate(*table, Int64s({5, 5}), Floats(two, 2), TensorView{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "keys[1] = 5 repeats keys[0]; a message writes a key at most once"));
  EXPECT_THAT(
      PrepareKeyedRowUpdate(*table, Int64s({5, 6}), Floats(two, 2), Int64s({7, 6})).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "delete_keys[1] = 6 is also in keys[1]; a message writes or deletes a "
               "key, not both"));
  EXPECT_THAT(PrepareKeyedRowUpdate(*table, Int64s({5}), Floats(two, 2), TensorView{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "values: table 'live' takes float32 [1,16] for these keys, got float32 "
                       "[2,16]"));
  TensorView int32_keys;
  std::vector<int32_t> k32 = {1};
  int32_keys.dtype = DataType::kInt32;
  int32_keys.shape = {1};
  int32_keys.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(k32.data()), 4);
  EXPECT_THAT(PrepareKeyedRowUpdate(*table, int32_keys, Floats(two, 1), TensorView{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "keys: UpdateRows takes int64 keys of rank 1, got int32 [1]"));
  // A table without keys.
  TensorRegistry other(1 << 20);
  Tensor plain = StoredTable(TableStorage::kAsIs, 2, kDim);
  auto reservation = other.Reserve("plain", plain.bytes().size());
  auto entry = other.Put("plain", std::move(plain), DeviceCopy{}, false, *std::move(reservation));
  ASSERT_THAT(entry.status(), IsOk());
  EXPECT_THAT(PrepareKeyedRowUpdate(**entry, Int64s({1}), Floats(two, 1), TensorView{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "table 'plain' has no keys; update it by indices"));
  EXPECT_EQ(table->live->sequence(), 0);
}

// Readers resolve keys and read their rows under a lease while a writer adds, replaces and
// deletes keys in a table small enough that slots are reused all the time: a key found always
// reads its own row (never another key's, which a slot resolved outside the lease could give),
// and never half of one write.
TEST(KeyedUpdates, ReadersUnderLeasesNeverSeeAWrongOrTornRow) {
  TensorRegistry registry(1 << 22);
  std::vector<int64_t> initial;
  for (int64_t k = 0; k < 48; ++k) initial.push_back(k * 7919 - 100);
  auto table = PutKeyed(registry, initial, 64);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> checked{0}, found_count{0}, failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      std::vector<int64_t> keys(32), slots(32);
      std::vector<uint8_t> found(32);
      while (!stop.load()) {
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % 96) * 7919 - 100;
        table->live->AcquireRead();
        if (!table->keyed->Resolve(keys, {32}, MissingKeys::kZero, slots.data(), found.data())
                 .ok()) {
          failures.fetch_add(1);
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          const float* row = Row(*table, slots[i]);
          for (int64_t d = 1; d < kDim; ++d) {
            if (row[d] != row[0]) failures.fetch_add(1);  // torn
          }
          if (found[i]) {
            found_count.fetch_add(1);
            if (KeyPartOf(row[0]) !=
                static_cast<int64_t>(static_cast<uint64_t>(keys[i]) % 100003)) {
              failures.fetch_add(1);  // another key's row
            }
          } else if (row[0] != 0.0f) {
            failures.fetch_add(1);  // the zero row
          }
        }
        table->live->ReleaseRead();
        checked.fetch_add(1);
      }
    });
  }
  std::mt19937_64 rng(7);
  for (int64_t write = 1; write <= 3000; ++write) {
    // Up to 8 keys written and 8 deleted, from 96 candidates over 64 slots.
    std::vector<int64_t> keys, doomed;
    std::unordered_set<int64_t> used;
    for (int i = 0; i < 8; ++i) {
      const int64_t k = static_cast<int64_t>(rng() % 96) * 7919 - 100;
      if (used.insert(k).second) (i % 2 ? doomed : keys).push_back(k);
    }
    std::vector<float> values;
    for (int64_t k : keys) values.insert(values.end(), kDim, Tag(k, write));
    auto update = PrepareKeyedRowUpdate(
        *table, Int64s(keys), Floats(values, static_cast<int64_t>(keys.size())), Int64s(doomed));
    ASSERT_THAT(update.status(), IsOk());
    const absl::StatusOr<int64_t> applied = ApplyRowUpdate(*table, *update, nullptr);
    // A full table refuses a message whole; anything else must apply.
    if (!applied.ok()) {
      ASSERT_THAT(applied.status(), StatusIs(absl::StatusCode::kResourceExhausted));
    }
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(checked.load(), 0);
  EXPECT_GT(found_count.load(), 0);
}

}  // namespace
}  // namespace tensorcompute::core
