#include "core/live_rows.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "core/index_math.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/status_macros.h"
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

int64_t LiveRows::Retire(Fate fate) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  fate_ = fate;
  return sequence_.load(std::memory_order_acquire);
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
    return update;
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
  return update;
}

}  // namespace

absl::StatusOr<RowUpdate> PrepareRowUpdate(const ResidentTensor& table, const TensorView& indices,
                                           const TensorView& values) {
  return Prepare(table, indices, values, /*any_shard=*/false);
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

absl::StatusOr<int64_t> ApplyRowUpdate(const ResidentTensor& table, const RowUpdate& update,
                                       const DeviceRowWriter& device_write) {
  auto write = [&]() -> absl::Status {
    if (table.device_copy.gpu >= 0) {
      if (!device_write) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensor '", table.name, "' lives on gpu:", table.device_copy.gpu,
                         ", whose copy this server cannot update"));
      }
      const absl::Status device =
          device_write(table.device_copy, update.rows, update.row_bytes, update.bytes());
      // UNAVAILABLE: the device is out of service, its copy never read again (live_rows.h).
      if (!device.ok() && !absl::IsUnavailable(device)) return device;
    }
    // The one place a published tensor's bytes change: they were allocated writable, and the
    // gate keeps every reader out (the file comment).
    uint8_t* base = const_cast<uint8_t*>(table.tensor.view().data.data());
    const uint8_t* from = update.bytes().data();
    for (size_t i = 0; i < update.rows.size(); ++i) {
      std::memcpy(base + update.rows[i] * update.row_bytes,
                  from + static_cast<int64_t>(i) * update.row_bytes,
                  static_cast<size_t>(update.row_bytes));
    }
    return absl::OkStatus();
  };
  auto retired = [&](LiveRows::Fate fate) {
    if (fate == LiveRows::Fate::kDeleted) {
      return absl::NotFoundError(absl::StrCat("tensor '", table.name, "' was deleted"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", table.name,
                     "' was replaced while rows were being updated; the update was not applied "
                     "to the new version (version ",
                     table.version, " is gone)"));
  };
  return table.live->Write(write, retired);
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
