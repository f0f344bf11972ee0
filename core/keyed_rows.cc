#include "core/keyed_rows.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "core/key_split.h"
#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

template <typename... Args>
absl::Status Invalid(absl::string_view name, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", args...));
}

// Elements of one row of a table of `shape` (its dimensions after the first).
int64_t RowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

}  // namespace

std::string MissingKeysName(MissingKeys missing) {
  switch (missing) {
    case MissingKeys::kTable:
      return "TABLE";
    case MissingKeys::kError:
      return "ERROR";
    case MissingKeys::kZero:
      return "ZERO";
    case MissingKeys::kDefaultRow:
      return "DEFAULT_ROW";
    case MissingKeys::kSkip:
      return "SKIP";
  }
  return absl::StrCat("missing(", static_cast<int32_t>(missing), ")");
}

std::optional<MissingKeys> ParseMissingKeys(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "table") return MissingKeys::kTable;
  if (lower == "error") return MissingKeys::kError;
  if (lower == "zero") return MissingKeys::kZero;
  if (lower == "default" || lower == "default_row" || lower == "default-row") {
    return MissingKeys::kDefaultRow;
  }
  if (lower == "skip") return MissingKeys::kSkip;
  return std::nullopt;
}

absl::StatusOr<int64_t> CheckKeyedDescription(absl::string_view name, DataType dtype,
                                              const Shape& shape, int64_t capacity, bool sharded,
                                              MissingKeys missing) {
  if (dtype == DataType::kString) return Invalid(name, "DT_STRING tables are not keyed");
  if (sharded) {
    return Invalid(name,
                   "a keyed table is not sharded by row ranges: keyed tables are sharded by key "
                   "(shard.by_key)");
  }
  if (missing == MissingKeys::kSkip) {
    return Invalid(name,
                   "missing=SKIP is a choice of each EmbeddingBag request, not a table's policy");
  }
  if (missing != MissingKeys::kTable && missing != MissingKeys::kError &&
      missing != MissingKeys::kZero && missing != MissingKeys::kDefaultRow) {
    return Invalid(name, "unknown missing-keys policy ", static_cast<int32_t>(missing),
                   "; expected ERROR (1), ZERO (2) or DEFAULT_ROW (3)");
  }
  const int64_t rows = shape.empty() ? 0 : shape[0];
  if (capacity < 0) return Invalid(name, "capacity ", capacity, " is negative");
  if (capacity == 0) capacity = rows;
  if (capacity < rows) {
    return Invalid(name, "capacity ", capacity, " is below the ", rows, " rows put");
  }
  if (capacity > kMaxKeyedCapacity) {
    return Invalid(name, "capacity ", capacity, " is above the ", kMaxKeyedCapacity,
                   " rows a keyed table may have");
  }
  return capacity;
}

TableLayout KeyedLayout(const TableLayout& layout, int64_t capacity) {
  TableLayout keyed = layout;
  const int64_t rows = layout.stored_shape[0];
  const int64_t row_bytes =
      rows > 0 ? layout.stored_bytes / rows
               : RowElements(layout.stored_shape) * ElementSize(layout.stored_dtype);
  keyed.stored_shape[0] = capacity + kKeyedHiddenRows;
  keyed.stored_bytes = row_bytes * keyed.stored_shape[0];
  return keyed;
}

