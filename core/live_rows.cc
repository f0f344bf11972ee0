#include "core/live_rows.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "core/index_math.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/status_macros.h"
#include "core/table_growth.h"
#include "core/table_storage.h"
#include "core/tensor_registry.h"

namespace tensorcompute::core {

void LiveRows::AcquireRead() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* writer) { return !*writer; }, &writer_));
  ++readers_;
}

void LiveRows::ReleaseRead() {
  absl::MutexLock lock(&mu_);
  --readers_;
}

absl::StatusOr<int64_t> LiveRows::Write(absl::FunctionRef<absl::Status()> write,
                                        absl::FunctionRef<absl::Status(Fate)> retired) {
  {
    absl::MutexLock lock(&mu_);
    // One writer at a time; then no reader.
    mu_.Await(absl::Condition(
        +[](bool* writer) { return !*writer; }, &writer_));
    if (fate_ != Fate::kLive) return retired(fate_);
    writer_ = true;
    mu_.Await(absl::Condition(
        +[](int64_t* readers) { return *readers == 0; }, &readers_));
    writing_ = true;
  }
  // Readers are held off by writer_; the mutex is not held across the copy.
  const absl::Status written = write();
  absl::MutexLock lock(&mu_);
  if (written.ok()) sequence_.fetch_add(1, std::memory_order_acq_rel);
  writing_ = false;
  writer_ = false;
  if (!written.ok()) return written;
  return sequence_.load(std::memory_order_acquire);
}

int64_t LiveRows::Retire(Fate fate, std::shared_ptr<const ResidentTensor> grown_into) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  fate_ = fate;
  grown_into_ = std::move(grown_into);
  return sequence_.load(std::memory_order_acquire);
}

LiveRows::Fate LiveRows::fate() const {
  absl::MutexLock lock(&mu_);
  return fate_;
}

std::shared_ptr<const ResidentTensor> LiveRows::grown_into() const {
  absl::MutexLock lock(&mu_);
  return grown_into_;
}

void TableLeases::Acquire(std::vector<std::shared_ptr<LiveRows>> gates) {
  gates.erase(std::remove(gates.begin(), gates.end(), nullptr), gates.end());
  std::sort(gates.begin(), gates.end());  // by address
  gates.erase(std::unique(gates.begin(), gates.end()), gates.end());
  for (std::shared_ptr<LiveRows>& gate : gates) {
    gate->AcquireRead();
    held_.push_back(std::move(gate));
  }
}

void TableLeases::Release() {
  for (const std::shared_ptr<LiveRows>& gate : held_) gate->ReleaseRead();
  held_.clear();
}

namespace {

int64_t IndexAt(const TensorView& indices, int64_t i) {
  if (indices.dtype == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, indices.data.data() + i * sizeof(v), sizeof(v));
    return v;
  }
  int64_t v;
  std::memcpy(&v, indices.data.data() + i * sizeof(v), sizeof(v));
  return v;
}

// What one message's values must be, for `table`: its logical dtype and row shape (a
// prequantized table takes its stored rows).
struct ValuesLayout {
  DataType dtype;
  Shape row_shape;
};

ValuesLayout ExpectedValues(const ResidentTensor& table) {
  const TensorView stored = table.local_view();
  if (table.storage == TableStorage::kAsIs ||
      table.storage == TableStorage::kInt8RowwisePrequantized) {
    return {stored.dtype, Shape(stored.shape.begin() + 1, stored.shape.end())};
  }
  const Shape logical = table.logical_shape();
  return {table.logical_dtype(), Shape(logical.begin() + 1, logical.end())};
}

}  // namespace

namespace {

// The stored bytes of an update message's `n` rows of `values` (already checked against
// `expected`): viewed as sent, or converted (compact tables).
absl::Status PrepareValues(const ResidentTensor& table, int64_t n, const ValuesLayout& expected,
                           const TensorView& values, RowUpdate* out) {
  RowUpdate& update = *out;
  const std::string& name = table.name;
  const TensorView stored = table.local_view();
  int64_t row_elements = 1;
  for (size_t d = 1; d < stored.shape.size(); ++d) row_elements *= stored.shape[d];
  update.row_bytes = row_elements * static_cast<int64_t>(ElementSize(stored.dtype));
  if (table.storage == TableStorage::kAsIs ||
      table.storage == TableStorage::kInt8RowwisePrequantized) {
    if (table.storage == TableStorage::kInt8RowwisePrequantized) {
      if (absl::Status rows = CheckStoredRows(name, table.storage, values); !rows.ok()) {
        return rows;
      }
    }
    update.as_sent = values.data;
    return absl::OkStatus();
  }
  // FLOAT16 and INT8_ROWWISE: float32 rows of `dim`, encoded one by one as at upload.
  const int64_t dim = expected.row_shape[0];
  update.stored.resize(static_cast<size_t>(n * update.row_bytes));
  std::vector<float> row_values(static_cast<size_t>(dim));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(row_values.data(), values.data.data() + i * dim * sizeof(float),
                dim * sizeof(float));
    uint8_t* out = update.stored.data() + i * update.row_bytes;
    const absl::Status encoded = table.storage == TableStorage::kFloat16
                                     ? EncodeFloat16Row(name, i, row_values.data(), dim, out)
                                     : EncodeRowwise8Row(name, i, row_values.data(), dim, out);
    if (!encoded.ok()) return encoded;
  }
  return absl::OkStatus();
}

