#include "core/table_growth.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/live_rows.h"
#include "core/shape.h"
#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

// The capacity to grow to: `wanted`, or as many slots as `available` bytes hold, but at least
// `least`; nullopt when even `least` does not fit.
std::optional<int64_t> CapacityThatFits(int64_t least, int64_t wanted, int64_t row_bytes,
                                        int64_t available) {
  const std::optional<int64_t> wanted_bytes = KeyedTableBytes(wanted, row_bytes);
  if (wanted_bytes.has_value() && *wanted_bytes <= available) return wanted;
  const std::optional<int64_t> least_bytes = KeyedTableBytes(least, row_bytes);
  if (!least_bytes.has_value() || *least_bytes > available) return std::nullopt;
  // Slots past `least` cost a row and an index bound each.
  const int64_t more = (available - *least_bytes) / (row_bytes + KeyIndexBytes(1));
  return least + std::min(more, wanted - least);
}

// Fills `out` (the grown table's C' + 2 rows of `row_bytes`) from `old` (C + 2 rows): slots
// [0, C) copied, [C, C') and the zero row zeros, the default row copied. In pieces over
// `pool` (may be null) for a large table.
void CopyGrown(absl::Span<const uint8_t> old, int64_t capacity, int64_t grown_capacity,
               int64_t row_bytes, uint8_t* out, ThreadPool* pool) {
  const int64_t kept = capacity * row_bytes;
  const int64_t zeros_end = (grown_capacity + 1) * row_bytes;
  auto fill = [&](int64_t begin, int64_t end) {
    if (begin < kept) {
      std::memcpy(out + begin, old.data() + begin,
                  static_cast<size_t>(std::min(end, kept) - begin));
    }
    if (end > kept) {
      const int64_t from = std::max(begin, kept);
      std::memset(out + from, 0, static_cast<size_t>(end - from));
    }
  };
  // Pieces of 16 MiB: a piece is worth a worker's wake-up.
  constexpr int64_t kPiece = int64_t{16} << 20;
  if (pool != nullptr && zeros_end >= 2 * kPiece) {
    pool->ParallelFor(zeros_end, kPiece, fill);
  } else {
    fill(0, zeros_end);
  }
  std::memcpy(out + zeros_end, old.data() + (capacity + 1) * row_bytes,
              static_cast<size_t>(row_bytes));
}

}  // namespace

int64_t GrownCapacity(int64_t capacity, int64_t short_slots) {
  const int64_t least = capacity + short_slots;
  const int64_t doubled = capacity > kMaxKeyedCapacity / 2 ? kMaxKeyedCapacity : 2 * capacity;
  return std::min(std::max(doubled, least), kMaxKeyedCapacity);
}

std::optional<int64_t> KeyedTableBytes(int64_t capacity, int64_t row_bytes) {
  const std::optional<int64_t> rows = CheckedMul(capacity + kKeyedHiddenRows, row_bytes);
  if (!rows.has_value() || *rows > INT64_MAX - KeyIndexBytes(capacity)) return std::nullopt;
  return *rows + KeyIndexBytes(capacity);
}

absl::StatusOr<std::shared_ptr<const ResidentTensor>> GrowKeyedTable(const ResidentTensor& table,
                                                                     const KeyedRows::Upsert& plan,
                                                                     const TableGrowth& growth) {
  const KeyedRows& keyed = *table.keyed;
  const int64_t capacity = keyed.capacity();
  const int64_t least = capacity + plan.short_slots();
  if (least > kMaxKeyedCapacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        keyed.FullWords(plan), ", and a keyed table has at most ", kMaxKeyedCapacity, " slots"));
  }
  if (table.device_copy.gpu >= 0 && !growth.place) {
    return absl::FailedPreconditionError(absl::StrCat(keyed.FullWords(plan), ", and it lives on ",
                                                      table.device,
                                                      ", where this server cannot grow it"));
  }
  const TensorView old = table.keyed_view();
  const int64_t row_bytes = static_cast<int64_t>(old.data.size()) / old.shape[0];
  // Reserved before anything is allocated, beside the old table (still held).
  TensorRegistry& registry = *growth.registry;
  const int64_t wanted = GrownCapacity(capacity, plan.short_slots());
  const int64_t in_use = registry.resident_bytes();
  const std::optional<int64_t> grown_capacity =
      CapacityThatFits(least, wanted, row_bytes, registry.max_resident_bytes() - in_use);
  absl::StatusOr<TensorRegistry::Reservation> reservation =
      grown_capacity.has_value()
          ? registry.Reserve(table.name, *KeyedTableBytes(*grown_capacity, row_bytes))
          : absl::ResourceExhaustedError("");
  if (!reservation.ok()) {
    const std::optional<int64_t> least_bytes = KeyedTableBytes(least, row_bytes);
    return absl::ResourceExhaustedError(
        absl::StrCat(keyed.FullWords(plan), ", and growing it to ", least, " slots needs ",
                     least_bytes.value_or(INT64_MAX), " bytes beside its ", table.bytes,
                     " while it is copied, but ", registry.resident_bytes(),
                     " of max_resident_bytes = ", registry.max_resident_bytes(),
                     " are in use; delete a tensor or raise --max_resident_bytes"));
  }
  Shape shape = old.shape;
  shape[0] = *grown_capacity + kKeyedHiddenRows;
  TC_ASSIGN_OR_RETURN(Tensor rows, Tensor::Allocate(old.dtype, shape));
  CopyGrown(old.data, capacity, *grown_capacity, row_bytes, rows.mutable_bytes().data(),
            growth.pool);
  std::shared_ptr<KeyedRows> grown_keys = keyed.Grown(*grown_capacity);
  DeviceCopy device_copy;
  if (table.device_copy.gpu >= 0) {
    absl::StatusOr<DeviceCopy> placed = growth.place(table.device, rows);
    if (!placed.ok()) {
      return absl::Status(
          placed.status().code(),
          absl::StrCat(keyed.FullWords(plan), ", and growing it to ", *grown_capacity, " slots on ",
                       table.device, " failed: ", placed.status().message()));
    }
    device_copy = *std::move(placed);
  }
  return registry.PutGrown(table, std::move(rows), std::move(device_copy), *std::move(reservation),
                           std::move(grown_keys));
}

}  // namespace tensorcompute::core