absl::Status WriteDefaultRow(absl::string_view name, TableStorage storage, int64_t capacity,
                             const TensorView& row, MutableTensorView stored) {
  const Shape stored_row(stored.shape.begin() + 1, stored.shape.end());
  const int64_t stored_row_bytes = RowElements(stored.shape) * ElementSize(stored.dtype);
  uint8_t* out = stored.data.data() + (capacity + 1) * stored_row_bytes;
  // What the row must be: the dtype lookups return and the logical row shape, but for a
  // prequantized table, whose rows are sent as stored.
  const bool encodes = storage == TableStorage::kFloat16 || storage == TableStorage::kInt8Rowwise;
  const DataType want_dtype = encodes ? DataType::kFloat32 : stored.dtype;
  Shape want_shape = stored_row;
  if (storage != TableStorage::kAsIs && storage != TableStorage::kInt8RowwisePrequantized) {
    want_shape = LogicalShape(storage, stored.shape);
    want_shape.erase(want_shape.begin());
  }
  TC_RETURN_IF_ERROR(ValidateTensor(row, "default_row", 64));
  if (row.dtype != want_dtype || row.shape != want_shape) {
    return Invalid(name, "default_row must be ", DataTypeName(want_dtype), " ",
                   ShapeToString(want_shape), ", got ", DataTypeName(row.dtype), " ",
                   ShapeToString(row.shape));
  }
  const int64_t dim = want_shape.empty() ? 1 : want_shape[0];
  switch (storage) {
    case TableStorage::kFloat16:
    case TableStorage::kInt8Rowwise: {
      std::vector<float> values(static_cast<size_t>(dim));
      std::memcpy(values.data(), row.data.data(), values.size() * sizeof(float));
      // Named as a one-row table's row 0: "default_row: element [0, 3] = 1e+09 is beyond ...".
      absl::Status encoded = storage == TableStorage::kFloat16
                                 ? EncodeFloat16Row(name, 0, values.data(), dim, out)
                                 : EncodeRowwise8Row(name, 0, values.data(), dim, out);
      if (!encoded.ok()) {
        const absl::string_view words = encoded.message();
        const std::string prefix = absl::StrCat("tensor '", name, "': ");
        return Invalid(name, "default_row: ",
                       absl::StartsWith(words, prefix) ? words.substr(prefix.size()) : words);
      }
      return absl::OkStatus();
    }
    case TableStorage::kAsIs:
    case TableStorage::kInt8RowwisePrequantized:
      std::memcpy(out, row.data.data(), static_cast<size_t>(stored_row_bytes));
      return absl::OkStatus();
  }
  return Invalid(name, "unknown storage");
}

absl::StatusOr<std::shared_ptr<KeyedRows>> KeyedRows::Build(std::string name,
                                                            absl::Span<const int64_t> keys,
                                                            int64_t capacity, MissingKeys missing,
                                                            bool has_default_row,
                                                            ThreadPool* pool) {
  absl::StatusOr<KeyIndex> index = KeyIndex::Build(keys, pool);
  if (!index.ok()) return Invalid(name, index.status().message());
  index->Reserve(capacity);
  if (missing == MissingKeys::kTable) missing = MissingKeys::kError;
  std::shared_ptr<KeyedRows> keyed(
      new KeyedRows(std::move(name), *std::move(index), capacity, missing, has_default_row));
  keyed->TakeFirstSlots(keyed->size());  // the put's keys hold slots [0, size)
  return keyed;
}

KeyedRows::KeyedRows(std::string name, KeyIndex index, int64_t capacity, MissingKeys missing,
                     bool has_default_row)
    : name_(std::move(name)),
      index_(std::move(index)),
      capacity_(capacity),
      missing_(missing),
      has_default_row_(has_default_row),
      size_(index_.size()),
      used_(static_cast<size_t>((capacity + 63) / 64), 0) {}

void KeyedRows::TakeFirstSlots(int64_t used) {
  for (int64_t slot = 0; slot < used; ++slot) {
    used_[slot >> 6] |= uint64_t{1} << (slot & 63);
  }
  cursor_ = capacity_ > 0 ? used % capacity_ : 0;
}

std::shared_ptr<KeyedRows> KeyedRows::Grown(int64_t capacity) const {
  std::shared_ptr<KeyedRows> grown(
      new KeyedRows(name_, index_.CopyWithRoom(capacity), capacity, missing_, has_default_row_));
  std::copy(used_.begin(), used_.end(), grown->used_.begin());
  // The old slots' bitmap ends in zeros past capacity_: the new slots are free. New keys
  // take them first, from the first past the old capacity.
  grown->cursor_ = capacity > capacity_ ? capacity_ : cursor_;
  return grown;
}

