// File: core/disk/row_file.h
//
// The rows of a table on disk (issue 43): a file holding `rows` rows of `row_bytes` bytes each,
// back to back from byte `data_offset` on (an .npy file's data), read at random with many reads
// in flight through io_uring, and written through one row at a time.
//
// Direct I/O: the file is read with O_DIRECT, so the page cache neither hides the disk nor holds
// memory beyond the server's own bounds. Direct I/O moves whole aligned blocks: a row is read as
// the kBlockBytes-aligned span that covers it (one block for a row inside a block; more for a row
// that crosses a boundary: SpanBytes()) into a bounce buffer, and its bytes are copied out. A file
// system that refuses O_DIRECT (tmpfs) is read through the page cache instead: direct() says
// which.
//
// io_uring: each thread that reads has its own ring (made on its first read and kept for the
// thread's life) and its own bounce buffers, so the reads of different threads never wait on each
// other. A Read keeps up to InFlight() reads in flight: kQueueDepth, fewer for rows so long that
// kQueueDepth spans would pass kMaxBounceBytes. Where io_uring cannot be set up (a seccomp profile
// that denies it, as some container runtimes' defaults do), rows are read with pread one at a
// time: uring() says which, and the server logs it.
//
// Writes go through a second descriptor without O_DIRECT (a row is written as its own bytes, so
// a write never rewrites its neighbours' blocks or extends the file), into the page cache; a
// direct read of a range writes its dirty pages back first (Linux does), so a Read after a Write
// returns the written bytes. Sync() makes the writes so far durable (fdatasync) and drops their
// pages. A Read that runs concurrently with a Write of the same row may return the old bytes, the
// new ones or a mix: the caller orders them (core/disk/disk_rows.h).
//
// Change detection: Open records the file's size and modification time. Every Read checks them
// first (one fstat) and fails if another process truncated or rewrote the file; a read that comes
// back short (a truncation after the check) fails too. This object's own writes update what it
// expects.
//
// Errors name the file as Open was given it:
//   Open: NOT_FOUND (no such file), PERMISSION_DENIED, FAILED_PRECONDITION (the file is shorter
//         than data_offset + rows * row_bytes, or not a regular file), INVALID_ARGUMENT (rows < 0,
//         row_bytes < 1 or > kMaxRowBytes, data_offset < 0), UNAVAILABLE for other errors.
//   Read, Write, Sync: UNAVAILABLE "table file 'PATH': reading row 7: Input/output error", or
//         "...: the file changed under the server (size 100 -> 40)", or "...: row 7 came back
//         short (the file was truncated?)". After a failed Read the destinations' bytes are
//         unspecified (some rows may have been copied).
//
// Thread-safety: Read may run concurrently with Read, Write and Sync on any threads. Write and
// Sync serialize on the object's write mutex. (core/table_file.h's contract holds.)

#ifndef TENSORCOMPUTE_CORE_DISK_ROW_FILE_H_
#define TENSORCOMPUTE_CORE_DISK_ROW_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

#include "core/table_file.h"

namespace tensorcompute::core::disk {

class RowFile final : public TableFile {
 public:
  // The alignment of direct reads: 4 KiB, which every Linux block device's logical block
  // (512 B or 4 KiB) divides, and the size of fio's reference reads.
  static constexpr int64_t kBlockBytes = 4096;
  // Reads in flight per reading thread, at most: fio's reference depth.
  static constexpr int kQueueDepth = 64;
  // A reading thread's bounce buffers hold at most this many bytes (beyond one span).
  static constexpr int64_t kMaxBounceBytes = int64_t{4} << 20;
  // The longest row: 64 MiB (a float32 row of 16 M values).
  static constexpr int64_t kMaxRowBytes = int64_t{64} << 20;

  struct Options {
    bool writable = false;  // opens the write descriptor too (Write, Sync)
    bool direct = true;     // false: read through the page cache (for tests and comparisons)
    bool uring = true;      // false: read with pread, one row at a time
  };