// PrepareRowUpdate's work; `any_shard`: every row of the whole table is taken (rows numbered
// as the whole table's), as for a router splitting the message (SplitRowUpdate).
absl::StatusOr<RowUpdate> Prepare(const ResidentTensor& table, const TensorView& indices,
                                  const TensorView& values, bool any_shard) {
  const std::string& name = table.name;
  if (table.tensor.dtype() == DataType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name,
        "' holds strings; UpdateRows does not change string tables (replace it with PutTensor)"));
  }
  // Well-formed (data matching shape) before anything is read; a row has at most the table's
  // rank.
  const int64_t max_rank = std::max<int64_t>(1, table.local_view().rank());
  if (absl::Status valid = ValidateTensor(indices, "indices", max_rank); !valid.ok()) return valid;
  if (absl::Status valid = ValidateTensor(values, "values", max_rank); !valid.ok()) return valid;
  if ((indices.dtype != DataType::kInt32 && indices.dtype != DataType::kInt64) ||
      indices.rank() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices: UpdateRows takes int32 or int64 indices of rank 1, got ",
                     DataTypeName(indices.dtype), " ", ShapeToString(indices.shape)));
  }
  const int64_t n = indices.shape[0];
  const ValuesLayout expected = ExpectedValues(table);
  Shape expected_shape = {n};
  expected_shape.insert(expected_shape.end(), expected.row_shape.begin(), expected.row_shape.end());
  if (values.dtype != expected.dtype || values.shape != expected_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("values: table '", name, "' takes ", DataTypeName(expected.dtype), " ",
                     ShapeToString(expected_shape), " for these indices, got ",
                     DataTypeName(values.dtype), " ", ShapeToString(values.shape)));
  }

  // The rows lookups index: the whole table's, for a shard.
  const int64_t total_rows = table.plan_view().shape[0];
  RowRange held{0, total_rows};
  if (table.shard.has_value() && !any_shard) held = ShardRows(*table.shard);
  RowUpdate update;
  update.rows.reserve(static_cast<size_t>(n));
  absl::flat_hash_map<int64_t, int64_t> first_position;
  first_position.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t value = IndexAt(indices, i);
    int64_t row;
    if (!NormalizeIndex(value, total_rows, &row)) {
      return absl::InvalidArgumentError(absl::StrCat("indices[", i, "] = ", value, " is not in [",
                                                     -total_rows, ", ", total_rows, ")"));
    }
    const auto [it, inserted] = first_position.emplace(row, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("indices[", i, "] = ", value, " names row ",
                                                     row, " again (indices[", it->second,
                                                     "]); a message updates a row at most once"));
    }
    if (!held.contains(row)) {
      const ShardSpec& shard = *table.shard;
      return absl::FailedPreconditionError(absl::StrCat(
          "row ", row, " of table '", name, "' is held by shard ",
          ShardOfRow(total_rows, shard.count, row), " of ", shard.count,
          "; this server holds shard ", shard.index, " (rows [", held.begin, ", ", held.end, "))"));
    }
    update.rows.push_back(row - held.begin);
  }

  TC_RETURN_IF_ERROR(PrepareValues(table, n, expected, values, &update));
  return update;
}

}  // namespace

absl::StatusOr<RowUpdate> PrepareRowUpdate(const ResidentTensor& table, const TensorView& indices,
                                           const TensorView& values) {
  return Prepare(table, indices, values, /*any_shard=*/false);
}

namespace {

// A rank-1 int64 tensor's values (any alignment); an unset tensor (kUnspecified, no shape) is
// empty.
absl::StatusOr<std::vector<int64_t>> KeyList(const TensorView& keys, absl::string_view field) {
  if (keys.dtype == DataType::kUnspecified && keys.shape.empty() && keys.data.empty()) {
    return std::vector<int64_t>();
  }
  TC_RETURN_IF_ERROR(ValidateTensor(keys, field, 1));
  if (keys.dtype != DataType::kInt64 || keys.rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": UpdateRows takes int64 ", field,
                                                   " of rank 1, got ", DataTypeName(keys.dtype),
                                                   " ", ShapeToString(keys.shape)));
  }
  std::vector<int64_t> out(static_cast<size_t>(keys.shape[0]));
  if (!out.empty()) std::memcpy(out.data(), keys.data.data(), keys.data.size());
  return out;
}

