// Tests of core/table_growth.h: keyed tables that UpdateRows messages by keys grow past their
// capacity. Random upserts and deletes grow a table from 4 slots to about 10k keys in every
// storage kind, checked against a std::map of each key's stored row; readers under leases
// during growths never see a wrong or torn row; a growth past max_resident_bytes changes
// nothing; an update holding the old table follows it; a GPU table's grown rows are placed
// before they are published; a table replaced meanwhile is not grown.

#include "core/table_growth.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/compact_row.h"
#include "core/keyed_rows.h"
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

constexpr int64_t kDim = 8;

// What a table of `storage` takes in a message: float32 [n, kDim], or for a prequantized
// table its stored rows, uint8 [n, kDim + 8].
bool SendsStored(TableStorage storage) { return storage == TableStorage::kInt8RowwisePrequantized; }
int64_t SentRowBytes(TableStorage storage) {
  return SendsStored(storage) ? kDim + kRowwise8Trailer : kDim * 4;
}

// `n` rows of values a table of `storage` accepts, random.
std::vector<uint8_t> RandomValues(TableStorage storage, int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n * SentRowBytes(storage)));
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* row = bytes.data() + i * SentRowBytes(storage);
    if (SendsStored(storage)) {
      for (int64_t d = 0; d < kDim; ++d) row[d] = static_cast<uint8_t>(rng());
      const float scale_bias[2] = {value(rng), value(rng)};
      std::memcpy(row + kDim, scale_bias, sizeof(scale_bias));
    } else {
      for (int64_t d = 0; d < kDim; ++d) {
        const float v = value(rng);
        std::memcpy(row + d * 4, &v, 4);
      }
    }
  }
  return bytes;
}

TensorView View(DataType dtype, Shape shape, const void* data, size_t bytes) {
  TensorView v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = absl::Span<const uint8_t>(static_cast<const uint8_t*>(data), bytes);
  return v;
}

TensorView Int64s(const std::vector<int64_t>& v) {
  return View(DataType::kInt64, {static_cast<int64_t>(v.size())}, v.data(), v.size() * 8);
}

TensorView Values(TableStorage storage, const std::vector<uint8_t>& bytes) {
  const int64_t n = static_cast<int64_t>(bytes.size()) / SentRowBytes(storage);
  return SendsStored(storage)
             ? View(DataType::kUint8, {n, kDim + kRowwise8Trailer}, bytes.data(), bytes.size())
             : View(DataType::kFloat32, {n, kDim}, bytes.data(), bytes.size());
}

// A keyed table of `storage` named `name`, of `capacity` slots and no keys, its default row
// `default_row` (values as a message sends them), put in `registry`.
std::shared_ptr<const ResidentTensor> PutEmptyKeyed(TensorRegistry& registry,
                                                    const std::string& name, TableStorage storage,
                                                    int64_t capacity,
                                                    const std::vector<uint8_t>& default_row,
                                                    bool replace = false) {
  const bool stored = SendsStored(storage);
  absl::StatusOr<TableLayout> layout =
      PlanTableLayout(name, storage, stored ? DataType::kUint8 : DataType::kFloat32,
                      {0, stored ? kDim + kRowwise8Trailer : kDim});
  EXPECT_THAT(layout.status(), IsOk());
  const TableLayout keyed_layout = KeyedLayout(*layout, capacity);
  absl::StatusOr<Tensor> t = Tensor::Allocate(keyed_layout.stored_dtype, keyed_layout.stored_shape);
  EXPECT_THAT(t.status(), IsOk());
  std::memset(t->mutable_bytes().data(), 0, t->mutable_bytes().size());
  MutableTensorView out;
  out.dtype = t->dtype();
  out.shape = t->shape();
  out.data = t->mutable_bytes();
  const TensorView row =
      stored ? View(DataType::kUint8, {kDim + kRowwise8Trailer}, default_row.data(),
                    default_row.size())
             : View(DataType::kFloat32, {kDim}, default_row.data(), default_row.size());
  EXPECT_THAT(WriteDefaultRow(name, storage, capacity, row, out), IsOk());
  auto keyed = KeyedRows::Build(name, {}, capacity, MissingKeys::kZero, true, nullptr);
  EXPECT_THAT(keyed.status(), IsOk());
  auto reservation = registry.Reserve(
      name, *KeyedTableBytes(capacity, keyed_layout.stored_bytes / keyed_layout.stored_shape[0]));
  EXPECT_THAT(reservation.status(), IsOk());
  auto entry = registry.Put(name, *std::move(t), DeviceCopy{}, replace, *std::move(reservation),
                            storage, std::nullopt, *keyed);
  EXPECT_THAT(entry.status(), IsOk());
  return *entry;
}