KeyedRows::Upsert KeyedRows::PlanUpsert(absl::Span<const int64_t> keys,
                                        absl::Span<const int64_t> delete_keys) const {
  Upsert plan;
  plan.slots.resize(keys.size());
  plan.added.resize(keys.size());
  index_.Find(keys, plan.slots.data());
  std::vector<int64_t> doomed(delete_keys.size());
  index_.Find(delete_keys, doomed.data());
  for (size_t i = 0; i < delete_keys.size(); ++i) {
    if (doomed[i] < 0) continue;  // deleting an absent key changes nothing (a retry's)
    plan.deleted.push_back(delete_keys[i]);
    plan.freed.push_back(doomed[i]);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    plan.added[i] = plan.slots[i] < 0 ? 1 : 0;
    plan.added_count += plan.added[i];
  }
  plan.free_slots = capacity_ - index_.size() + static_cast<int64_t>(plan.freed.size());
  if (plan.short_slots() > 0) return plan;
  // New keys take the freed slots first, then free ones from the cursor on.
  size_t next_freed = 0;
  int64_t scan = cursor_;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!plan.added[i]) continue;
    if (next_freed < plan.freed.size()) {
      plan.slots[i] = plan.freed[next_freed++];
      continue;
    }
    while (Used(scan)) scan = scan + 1 == capacity_ ? 0 : scan + 1;  // one is free (above)
    plan.slots[i] = scan;
    scan = scan + 1 == capacity_ ? 0 : scan + 1;
  }
  return plan;
}

std::string KeyedRows::FullWords(const Upsert& plan) const {
  return absl::StrCat("table '", name_, "' is full: the message adds ", plan.added_count,
                      " keys and ", plan.free_slots, " slots of its capacity ", capacity_,
                      " are free");
}

void KeyedRows::Commit(const Upsert& plan, absl::Span<const int64_t> keys) {
  for (size_t i = 0; i < plan.deleted.size(); ++i) {
    index_.Erase(plan.deleted[i]);
    used_[plan.freed[i] >> 6] &= ~(uint64_t{1} << (plan.freed[i] & 63));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!plan.added[i]) continue;
    const int64_t slot = plan.slots[i];
    index_.Insert(keys[i], slot);
    used_[slot >> 6] |= uint64_t{1} << (slot & 63);
    cursor_ = slot + 1 == capacity_ ? 0 : slot + 1;
  }
  size_.store(index_.size(), std::memory_order_relaxed);
}

absl::StatusOr<MissingKeys> KeyedRows::Effective(MissingKeys requested, bool pooled) const {
  const MissingKeys policy = requested == MissingKeys::kTable ? missing_ : requested;
  switch (policy) {
    case MissingKeys::kError:
    case MissingKeys::kZero:
      return policy;
    case MissingKeys::kDefaultRow:
      if (!has_default_row_) {
        return absl::InvalidArgumentError(
            absl::StrCat("table '", name_,
                         "' has no default row (put it with one); missing=DEFAULT_ROW needs it"));
      }
      return policy;
    case MissingKeys::kSkip:
      if (!pooled) {
        return absl::InvalidArgumentError(
            "missing=SKIP is for EmbeddingBag: a Gather answers a row for every key");
      }
      return policy;
    case MissingKeys::kTable:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("missing: unknown policy ", static_cast<int32_t>(requested),
                   "; expected TABLE, ERROR, ZERO, DEFAULT_ROW or SKIP"));
}

absl::Status KeyedRows::Resolve(absl::Span<const int64_t> keys, const Shape& keys_shape,
                                MissingKeys policy, int64_t* slots, uint8_t* found,
                                ThreadPool* pool) const {
  const int64_t fill = policy == MissingKeys::kDefaultRow ? default_slot() : zero_slot();
  const int64_t n = static_cast<int64_t>(keys.size());
  // Each piece finds its keys and notes its first missing one; the first over all is the one
  // an error names.
  std::atomic<int64_t> first_missing{n};
  auto resolve = [&](int64_t begin, int64_t end) {
    index_.Find(keys.subspan(begin, end - begin), slots + begin);
    for (int64_t i = begin; i < end; ++i) {
      const bool present = slots[i] >= 0;
      if (found != nullptr) found[i] = present ? 1 : 0;
      if (present) continue;
      if (policy == MissingKeys::kError) {
        int64_t seen = first_missing.load(std::memory_order_relaxed);
        while (i < seen && !first_missing.compare_exchange_weak(seen, i)) {
        }
        return;
      }
      slots[i] = fill;
    }
  };
  // Pieces of 16 Ki keys: a probe costs about 50 ns, so a piece is worth a worker's wake-up.
  constexpr int64_t kPiece = int64_t{16} << 10;
  if (pool != nullptr && n >= 2 * kPiece) {
    pool->ParallelFor(n, kPiece, resolve);
  } else {
    resolve(0, n);
  }
  const int64_t i = first_missing.load();
  if (i < n) {
    return MissingKeyError(name_, keys_shape, i, keys[i]);
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::core