// The first key of `keys` that repeats an earlier one, in `field`'s words.
absl::Status CheckDistinct(absl::Span<const int64_t> keys, absl::string_view field) {
  absl::flat_hash_map<int64_t, int64_t> first;
  first.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto [it, inserted] = first.emplace(keys[i], static_cast<int64_t>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] = ", keys[i], " repeats ",
                                                     field, "[", it->second,
                                                     "]; a message writes a key at most once"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RowUpdate> PrepareKeyedRowUpdate(const ResidentTensor& table, const TensorView& keys,
                                                const TensorView& values,
                                                const TensorView& delete_keys) {
  if (table.keyed == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", table.name, "' has no keys; update it by indices"));
  }
  RowUpdate update;
  update.by_keys = true;
  TC_ASSIGN_OR_RETURN(update.keys, KeyList(keys, "keys"));
  TC_ASSIGN_OR_RETURN(update.delete_keys, KeyList(delete_keys, "delete_keys"));
  TC_RETURN_IF_ERROR(CheckDistinct(update.keys, "keys"));
  TC_RETURN_IF_ERROR(CheckDistinct(update.delete_keys, "delete_keys"));
  if (!update.delete_keys.empty() && !update.keys.empty()) {
    absl::flat_hash_map<int64_t, int64_t> written;
    written.reserve(update.keys.size());
    for (size_t i = 0; i < update.keys.size(); ++i) written.emplace(update.keys[i], i);
    for (size_t i = 0; i < update.delete_keys.size(); ++i) {
      if (auto it = written.find(update.delete_keys[i]); it != written.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("delete_keys[", i, "] = ", update.delete_keys[i], " is also in keys[",
                         it->second, "]; a message writes or deletes a key, not both"));
      }
    }
  }
  const int64_t n = static_cast<int64_t>(update.keys.size());
  const ValuesLayout expected = ExpectedValues(table);
  Shape expected_shape = {n};
  expected_shape.insert(expected_shape.end(), expected.row_shape.begin(), expected.row_shape.end());
  const bool values_unset =
      values.dtype == DataType::kUnspecified && values.shape.empty() && values.data.empty();
  if (!(n == 0 && values_unset)) {
    TC_RETURN_IF_ERROR(
        ValidateTensor(values, "values", std::max<int64_t>(1, expected_shape.size())));
    if (values.dtype != expected.dtype || values.shape != expected_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("values: table '", table.name, "' takes ", DataTypeName(expected.dtype), " ",
                       ShapeToString(expected_shape), " for these keys, got ",
                       DataTypeName(values.dtype), " ", ShapeToString(values.shape)));
    }
    TC_RETURN_IF_ERROR(PrepareValues(table, n, expected, values, &update));
  }
  return update;
}

absl::StatusOr<ShardedRowUpdate> SplitRowUpdate(const ResidentTensor& table,
                                                const TensorView& indices,
                                                const TensorView& values) {
  // Checked (and converted, for the encoder's checks) whole; the conversion is dropped: each
  // shard converts its own rows again.
  TC_ASSIGN_OR_RETURN(RowUpdate whole, Prepare(table, indices, values, /*any_shard=*/true));
  const int64_t total_rows = table.plan_view().shape[0];
  const int32_t count = table.shard.has_value() ? table.shard->count : 1;
  ShardedRowUpdate split;
  split.shards.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < whole.rows.size(); ++i) {
    const int64_t row = whole.rows[i];
    ShardedRowUpdate::Part& part =
        split.shards[static_cast<size_t>(ShardOfRow(total_rows, count, row))];
    part.positions.push_back(static_cast<int64_t>(i));
    part.rows.push_back(row);
  }
  return split;
}