int64_t RowBytes(const ResidentTensor& table) {
  const TensorView v = table.keyed_view();
  return static_cast<int64_t>(v.data.size()) / v.shape[0];
}

absl::Span<const uint8_t> StoredRow(const ResidentTensor& table, int64_t slot) {
  return table.keyed_view().data.subspan(static_cast<size_t>(slot * RowBytes(table)),
                                         static_cast<size_t>(RowBytes(table)));
}

std::vector<uint8_t> Bytes(absl::Span<const uint8_t> span) {
  return std::vector<uint8_t>(span.begin(), span.end());
}

// Every key of `reference` reads its stored row from `table`; `absent` keys read the zero
// row; the hidden rows are after the capacity.
void ExpectHolds(const ResidentTensor& table, const std::map<int64_t, std::vector<uint8_t>>& ref,
                 const std::vector<int64_t>& absent, const std::vector<uint8_t>& default_stored) {
  const KeyedRows& keyed = *table.keyed;
  ASSERT_EQ(keyed.size(), static_cast<int64_t>(ref.size()));
  ASSERT_GE(keyed.capacity(), keyed.size());
  EXPECT_EQ(table.local_view().shape[0], keyed.capacity());
  EXPECT_EQ(table.logical_shape()[0], keyed.capacity());
  EXPECT_EQ(table.keyed_view().shape[0], keyed.capacity() + kKeyedHiddenRows);
  std::vector<int64_t> keys;
  for (const auto& [key, row] : ref) keys.push_back(key);
  keys.insert(keys.end(), absent.begin(), absent.end());
  std::vector<int64_t> slots(keys.size());
  std::vector<uint8_t> found(keys.size());
  ASSERT_THAT(keyed.Resolve(keys, {static_cast<int64_t>(keys.size())}, MissingKeys::kZero,
                            slots.data(), found.data()),
              IsOk());
  std::unordered_set<int64_t> slots_seen;
  size_t i = 0;
  for (const auto& [key, row] : ref) {
    ASSERT_EQ(found[i], 1) << key;
    ASSERT_LT(slots[i], keyed.capacity());
    ASSERT_TRUE(slots_seen.insert(slots[i]).second) << "two keys in slot " << slots[i];
    ASSERT_EQ(Bytes(StoredRow(table, slots[i])), row) << key;
    ++i;
  }
  for (; i < keys.size(); ++i) {
    ASSERT_EQ(found[i], 0) << keys[i];
    ASSERT_EQ(slots[i], keyed.zero_slot());
  }
  const std::vector<uint8_t> zeros(static_cast<size_t>(RowBytes(table)), 0);
  EXPECT_EQ(Bytes(StoredRow(table, keyed.zero_slot())), zeros);
  EXPECT_EQ(Bytes(StoredRow(table, keyed.default_slot())), default_stored);
}

// A new random key, any magnitude, the extremes among the first.
int64_t NewKey(std::mt19937_64& rng, const std::map<int64_t, std::vector<uint8_t>>& ref,
               std::unordered_set<int64_t>& used) {
  static const int64_t kExtremes[] = {std::numeric_limits<int64_t>::min(),
                                      std::numeric_limits<int64_t>::max(), 0, -1};
  for (int64_t k : kExtremes) {
    if (used.insert(k).second && !ref.count(k)) return k;
  }
  for (;;) {
    const int64_t k = static_cast<int64_t>(rng()) >> (rng() % 60);
    if (!ref.count(k) && used.insert(k).second) return k;
  }
}

