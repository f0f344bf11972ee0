// File: core/table_file.h
//
// The file a table on disk keeps its rows in (issue 43), as core sees it: `rows()` rows of
// `row_bytes()` bytes each, read at random many at a time and written one at a time. core/ knows
// no I/O library: core/disk/row_file.h implements it with io_uring and direct I/O, and the
// row cache (core/disk_rows.h) reads and writes through it.
//
// Contract of every implementation:
//   Read   copies row rows[i] to dest[i] (row_bytes() bytes) for every i, rows possibly
//          repeated; UNAVAILABLE naming the file when a read fails, comes back short or finds
//          the file changed by another process; the destinations' bytes are then unspecified.
//   Write  writes one row; Sync makes the writes so far durable. UNAVAILABLE naming the file
//          when they fail; FAILED_PRECONDITION when the file was opened read-only.
//   A Read concurrent with a Write of the same row may return old bytes, new ones or a mix:
//   callers order them.
//
// Thread-safety: Read may run on any threads at once, beside Write and Sync.

#ifndef TENSORCOMPUTE_CORE_TABLE_FILE_H_
#define TENSORCOMPUTE_CORE_TABLE_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tensorcompute::core {

// Told of every read a Read completes (for a latency histogram): the bytes it moved from the
// disk and the nanoseconds from its submission to its completion.
class ReadObserver {
 public:
  virtual ~ReadObserver() = default;
  virtual void OnRead(int64_t bytes, int64_t nanos) = 0;
};

class TableFile {
 public:
  virtual ~TableFile() = default;

  // REQUIRES: 0 <= rows[i] < this->rows(); dest has rows.size() pointers. `observer` may be
  // null.
  virtual absl::Status Read(absl::Span<const int64_t> rows, uint8_t* const* dest,
                            ReadObserver* observer) const = 0;
  // REQUIRES: 0 <= row < rows().
  virtual absl::Status Write(int64_t row, const uint8_t* src) = 0;
  virtual absl::Status Sync() = 0;

  virtual const std::string& path() const = 0;
  virtual int64_t rows() const = 0;
  virtual int64_t row_bytes() const = 0;
  // Whether reads bypass the page cache (direct I/O), so that they meet the disk itself.
  virtual bool direct() const = 0;
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_TABLE_FILE_H_