absl::Status RetiredError(const ResidentTensor& table, LiveRows::Fate fate) {
  if (fate == LiveRows::Fate::kDeleted) {
    return absl::NotFoundError(absl::StrCat("tensor '", table.name, "' was deleted"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("tensor '", table.name,
                   "' was replaced while rows were being updated; the update was not applied "
                   "to the new version (version ",
                   table.version, " is gone)"));
}

std::shared_ptr<const ResidentTensor> LatestGrowth(std::shared_ptr<const ResidentTensor> table) {
  while (table != nullptr && table->live != nullptr) {
    std::shared_ptr<const ResidentTensor> next = table->live->grown_into();
    if (next == nullptr) break;
    table = std::move(next);
  }
  return table;
}

namespace {

// Writes `update` into `table` under its write gate: its rows at their rows, or a message by
// keys at the slots `upsert` planned, whose keys are committed once the rows are written.
absl::StatusOr<int64_t> WriteUpdate(const ResidentTensor& table, const RowUpdate& update,
                                    const std::optional<KeyedRows::Upsert>& upsert,
                                    const DeviceRowWriter& device_write) {
  const absl::Span<const int64_t> rows =
      upsert.has_value() ? absl::Span<const int64_t>(upsert->slots) : update.rows;
  auto write = [&]() -> absl::Status {
    if (table.device_copy.gpu >= 0 && !rows.empty()) {
      if (!device_write) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensor '", table.name, "' lives on gpu:", table.device_copy.gpu,
                         ", whose copy this server cannot update"));
      }
      const absl::Status device =
          device_write(table.device_copy, rows, update.row_bytes, update.bytes());
      // UNAVAILABLE: the device is out of service, its copy never read again (live_rows.h).
      if (!device.ok() && !absl::IsUnavailable(device)) return device;
    }
    const uint8_t* from = update.bytes().data();
    if (table.disk != nullptr) {  // through to the file and the cached copy (disk_rows.h)
      for (size_t i = 0; i < rows.size(); ++i) {
        TC_RETURN_IF_ERROR(
            table.disk->Write(rows[i], from + static_cast<int64_t>(i) * update.row_bytes));
      }
      if (upsert.has_value()) table.keyed->Commit(*upsert, update.keys);
      return absl::OkStatus();
    }
    // The one place a published tensor's bytes change: they were allocated writable, and the
    // gate keeps every reader out (the file comment).
    uint8_t* base = const_cast<uint8_t*>(table.tensor.view().data.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(base + rows[i] * update.row_bytes,
                  from + static_cast<int64_t>(i) * update.row_bytes,
                  static_cast<size_t>(update.row_bytes));
    }
    if (upsert.has_value()) table.keyed->Commit(*upsert, update.keys);
    return absl::OkStatus();
  };
  auto retired = [&](LiveRows::Fate fate) { return RetiredError(table, fate); };
  absl::StatusOr<int64_t> sequence = table.live->Write(write, retired);
  // A table on disk's rows are durable before the message is answered; synced after the
  // lookups were let back in, so that they never wait for the disk's flush.
  if (sequence.ok() && table.disk != nullptr) TC_RETURN_IF_ERROR(table.disk->Sync());
  return sequence;
}

}  // namespace

absl::StatusOr<int64_t> ApplyRowUpdate(const ResidentTensor& table, const RowUpdate& update,
                                       const DeviceRowWriter& device_write,
                                       const TableGrowth* growth) {
  std::shared_ptr<const ResidentTensor> grown;  // holds the table followed or grown into
  const ResidentTensor* target = &table;
  for (;;) {
    // Held past the lock's release: a growth below may drop the last other hold of `target`.
    const std::shared_ptr<const ResidentTensor> held = grown;
    const std::shared_ptr<LiveRows> live = target->live;
    absl::MutexLock updating(&live->update_lock());
    if (std::shared_ptr<const ResidentTensor> next = live->grown_into(); next != nullptr) {
      grown = std::move(next);
      target = grown.get();
      continue;
    }
    // A message by keys: its slots, found now that no other update can move keys; the key
    // index changes last, once the rows are written.
    std::optional<KeyedRows::Upsert> upsert;
    if (update.by_keys) {
      upsert = target->keyed->PlanUpsert(update.keys, update.delete_keys);
      if (upsert->short_slots() > 0) {
        if (const LiveRows::Fate fate = live->fate(); fate != LiveRows::Fate::kLive) {
          return RetiredError(*target, fate);
        }
        if (growth == nullptr || target->disk != nullptr) {
          // A table on disk does not grow: its file was laid out for its capacity.
          return absl::ResourceExhaustedError(absl::StrCat(
              target->keyed->FullWords(*upsert), " (put it again with a larger capacity",
              target->disk != nullptr ? "; a table on disk does not grow" : "", ")"));
        }
        // Built beside the lookups, published in the table's place; the message is planned
        // again on it (under its own update lock: another update may reach it first).
        TC_ASSIGN_OR_RETURN(grown, GrowKeyedTable(*target, *upsert, *growth));
        target = grown.get();
        continue;
      }
    }
    return WriteUpdate(*target, update, upsert, device_write);
  }
}

absl::Status CheckMinSequence(const ResidentTensor& table, int64_t min_sequence) {
  if (min_sequence < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_sequence is ", min_sequence, "; expected >= 0"));
  }
  const int64_t sequence = table.live != nullptr ? table.live->sequence() : 0;
  if (sequence >= min_sequence) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("table '", table.name, "' is at sequence ", sequence,
                   " on this server; the request needs min_sequence ", min_sequence,
                   " (retry, or ask another replica)"));
}

}  // namespace tensorcompute::core