TEST(KeyedGrowth, RandomUpsertsAndDeletesGrowFromFourSlotsInEveryStorage) {
  for (TableStorage storage :
       {TableStorage::kAsIs, TableStorage::kFloat16, TableStorage::kInt8Rowwise,
        TableStorage::kInt8RowwisePrequantized}) {
    SCOPED_TRACE(TableStorageName(storage));
    std::mt19937_64 rng(1000 + static_cast<int>(storage));
    TensorRegistry registry(int64_t{1} << 30);
    ThreadPool pool(2);
    TableGrowth growth;
    growth.registry = &registry;
    growth.pool = &pool;
    const std::vector<uint8_t> default_row = RandomValues(storage, 1, rng);
    std::shared_ptr<const ResidentTensor> table =
        PutEmptyKeyed(registry, "grow", storage, 4, default_row);
    const std::vector<uint8_t> default_stored =
        Bytes(StoredRow(*table, table->keyed->default_slot()));
    const int64_t row_bytes = RowBytes(*table);
    std::map<int64_t, std::vector<uint8_t>> ref;  // key -> its stored row
    std::unordered_set<int64_t> used;             // keys ever drawn
    int64_t messages = 0, growths = 0;
    while (ref.size() < 10000) {
      // Up to 300 keys written (most new, some present), up to 60 deleted (most present, some
      // absent).
      std::vector<int64_t> keys, doomed;
      std::unordered_set<int64_t> in_message;
      const int64_t writes = static_cast<int64_t>(rng() % 300);
      for (int64_t i = 0; i < writes; ++i) {
        int64_t k = NewKey(rng, ref, used);
        if (!ref.empty() && rng() % 4 == 0) k = std::next(ref.begin(), rng() % ref.size())->first;
        if (in_message.insert(k).second) keys.push_back(k);
      }
      const int64_t deletes = static_cast<int64_t>(rng() % 60);
      for (int64_t i = 0; i < deletes; ++i) {
        int64_t k = NewKey(rng, ref, used);
        if (!ref.empty() && rng() % 5 != 0) k = std::next(ref.begin(), rng() % ref.size())->first;
        if (in_message.insert(k).second) doomed.push_back(k);
      }
      const std::vector<uint8_t> values =
          RandomValues(storage, static_cast<int64_t>(keys.size()), rng);
      auto update =
          PrepareKeyedRowUpdate(*table, Int64s(keys), Values(storage, values), Int64s(doomed));
      ASSERT_THAT(update.status(), IsOk());
      // What the reference says the message needs: the growth it must cause, if any.
      const int64_t capacity = table->keyed->capacity();
      int64_t added = 0, freed = 0;
      for (int64_t k : keys) added += ref.count(k) ? 0 : 1;
      for (int64_t k : doomed) freed += ref.count(k);
      const int64_t free_slots = capacity - static_cast<int64_t>(ref.size()) + freed;
      const int64_t short_slots = std::max<int64_t>(0, added - free_slots);
      absl::StatusOr<int64_t> applied = ApplyRowUpdate(*table, *update, nullptr, &growth);
      ASSERT_THAT(applied.status(), IsOk());
      EXPECT_EQ(*applied, ++messages);
      for (int64_t k : doomed) ref.erase(k);
      for (size_t i = 0; i < keys.size(); ++i) {
        ref[keys[i]] = Bytes(update->bytes().subspan(i * row_bytes, row_bytes));
      }
      // The name's entry is the grown table; the old one is gone once let go.
      std::shared_ptr<const ResidentTensor> latest = registry.Find("grow");
      ASSERT_NE(latest, nullptr);
      EXPECT_EQ(LatestGrowth(table), latest);
      EXPECT_EQ(latest->keyed->capacity(),
                short_slots > 0 ? std::max(2 * capacity, capacity + short_slots) : capacity);
      growths += short_slots > 0 ? 1 : 0;
      EXPECT_EQ(latest->version, 1);
      EXPECT_EQ(latest->live->sequence(), messages);
      EXPECT_EQ(latest->storage, storage);
      EXPECT_EQ(latest->keyed->missing(), MissingKeys::kZero);
      table = latest;
      EXPECT_EQ(registry.resident_bytes(), table->bytes);
      EXPECT_EQ(table->bytes, *KeyedTableBytes(table->keyed->capacity(), row_bytes));
      std::vector<int64_t> absent;
      for (int i = 0; i < 20; ++i) absent.push_back(NewKey(rng, ref, used));
      ASSERT_NO_FATAL_FAILURE(ExpectHolds(*table, ref, absent, default_stored));
    }
    EXPECT_GE(growths, 5);  // 4 slots to 10k keys, by doubling or by what a message needs
  }
}

