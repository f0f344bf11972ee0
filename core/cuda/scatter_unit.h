// File: core/cuda/scatter_unit.h
//
// Rows of a resident table rewritten in device memory (CudaExecutor::UpdateRows): how an update
// is cut into windows, how a window is staged, and what the scatter kernel (scatter_kernel.h)
// does for one work unit. The unit's arithmetic is TC_HOST_DEVICE, compiled into the kernel and,
// on the host, into ScatterRowsOnHost (the kernel's host twin), which the CPU tests compare with
// a plain reference and the fake CUDA runtime runs in the kernel's place. Only work_units.h is
// included, so nvcc sees no Abseil here.
//
// A window of `rows` rows is staged (host, then device) as one buffer:
//   [rows x int64 row numbers][zero pad to 16 bytes][rows x row_bytes packed rows]
// and its rows are written to table + row_number * row_bytes. Work unit u copies chunk c of
// window row i (i = u / chunks_per_row, c = u % chunks_per_row) of vector_bytes W, the widest
// power of two <= 16 dividing row_bytes (VectorBytes): the staging buffer and the table's copy
// are 256-byte aligned, so every access is W-aligned. Consecutive units are consecutive chunks:
// coalesced reads of the staged rows and writes within each target row. A window stages at most
// a few MiB (ScatterWindowRows), so its units are numbered in 32 bits.
//
// Thread-safety: pure functions and plain data.

#ifndef TENSORCOMPUTE_CORE_CUDA_SCATTER_UNIT_H_
#define TENSORCOMPUTE_CORE_CUDA_SCATTER_UNIT_H_

#include <cstdint>
#include <cstring>

#include "core/cuda/work_units.h"

namespace tensorcompute::cuda {

// One window as the kernel sees it (passed by value to the launch).
struct ScatterArgs {
  uint32_t rows = 0;            // rows in the window
  uint32_t vector_bytes = 1;    // VectorBytes(row_bytes)
  uint32_t chunks_per_row = 0;  // row_bytes / vector_bytes
  uint32_t total_units = 0;     // rows x chunks_per_row
  uint64_t row_bytes = 0;
  uint64_t rows_offset = 0;  // where the packed rows start in the staged buffer
};

// The window of `rows` rows of `row_bytes` each. REQUIRES: rows >= 1, row_bytes >= 1, and the
// window's staged bytes (ScatterStagedBytes) below 2^32 (ScatterWindowRows ensures it).
inline ScatterArgs PlanScatterWindow(uint64_t rows, uint64_t row_bytes) {
  ScatterArgs a;
  a.rows = static_cast<uint32_t>(rows);
  a.row_bytes = row_bytes;
  a.vector_bytes = VectorBytes(static_cast<int64_t>(row_bytes));
  a.chunks_per_row = static_cast<uint32_t>(row_bytes / a.vector_bytes);
  a.total_units = a.rows * a.chunks_per_row;
  a.rows_offset = (rows * sizeof(int64_t) + 15) / 16 * 16;
  return a;
}

// The bytes a window stages: its row numbers, the pad and its rows.
inline uint64_t ScatterStagedBytes(const ScatterArgs& a) {
  return a.rows_offset + uint64_t{a.rows} * a.row_bytes;
}

// How many rows of `row_bytes` one window holds when it may stage at most `capacity` bytes: the
// most n whose staged bytes fit; 0 when not even one row fits (such rows are copied to the
// device one by one, without the kernel). REQUIRES: row_bytes >= 1, capacity < 2^32.
inline uint64_t ScatterWindowRows(uint64_t row_bytes, uint64_t capacity) {
  uint64_t n = capacity / (row_bytes + sizeof(int64_t));
  while (n > 0 && ScatterStagedBytes(PlanScatterWindow(n, row_bytes)) > capacity) --n;
  return n;
}

// Writes window `a`'s staged bytes to `staged` (ScatterStagedBytes of them): the row numbers
// rows[0 .. a.rows), zeros up to rows_offset, then a.rows x row_bytes bytes of `packed`.
inline void StageScatterWindow(const ScatterArgs& a, const int64_t* rows, const uint8_t* packed,
                               uint8_t* staged) {
  const uint64_t numbers = uint64_t{a.rows} * sizeof(int64_t);
  std::memcpy(staged, rows, numbers);
  std::memset(staged + numbers, 0, a.rows_offset - numbers);
  std::memcpy(staged + a.rows_offset, packed, uint64_t{a.rows} * a.row_bytes);
}

// Where work unit u reads (an offset into the staged buffer) and writes (into the table).
struct ScatterSite {
  uint64_t from;
  uint64_t to;
};

// REQUIRES: u < a.total_units; the staged row numbers are rows of the table.
TC_HOST_DEVICE inline ScatterSite LocateScatterUnit(const ScatterArgs& a, const uint8_t* staged,
                                                    uint32_t u) {
  // One chunk per row (rows of at most 16 bytes) skips the division.
  const uint32_t i = a.chunks_per_row == 1 ? u : u / a.chunks_per_row;
  const uint64_t in_row = uint64_t{u - i * a.chunks_per_row} * a.vector_bytes;
  const int64_t row = reinterpret_cast<const int64_t*>(staged)[i];
  return {a.rows_offset + i * a.row_bytes + in_row,
          static_cast<uint64_t>(row) * a.row_bytes + in_row};
}

// Work unit u of window `a`: one W-byte chunk from `staged` to `table`. REQUIRES: W ==
// a.vector_bytes, u < a.total_units.
template <int W>
TC_HOST_DEVICE inline void ScatterUnit(const ScatterArgs& a, const uint8_t* staged, uint8_t* table,
                                       uint32_t u) {
  const ScatterSite s = LocateScatterUnit(a, staged, u);
  CopyChunk<W>(table + s.to, staged + s.from);
}

// Runs units [0, a.total_units) of window `a` on the calling thread, in order, as the kernel
// does on the device: the host twin of LaunchScatterRows. `staged` and `table` are host memory.
template <int W>
void ScatterRowsOnHostAs(const ScatterArgs& a, const uint8_t* staged, uint8_t* table) {
  for (uint32_t u = 0; u < a.total_units; ++u) ScatterUnit<W>(a, staged, table, u);
}
inline void ScatterRowsOnHost(const ScatterArgs& a, const uint8_t* staged, uint8_t* table) {
  switch (a.vector_bytes) {
    case 16:
      return ScatterRowsOnHostAs<16>(a, staged, table);
    case 8:
      return ScatterRowsOnHostAs<8>(a, staged, table);
    case 4:
      return ScatterRowsOnHostAs<4>(a, staged, table);
    case 2:
      return ScatterRowsOnHostAs<2>(a, staged, table);
    default:
      return ScatterRowsOnHostAs<1>(a, staged, table);
  }
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_SCATTER_UNIT_H_
