// File: core/disk/table_writer.h
//
// Writes a table on disk as it arrives (issue 43): the bytes of a table as a client sends it
// (a PutTensor with tier DISK, a --preload file converted), in order and in pieces of any size,
// become its stored rows in a new unnamed file under a directory (RowFile::CreateUnnamed). The
// file has the layout's stored rows: a keyed table's (core/keyed_rows.h, KeyedLayout) has more
// than are sent, its free slots and hidden rows, zeros until written (WriteRows).
// A compact kind the server converts (float16, int8-rowwise) is converted row by row
// (core::TableEncoder); INT8_ROWWISE_PREQUANTIZED rows are checked (core::CheckStoredRows) as
// a table in memory's are, with the same errors. The rows are written a buffer at a time
// (kBufferBytes, or one row if longer), and every kSyncBytes written are made durable and
// dropped from the page cache, so that filling a table larger than memory holds no more than
// the buffer (the page cache included).
//
// Thread-safety: one thread at a time.

#ifndef TENSORCOMPUTE_CORE_DISK_TABLE_WRITER_H_
#define TENSORCOMPUTE_CORE_DISK_TABLE_WRITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/disk/row_file.h"
#include "core/table_storage.h"

namespace tensorcompute::core::disk {

class TableWriter {
 public:
  static constexpr int64_t kBufferBytes = int64_t{1} << 20;
  static constexpr int64_t kSyncBytes = int64_t{64} << 20;

  // A table `name` of `layout` (PlanTableLayout's; not DT_STRING) to be written into a new
  // file under `dir`: RowFile::CreateUnnamed's errors; INVALID_ARGUMENT "tensor 'T': a table on
  // disk needs rows of at least one byte" for a scalar or rows of no bytes.
  static absl::StatusOr<std::unique_ptr<TableWriter>> Create(std::string name,
                                                             const TableLayout& layout,
                                                             const std::string& dir,
                                                             RowFile::Options options);

  // The next bytes of the table as sent. INVALID_ARGUMENT for a value the storage cannot hold
  // or a bad prequantized row (naming it, as a table in memory would); the file's errors
  // (UNAVAILABLE). After an error the writer is unusable.
  // REQUIRES: the bytes appended in all stay within layout.sent_bytes.
  absl::Status Append(absl::Span<const uint8_t> sent);

  // The bytes of one stored row of `layout` (its row shape's); 0 for a scalar or empty rows.
  static int64_t StoredRowBytes(const TableLayout& layout);

  // Writes stored rows past the ones sent (a keyed table's default row), as they are.
  // REQUIRES: first_row >= the rows sent; the rows within the file's.
  absl::Status WriteRows(int64_t first_row, int64_t count, const uint8_t* stored) {
    return file_->WriteRows(first_row, count, stored);
  }

  // Every byte has come: writes the rest, makes the file durable and drops its pages, and
  // hands the file over. REQUIRES: layout.sent_bytes appended.
  absl::StatusOr<std::unique_ptr<RowFile>> Finish();

  // The buffer's bytes: what a writer holds in memory.
  int64_t buffer_bytes() const { return static_cast<int64_t>(buffer_.capacity()); }

 private:
  TableWriter() = default;
  // Takes stored bytes; writes the buffer's whole rows when it is full.
  absl::Status Store(absl::Span<const uint8_t> stored);
  // Writes the buffer's whole rows; syncs every kSyncBytes.
  absl::Status Flush();

  std::string name_;
  TableLayout layout_;
  int64_t row_bytes_ = 0;  // stored
  std::unique_ptr<RowFile> file_;
  std::optional<TableEncoder> encoder_;
  std::vector<uint8_t> buffer_;  // stored bytes not yet written, from row written_rows_
  int64_t sent_rows_ = 0;        // the rows whose bytes are sent
  int64_t written_rows_ = 0;
  int64_t unsynced_bytes_ = 0;
};

}  // namespace tensorcompute::core::disk

#endif  // TENSORCOMPUTE_CORE_DISK_TABLE_WRITER_H_