// float32 rows whose every element tags a key and a write (as in keyed_rows_test.cc).
float Tag(int64_t key, int64_t write) {
  return static_cast<float>((static_cast<uint64_t>(key) % 100003) * 64 + write % 64);
}
int64_t KeyPartOf(float tag) { return static_cast<int64_t>(tag) / 64; }

// Readers look keys up as the server does (Find, a read lease on the entry found, Resolve and
// read its rows) while a writer grows the table from 4 slots to 4096 keys over and over,
// overwriting and deleting keys as it goes: a key found always reads its own row, never a
// half-written one, and a missing one the zero row. Publishing a grown table before its rows
// are copied makes them read zeros for keys its index has (another key's tag, 0).
TEST(KeyedGrowth, ReadersDuringGrowthNeverSeeAWrongOrTornRow) {
  TensorRegistry registry(int64_t{1} << 30);
  TableGrowth growth;
  growth.registry = &registry;
  // Keys whose tag is never 0 (a zero row never passes for theirs).
  std::vector<int64_t> candidates;
  for (int64_t i = 1; candidates.size() < 6000; ++i) {
    const int64_t k = i * 7919 - 100;
    if (static_cast<uint64_t>(k) % 100003 != 0) candidates.push_back(k);
  }
  const std::vector<uint8_t> default_row(kDim * 4, 0);
  PutEmptyKeyed(registry, "live", TableStorage::kAsIs, 4, default_row);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> checked{0}, found_count{0}, failures{0}, grown_seen{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      std::vector<int64_t> keys(32), slots(32);
      std::vector<uint8_t> found(32);
      while (!stop.load()) {
        const std::shared_ptr<const ResidentTensor> table = registry.Find("live");
        if (table->keyed->capacity() > 4) grown_seen.fetch_add(1);
        for (int64_t& k : keys) k = candidates[rng() % candidates.size()];
        table->live->AcquireRead();
        if (!table->keyed->Resolve(keys, {32}, MissingKeys::kZero, slots.data(), found.data())
                 .ok()) {
          failures.fetch_add(1);
        }
        const float* rows = reinterpret_cast<const float*>(table->keyed_view().data.data());
        for (size_t i = 0; i < keys.size(); ++i) {
          const float* row = rows + slots[i] * kDim;
          for (int64_t d = 1; d < kDim; ++d) {
            if (row[d] != row[0]) failures.fetch_add(1);  // torn
          }
          if (found[i]) {
            found_count.fetch_add(1);
            if (KeyPartOf(row[0]) !=
                static_cast<int64_t>(static_cast<uint64_t>(keys[i]) % 100003)) {
              failures.fetch_add(1);  // another key's row, or an uncopied one
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
  int64_t write = 0;
  for (int round = 0; round < 12; ++round) {
    if (round > 0) PutEmptyKeyed(registry, "live", TableStorage::kAsIs, 4, default_row, true);
    std::unordered_set<int64_t> held;
    while (held.size() < 4096) {
      // 48 keys written (new or present), 8 deleted.
      std::vector<int64_t> keys, doomed;
      std::unordered_set<int64_t> in_message;
      while (keys.size() < 48) {
        const int64_t k = candidates[rng() % candidates.size()];
        if (in_message.insert(k).second) keys.push_back(k);
      }
      while (doomed.size() < 8) {
        const int64_t k = candidates[rng() % candidates.size()];
        if (in_message.insert(k).second) doomed.push_back(k);
      }
      ++write;
      std::vector<float> values;
      for (int64_t k : keys) values.insert(values.end(), kDim, Tag(k, write));
      const std::shared_ptr<const ResidentTensor> table = registry.Find("live");
      auto update =
          PrepareKeyedRowUpdate(*table, Int64s(keys),
                                View(DataType::kFloat32, {static_cast<int64_t>(keys.size()), kDim},
                                     values.data(), values.size() * 4),
                                Int64s(doomed));
      ASSERT_THAT(update.status(), IsOk());
      ASSERT_THAT(ApplyRowUpdate(*table, *update, nullptr, &growth).status(), IsOk());
      for (int64_t k : doomed) held.erase(k);
      held.insert(keys.begin(), keys.end());
    }
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(checked.load(), 0);
  EXPECT_GT(found_count.load(), 0);
  EXPECT_GT(grown_seen.load(), 0);
}

// A float32 table of 4 slots holding keys 1..4, and a message adding `n` new keys.
struct FullTable {
  std::shared_ptr<const ResidentTensor> table;
  std::vector<int64_t> keys;
  std::vector<uint8_t> values;
};

FullTable PutFull(TensorRegistry& registry, std::mt19937_64& rng) {
  FullTable full;
  full.table = PutEmptyKeyed(registry, "t", TableStorage::kAsIs, 4,
                             RandomValues(TableStorage::kAsIs, 1, rng));
  const std::vector<int64_t> first = {1, 2, 3, 4};
  const std::vector<uint8_t> values = RandomValues(TableStorage::kAsIs, 4, rng);
  auto update = PrepareKeyedRowUpdate(*full.table, Int64s(first),
                                      Values(TableStorage::kAsIs, values), TensorView{});
  EXPECT_THAT(update.status(), IsOk());
  EXPECT_THAT(ApplyRowUpdate(*full.table, *update, nullptr).status(), IsOk());
  return full;
}

TEST(KeyedGrowth, PastTheBudgetTheMessageIsRefusedAndNothingChanges) {
  std::mt19937_64 rng(3);
  const int64_t row_bytes = kDim * 4;
  // Room for the table of 4 slots (6 rows and an index bound of 64 bytes: 256 bytes) and 300
  // more: not for 5 slots beside it (304), nor 6.
  TensorRegistry registry(*KeyedTableBytes(4, row_bytes) + 300);
  TableGrowth growth;
  growth.registry = &registry;
  FullTable full = PutFull(registry, rng);
  const std::shared_ptr<const ResidentTensor> before = full.table;
  const std::vector<uint8_t> rows_before = Bytes(before->keyed_view().data);
  const int64_t resident_before = registry.resident_bytes();
  const std::vector<int64_t> keys = {1, 50};  // overwrites 1, adds 50
  const std::vector<uint8_t> values = RandomValues(TableStorage::kAsIs, 2, rng);
  auto update = PrepareKeyedRowUpdate(*before, Int64s(keys), Values(TableStorage::kAsIs, values),
                                      TensorView{});
  ASSERT_THAT(update.status(), IsOk());
  EXPECT_THAT(
      ApplyRowUpdate(*before, *update, nullptr, &growth).status(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               absl::StrCat("table 't' is full: the message adds 1 keys and 0 slots of its "
                            "capacity 4 are free, and growing it to 5 slots needs 304 bytes "
                            "beside its 256 while it is copied, but 256 of max_resident_bytes = ",
                            registry.max_resident_bytes(),
                            " are in use; delete a tensor or raise --max_resident_bytes")));
  EXPECT_EQ(registry.Find("t"), before);
  EXPECT_EQ(before->live->fate(), LiveRows::Fate::kLive);
  EXPECT_EQ(before->keyed->capacity(), 4);
  EXPECT_EQ(before->keyed->size(), 4);
  EXPECT_EQ(before->live->sequence(), 1);
  EXPECT_EQ(Bytes(before->keyed_view().data), rows_before);
  EXPECT_EQ(registry.resident_bytes(), resident_before);

  // With room for 6 slots beside the 4 but not 8, the table grows to what fits.
  TensorRegistry roomier(*KeyedTableBytes(4, row_bytes) + *KeyedTableBytes(6, row_bytes) + 40);
  growth.registry = &roomier;
  FullTable second = PutFull(roomier, rng);
  auto add = PrepareKeyedRowUpdate(*second.table, Int64s(keys), Values(TableStorage::kAsIs, values),
                                   TensorView{});
  ASSERT_THAT(add.status(), IsOk());
  ASSERT_THAT(ApplyRowUpdate(*second.table, *add, nullptr, &growth).status(), IsOk());
  const std::shared_ptr<const ResidentTensor> grown = roomier.Find("t");
  EXPECT_EQ(grown->keyed->capacity(), 6);
  EXPECT_EQ(grown->keyed->size(), 5);
  EXPECT_EQ(grown->live->sequence(), 2);
  // Both are held (this test holds the old one): then the old one's bytes go.
  EXPECT_EQ(roomier.resident_bytes(), second.table->bytes + grown->bytes);
  second.table.reset();
  EXPECT_EQ(roomier.resident_bytes(), grown->bytes);
}

TEST(KeyedGrowth, AnUpdateHoldingTheOldTableAppliesToTheGrownOneAndLookupsKeepTheirs) {
  std::mt19937_64 rng(4);
  TensorRegistry registry(int64_t{1} << 20);
  TableGrowth growth;
  growth.registry = &registry;
  FullTable full = PutFull(registry, rng);
  const std::shared_ptr<const ResidentTensor> old = full.table;
  const std::vector<uint8_t> old_rows = Bytes(old->keyed_view().data);
  const std::vector<uint8_t> values = RandomValues(TableStorage::kAsIs, 1, rng);
  auto add =
      PrepareKeyedRowUpdate(*old, Int64s({9}), Values(TableStorage::kAsIs, values), TensorView{});
  ASSERT_THAT(add.status(), IsOk());
  ASSERT_THAT(ApplyRowUpdate(*old, *add, nullptr, &growth).status(), IsOk());
  const std::shared_ptr<const ResidentTensor> grown = registry.Find("t");
  ASSERT_NE(grown, old);
  EXPECT_EQ(old->live->fate(), LiveRows::Fate::kGrown);
  EXPECT_EQ(old->live->grown_into(), grown);
  EXPECT_EQ(LatestGrowth(old), grown);
  EXPECT_EQ(grown->keyed->capacity(), 8);
  // The old table, as a lookup holding it reads it: its rows, its keys, its sequence.
  EXPECT_EQ(Bytes(old->keyed_view().data), old_rows);
  EXPECT_EQ(old->keyed->size(), 4);
  EXPECT_EQ(old->live->sequence(), 1);
  EXPECT_EQ(grown->live->sequence(), 2);
  // An update still holding the old table applies to the grown one.
  auto overwrite =
      PrepareKeyedRowUpdate(*old, Int64s({1}), Values(TableStorage::kAsIs, values), TensorView{});
  ASSERT_THAT(overwrite.status(), IsOk());
  EXPECT_EQ(*ApplyRowUpdate(*old, *overwrite, nullptr, &growth), 3);
  EXPECT_EQ(Bytes(old->keyed_view().data), old_rows);
  std::vector<int64_t> slot(1);
  ASSERT_THAT(grown->keyed->Resolve(std::vector<int64_t>{1}, {1}, MissingKeys::kError, slot.data(),
                                    nullptr),
              IsOk());
  EXPECT_EQ(Bytes(StoredRow(*grown, slot[0])), values);
  // Deleted: an update holding either is NOT_FOUND.
  ASSERT_THAT(registry.Delete("t").status(), IsOk());
  EXPECT_THAT(ApplyRowUpdate(*old, *overwrite, nullptr, &growth).status(),
              StatusIs(absl::StatusCode::kNotFound, "tensor 't' was deleted"));
}

TEST(KeyedGrowth, AGpuTableIsPlacedOnItsDeviceBeforeItIsPublished) {
  std::mt19937_64 rng(5);
  TensorRegistry registry(int64_t{1} << 20);
  // A table "on gpu:0": its device copy a host buffer the fake device writes into.
  auto device_rows = std::make_shared<std::vector<uint8_t>>();
  const std::vector<uint8_t> default_row = RandomValues(TableStorage::kFloat16, 1, rng);
  std::shared_ptr<const ResidentTensor> host =
      PutEmptyKeyed(registry, "g", TableStorage::kFloat16, 2, default_row);
  auto place = [&](const std::string& device, const Tensor& tensor) -> absl::StatusOr<DeviceCopy> {
    EXPECT_EQ(device, "gpu:0");
    auto copy =
        std::make_shared<std::vector<uint8_t>>(tensor.bytes().begin(), tensor.bytes().end());
    DeviceCopy placed;
    placed.gpu = 0;
    placed.data = copy->data();
    placed.storage = copy;
    return placed;
  };
  {
    absl::StatusOr<DeviceCopy> copy = place("gpu:0", host->tensor);
    ASSERT_THAT(copy.status(), IsOk());
    Tensor rows =
        *Tensor::FromBytes(host->tensor.dtype(), host->tensor.shape(), host->tensor.bytes());
    auto reservation = registry.Reserve("g2", host->bytes);
    ASSERT_THAT(reservation.status(), IsOk());
    std::shared_ptr<KeyedRows> keys = host->keyed->Grown(host->keyed->capacity());
    auto entry = registry.Put("g", std::move(rows), *std::move(copy), true, *std::move(reservation),
                              TableStorage::kFloat16, std::nullopt, keys);
    ASSERT_THAT(entry.status(), IsOk());
    host = *entry;
  }
  ASSERT_EQ(host->device, "gpu:0");
  int placed = 0;
  TableGrowth growth;
  growth.registry = &registry;
  growth.place = [&](const std::string& device, const Tensor& tensor) {
    ++placed;
    // Before it is published: the name still has the smaller table, and lookups of it take
    // leases as they please (the gate is not held while the table is copied and placed).
    const std::shared_ptr<const ResidentTensor> current = registry.Find("g");
    EXPECT_LT(current->keyed_view().shape[0], tensor.shape()[0]);
    absl::Notification leased;
    std::thread reader([&] {
      current->live->AcquireRead();
      current->live->ReleaseRead();
      leased.Notify();
    });
    if (leased.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      reader.join();
    } else {
      ADD_FAILURE() << "a lookup waited for the growth";
      reader.detach();
    }
    return place(device, tensor);
  };
  // The fake device writes rows into the copy it is given, as CudaExecutor::UpdateRows does.
  DeviceRowWriter device_write = [](const DeviceCopy& copy, absl::Span<const int64_t> rows,
                                    int64_t row_bytes, absl::Span<const uint8_t> stored) {
    uint8_t* base = static_cast<uint8_t*>(const_cast<void*>(copy.data));
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(base + rows[i] * row_bytes, stored.data() + i * row_bytes, row_bytes);
    }
    return absl::OkStatus();
  };
  for (int message = 0; message < 6; ++message) {
    std::vector<int64_t> keys;
    for (int i = 0; i < 3; ++i) keys.push_back(message * 10 + i);
    const std::vector<uint8_t> values = RandomValues(TableStorage::kFloat16, 3, rng);
    const std::shared_ptr<const ResidentTensor> table = registry.Find("g");
    auto update = PrepareKeyedRowUpdate(*table, Int64s(keys),
                                        Values(TableStorage::kFloat16, values), TensorView{});
    ASSERT_THAT(update.status(), IsOk());
    ASSERT_THAT(ApplyRowUpdate(*table, *update, device_write, &growth).status(), IsOk());
    // The device copy is the host's, byte for byte, at every capacity.
    const std::shared_ptr<const ResidentTensor> now = registry.Find("g");
    EXPECT_EQ(now->device, "gpu:0");
    EXPECT_EQ(now->device_copy.gpu, 0);
    const auto* device = static_cast<const uint8_t*>(now->device_copy.data);
    EXPECT_EQ(std::vector<uint8_t>(device, device + now->keyed_view().data.size()),
              Bytes(now->keyed_view().data));
  }
  EXPECT_EQ(registry.Find("g")->keyed->size(), 18);
  EXPECT_EQ(placed, 4);  // 2 -> 4 -> 8 -> 16 -> 32 slots

  // Without a placer a GPU table does not grow.
  growth.place = nullptr;
  const std::shared_ptr<const ResidentTensor> table = registry.Find("g");
  std::vector<int64_t> many;
  for (int64_t k = 1000; k < 1020; ++k) many.push_back(k);
  const std::vector<uint8_t> values = RandomValues(TableStorage::kFloat16, 20, rng);
  auto update = PrepareKeyedRowUpdate(*table, Int64s(many), Values(TableStorage::kFloat16, values),
                                      TensorView{});
  ASSERT_THAT(update.status(), IsOk());
  EXPECT_THAT(ApplyRowUpdate(*table, *update, device_write, &growth).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("lives on gpu:0")));
  EXPECT_EQ(registry.Find("g"), table);
}

TEST(KeyedGrowth, ATableReplacedMeanwhileIsNotGrown) {
  std::mt19937_64 rng(6);
  TensorRegistry registry(int64_t{1} << 20);
  TableGrowth growth;
  growth.registry = &registry;
  FullTable full = PutFull(registry, rng);
  const std::vector<uint8_t> values = RandomValues(TableStorage::kAsIs, 1, rng);
  auto add = PrepareKeyedRowUpdate(*full.table, Int64s({9}), Values(TableStorage::kAsIs, values),
                                   TensorView{});
  ASSERT_THAT(add.status(), IsOk());
  const KeyedRows::Upsert plan = full.table->keyed->PlanUpsert(add->keys, add->delete_keys);
  ASSERT_EQ(plan.short_slots(), 1);
  const std::shared_ptr<const ResidentTensor> replacement =
      PutEmptyKeyed(registry, "t", TableStorage::kAsIs, 4, values, /*replace=*/true);
  const int64_t resident = registry.resident_bytes();
  {
    absl::MutexLock updating(&full.table->live->update_lock());
    EXPECT_THAT(GrowKeyedTable(*full.table, plan, growth).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("was replaced")));
  }
  EXPECT_EQ(registry.Find("t"), replacement);
  EXPECT_EQ(registry.resident_bytes(), resident);
  EXPECT_THAT(ApplyRowUpdate(*full.table, *add, nullptr, &growth).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("was replaced")));
}

TEST(KeyedGrowth, GrownCapacityDoublesOrTakesWhatTheMessageNeeds) {
  EXPECT_EQ(GrownCapacity(4, 1), 8);
  EXPECT_EQ(GrownCapacity(4, 9), 13);
  EXPECT_EQ(GrownCapacity(0, 3), 3);
  EXPECT_EQ(GrownCapacity(kMaxKeyedCapacity - 10, 2), kMaxKeyedCapacity);
  EXPECT_EQ(KeyedTableBytes(4, 32), 6 * 32 + 4 * 16);
  EXPECT_EQ(KeyedTableBytes(kMaxKeyedCapacity, int64_t{1} << 40), std::nullopt);
}

}  // namespace
}  // namespace tensorcompute::core
