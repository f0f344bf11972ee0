// The row scatter of CudaExecutor::UpdateRows on the CPU (core/cuda/scatter_unit.h): how an
// update is cut into windows and staged, and the kernel's host twin (ScatterRowsOnHost, the same
// per-unit code the kernel runs) against a plain reference that copies each row with memcpy, on
// random tables, row widths of every copy width (odd ones included), row counts from one to
// several windows, and rows in any order. Also: units run in any order give the same table (the
// kernel's threads are unordered), and together they write each updated row's bytes exactly
// once and nothing else.

#include "core/cuda/scatter_unit.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testing/random_tensor.h"

namespace tensorcompute::cuda {
namespace {

using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::UniformInt;

std::vector<uint8_t> RandomBytes(uint64_t n, Rng& rng) {
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// `count` distinct rows of [0, table_rows), in random order.
std::vector<int64_t> DistinctRows(int64_t table_rows, int64_t count, Rng& rng) {
  std::vector<int64_t> all(table_rows);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(count);
  return all;
}

// The reference: packed row i copied to row rows[i], one memcpy each.
void ReferenceUpdate(std::vector<uint8_t>& table, const std::vector<int64_t>& rows,
                     uint64_t row_bytes, const std::vector<uint8_t>& packed) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(table.data() + rows[i] * row_bytes, packed.data() + i * row_bytes, row_bytes);
  }
}

// What the uploader does, on the host: windows of at most `capacity` staged bytes, each staged
// then scattered by the host twin. Returns the number of windows.
int ScatterInWindows(std::vector<uint8_t>& table, const std::vector<int64_t>& rows,
                     uint64_t row_bytes, const std::vector<uint8_t>& packed, uint64_t capacity) {
  const uint64_t per_window = ScatterWindowRows(row_bytes, capacity);
  EXPECT_GT(per_window, 0u);
  int windows = 0;
  for (uint64_t first = 0; first < rows.size(); first += per_window, ++windows) {
    const ScatterArgs args =
        PlanScatterWindow(std::min<uint64_t>(per_window, rows.size() - first), row_bytes);
    EXPECT_LE(ScatterStagedBytes(args), capacity);
    std::vector<uint8_t> staged(ScatterStagedBytes(args), 0xee);
    StageScatterWindow(args, rows.data() + first, packed.data() + first * row_bytes, staged.data());
    ScatterRowsOnHost(args, staged.data(), table.data());
  }
  return windows;
}

TEST(PlanScatterWindow, CopiesInTheWidestChunkThatDividesTheRow) {
  struct Width {
    uint64_t row_bytes;
    uint32_t vector_bytes;
  };
  for (const Width w : {Width{1, 1}, Width{7, 1}, Width{6, 2}, Width{12, 4}, Width{24, 8},
                        Width{48, 16}, Width{4096, 16}, Width{4098, 2}}) {
    const ScatterArgs a = PlanScatterWindow(3, w.row_bytes);
    EXPECT_EQ(a.vector_bytes, w.vector_bytes) << w.row_bytes << "-byte rows";
    EXPECT_EQ(uint64_t{a.chunks_per_row} * a.vector_bytes, w.row_bytes);
    EXPECT_EQ(a.total_units, 3 * a.chunks_per_row);
  }
}

TEST(PlanScatterWindow, RowsStartSixteenByteAlignedAfterTheRowNumbers) {
  EXPECT_EQ(PlanScatterWindow(1, 4).rows_offset, 16u);
  EXPECT_EQ(PlanScatterWindow(2, 4).rows_offset, 16u);
  EXPECT_EQ(PlanScatterWindow(3, 4).rows_offset, 32u);
  const ScatterArgs a = PlanScatterWindow(5, 7);
  EXPECT_EQ(a.rows_offset, 48u);
  EXPECT_EQ(ScatterStagedBytes(a), 48u + 35u);
}

TEST(StageScatterWindow, WritesRowNumbersZeroPadThenRows) {
  const std::vector<int64_t> rows = {9, 2, 5};
  const std::vector<uint8_t> packed = {1, 2, 3, 4, 5, 6};
  const ScatterArgs a = PlanScatterWindow(3, 2);
  std::vector<uint8_t> staged(ScatterStagedBytes(a), 0xee);
  StageScatterWindow(a, rows.data(), packed.data(), staged.data());
  int64_t numbers[3];
  std::memcpy(numbers, staged.data(), sizeof(numbers));
  EXPECT_EQ(numbers[0], 9);
  EXPECT_EQ(numbers[1], 2);
  EXPECT_EQ(numbers[2], 5);
  for (uint64_t i = 24; i < 32; ++i) EXPECT_EQ(staged[i], 0) << "pad byte " << i;
  EXPECT_EQ(std::vector<uint8_t>(staged.begin() + 32, staged.end()), packed);
}

TEST(ScatterWindowRows, IsTheMostRowsWhoseStagingFits) {
  Rng rng(0x5ca7);
  for (int c = 0; c < 2000; ++c) {
    const uint64_t row_bytes = UniformInt(rng, 1, 300);
    const uint64_t capacity = UniformInt(rng, 1, 5000);
    const uint64_t n = ScatterWindowRows(row_bytes, capacity);
    if (n > 0) {
      EXPECT_LE(ScatterStagedBytes(PlanScatterWindow(n, row_bytes)), capacity);
    }
    EXPECT_GT(ScatterStagedBytes(PlanScatterWindow(n + 1, row_bytes)), capacity)
        << row_bytes << "-byte rows in " << capacity << " bytes";
  }
  EXPECT_EQ(ScatterWindowRows(100, 116), 1u);  // 16 bytes of row number and pad, one row
  EXPECT_EQ(ScatterWindowRows(100, 115), 0u);  // not even one: copied without the kernel
  // 256-byte rows in a 16 MiB staging buffer.
  EXPECT_EQ(ScatterWindowRows(256, uint64_t{16} << 20), 63550u);
}

TEST(ScatterRowsOnHost, MatchesTheReferenceOnRandomUpdates) {
  Rng rng(0x0dd5);
  for (int c = 0; c < 300; ++c) {
    // Every copy width, odd widths (row_bytes not a multiple of 4) included.
    const uint64_t row_bytes = c % 3 == 0 ? UniformInt(rng, 1, 40) : uint64_t{1} << (c % 6);
    const int64_t table_rows = UniformInt(rng, 1, 200);
    const int64_t count = UniformInt(rng, 1, table_rows);
    // From room for one row up to room for all: one window or many.
    const uint64_t capacity = 16 + row_bytes * UniformInt(rng, 1, count + 2) + 8 * count;
    std::vector<uint8_t> table = RandomBytes(table_rows * row_bytes, rng);
    const std::vector<int64_t> rows = DistinctRows(table_rows, count, rng);
    const std::vector<uint8_t> packed = RandomBytes(count * row_bytes, rng);
    std::vector<uint8_t> expected = table;
    ReferenceUpdate(expected, rows, row_bytes, packed);
    ScatterInWindows(table, rows, row_bytes, packed, capacity);
    ASSERT_EQ(table, expected) << count << " of " << table_rows << " rows of " << row_bytes
                               << " bytes, windows of " << capacity << " bytes";
  }
}

TEST(ScatterRowsOnHost, ALargeUpdateSpansSeveralWindows) {
  Rng rng(0x1a7e);
  const uint64_t row_bytes = 20;  // 4-byte chunks
  std::vector<uint8_t> table = RandomBytes(5000 * row_bytes, rng);
  const std::vector<int64_t> rows = DistinctRows(5000, 4321, rng);
  const std::vector<uint8_t> packed = RandomBytes(rows.size() * row_bytes, rng);
  std::vector<uint8_t> expected = table;
  ReferenceUpdate(expected, rows, row_bytes, packed);
  EXPECT_EQ(ScatterInWindows(table, rows, row_bytes, packed, 4096), 30);  // 146 rows a window
  EXPECT_EQ(table, expected);
}

// The kernel's threads run units in no particular order: any order must give the same table,
// and the units together write each updated row's bytes exactly once, no other byte.
TEST(ScatterUnit, UnitsInAnyOrderWriteEachUpdatedByteOnce) {
  Rng rng(0x0de2);
  for (const uint64_t row_bytes : {uint64_t{3}, uint64_t{8}, uint64_t{48}, uint64_t{50}}) {
    const int64_t table_rows = 64;
    std::vector<uint8_t> table = RandomBytes(table_rows * row_bytes, rng);
    const std::vector<int64_t> rows = DistinctRows(table_rows, 40, rng);
    const std::vector<uint8_t> packed = RandomBytes(rows.size() * row_bytes, rng);
    std::vector<uint8_t> expected = table;
    ReferenceUpdate(expected, rows, row_bytes, packed);

    const ScatterArgs args = PlanScatterWindow(rows.size(), row_bytes);
    std::vector<uint8_t> staged(ScatterStagedBytes(args));
    StageScatterWindow(args, rows.data(), packed.data(), staged.data());
    std::vector<uint32_t> units(args.total_units);
    std::iota(units.begin(), units.end(), 0u);
    std::shuffle(units.begin(), units.end(), rng);
    std::vector<int> writes(table.size(), 0);
    for (const uint32_t u : units) {
      const ScatterSite s = LocateScatterUnit(args, staged.data(), u);
      ASSERT_LE(s.to + args.vector_bytes, table.size());
      ASSERT_LE(s.from + args.vector_bytes, staged.size());
      ASSERT_GE(s.from, args.rows_offset) << "a unit read the row numbers as data";
      for (uint32_t k = 0; k < args.vector_bytes; ++k) ++writes[s.to + k];
      std::memcpy(table.data() + s.to, staged.data() + s.from, args.vector_bytes);
    }
    EXPECT_EQ(table, expected) << row_bytes << "-byte rows";
    std::vector<int> want(table.size(), 0);
    for (const int64_t r : rows) {
      std::fill(want.begin() + r * row_bytes, want.begin() + (r + 1) * row_bytes, 1);
    }
    EXPECT_EQ(writes, want) << row_bytes << "-byte rows";
  }
}

}  // namespace
}  // namespace tensorcompute::cuda