  static absl::StatusOr<std::unique_ptr<RowFile>> Open(const std::string& path, int64_t data_offset,
                                                       int64_t rows, int64_t row_bytes,
                                                       Options options);
  // A new file of `rows` rows of `row_bytes` bytes (zeros until written), in directory `dir`
  // and unnamed there (O_TMPFILE, or a name unlinked at once): it is the server's own, and its
  // space goes back when it is closed, even if the server is killed. Opened writable; its rows
  // start at byte 0; path() is "DIR/(unnamed)". Its whole length is allocated first
  // (posix_fallocate): RESOURCE_EXHAUSTED "table directory 'DIR': no room for a file of N
  // bytes (...)" when the file system has no room; Open's errors for the directory.
  static absl::StatusOr<std::unique_ptr<RowFile>> CreateUnnamed(const std::string& dir,
                                                                int64_t rows, int64_t row_bytes,
                                                                Options options);
  ~RowFile() override;
  RowFile(const RowFile&) = delete;
  RowFile& operator=(const RowFile&) = delete;

  // Copies row rows[i] to dest[i] (row_bytes() bytes) for every i, with up to InFlight() reads
  // in flight; the same row may be asked for twice. `observer` may be null.
  // REQUIRES: 0 <= rows[i] < this->rows(); dest has rows.size() pointers.
  absl::Status Read(absl::Span<const int64_t> rows, uint8_t* const* dest,
                    ReadObserver* observer = nullptr) const override;

  // Writes row `row` (row_bytes() bytes from src). REQUIRES: writable; 0 <= row < rows().
  absl::Status Write(int64_t row, const uint8_t* src) override;
  // Writes rows [first_row, first_row + count) from `src`, back to back, in one call (a table
  // being filled). REQUIRES: writable; the rows within [0, rows()).
  absl::Status WriteRows(int64_t first_row, int64_t count, const uint8_t* src);
  // Makes every Write so far durable and drops the written pages from the page cache.
  // REQUIRES: writable.
  absl::Status Sync() override;

  const std::string& path() const override { return path_; }
  int64_t rows() const override { return rows_; }
  int64_t row_bytes() const override { return row_bytes_; }
  int64_t data_offset() const { return data_offset_; }
  bool direct() const override { return direct_; }
  bool uring() const { return uring_; }
  // The bytes one row's read moves: its aligned span, at most (the longest over rows).
  int64_t SpanBytes() const { return span_bytes_; }
  int InFlight() const { return in_flight_; }

 private:
  RowFile() = default;
  // Open, reaching the file as `open_path` and naming it `path`.
  static absl::StatusOr<std::unique_ptr<RowFile>> OpenAs(const std::string& open_path,
                                                         const std::string& path,
                                                         int64_t data_offset, int64_t rows,
                                                         int64_t row_bytes, Options options);
  // The aligned span of row `row`: [*begin, *begin + *length).
  void SpanOf(int64_t row, int64_t* begin, int64_t* length) const;
  absl::Status CheckUnchanged() const;
  absl::Status ReadWithUring(absl::Span<const int64_t> rows, uint8_t* const* dest,
                             ReadObserver* observer) const;
  absl::Status ReadWithPread(absl::Span<const int64_t> rows, uint8_t* const* dest,
                             ReadObserver* observer) const;
  absl::Status Unavailable(const std::string& what) const;

  std::string path_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  int64_t data_offset_ = 0;
  int64_t rows_ = 0;
  int64_t row_bytes_ = 0;
  int64_t span_bytes_ = 0;
  int in_flight_ = 1;
  bool direct_ = false;
  bool uring_ = false;

  // What the file must still be (Open's, then this object's writes'): checked by every Read.
  mutable absl::Mutex expected_mu_;
  int64_t expected_size_ ABSL_GUARDED_BY(expected_mu_) = 0;
  int64_t expected_mtime_ns_ ABSL_GUARDED_BY(expected_mu_) = 0;
  absl::Mutex write_mu_;
};

}  // namespace tensorcompute::core::disk

#endif  // TENSORCOMPUTE_CORE_DISK_ROW_FILE_H_
