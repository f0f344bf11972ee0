// File: core/disk_rows.h
//
// A table's rows on disk behind a row cache in memory (issue 43). The rows stay in their file
// (core/disk/row_file.h); the cache holds at most cache_rows() of them, chosen by
// core/row_cache_policy.h (TinyLFU admission in front of set-associative LRU, or plain LRU), in
// one block of memory allocated when the table is opened: cache_rows() * row_bytes() bytes,
// which is what the table counts against the server's memory, with the policy's 26 to 36 bytes
// a slot (memory_bytes()).
//
// A lookup hands Fetch the distinct rows it needs and a buffer for them: the rows in the cache
// are copied from it, and the rest (a call's misses) are read from the file together, many in
// flight, then offered to the cache. Fetch never returns bytes other than the file's (or the
// latest Write's): a read that fails fails the call, UNAVAILABLE naming the table, and caches
// nothing.
//
// Writes go through: the file first, then the cached copy if the row is cached. A Fetch that
// read a row from the file while a Write changed it caches none of the rows it read (it may
// still return the row's old bytes: the lookup is then ordered before the write). The table's
// write gate (core/live_rows.h) keeps updates and lookups apart, so a lookup never sees a row
// half written; DiskRows itself stays consistent without it.
//
// Thread-safety: Fetch may run on any threads at once (the cache and the policy are guarded by
// one mutex, held to probe, copy hits and admit; never across a read from the file). Write
// and Sync may run beside Fetch; Writes serialize.

#ifndef TENSORCOMPUTE_CORE_DISK_ROWS_H_
#define TENSORCOMPUTE_CORE_DISK_ROWS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

#include "core/request_stats.h"
#include "core/row_cache_policy.h"
#include "core/table_file.h"

namespace tensorcompute::core {

class DiskRows {
 public:
  struct Options {
    // The cache's bound: floor(cache_bytes / row_bytes) rows, rounded down to whole sets of
    // RowCachePolicy::kWays, at most the table's rows rounded up to a set. A cache of fewer than
    // one set's rows is INVALID_ARGUMENT.
    int64_t cache_bytes = 0;
    bool admission = true;  // false: plain set-associative LRU (for comparisons)
    // Kept until the file is closed, then let go (e.g. the file's share of a disk budget,
    // TensorRegistry::ReserveDisk).
    std::shared_ptr<const void> hold;
  };

  // The table `name` (for errors) on `file`. INVALID_ARGUMENT for a cache too small.
  static absl::StatusOr<std::unique_ptr<DiskRows>> Open(std::string name,
                                                        std::unique_ptr<TableFile> file,
                                                        Options options);
  ~DiskRows();
  DiskRows(const DiskRows&) = delete;
  DiskRows& operator=(const DiskRows&) = delete;

  // What one Fetch did.
  struct FetchStats {
    int64_t hits = 0;    // rows copied from the cache
    int64_t misses = 0;  // rows read from the file
  };

  // Copies row rows[i] to dest + i * row_bytes() for every i (from the cache, or read from the
  // file and offered to the cache). Adds to `stats` (may be null); `observer` (may be null) is
  // told of each read, after the table's own totals. UNAVAILABLE "table 'T' on disk: <the file's
  // words>" if a read failed. REQUIRES: the rows are distinct, each in [0, rows()).
  absl::Status Fetch(absl::Span<const int64_t> rows, uint8_t* dest, FetchStats* stats = nullptr,
                     ReadObserver* observer = nullptr) const;
  // The same with row rows[i] copied to dest[i]; `missed` (may be null; rows.size() bytes) gets
  // 1 where the row was read from the file, 0 where it came from the cache.
  absl::Status FetchTo(absl::Span<const int64_t> rows, uint8_t* const* dest,
                       FetchStats* stats = nullptr, ReadObserver* observer = nullptr,
                       uint8_t* missed = nullptr) const;

  // Writes row `row` through (row_bytes() bytes): to the file, then to its cached copy. The
  // file's errors, naming the table. REQUIRES: opened writable; 0 <= row < rows().
  absl::Status Write(int64_t row, const uint8_t* bytes);
  // Makes the writes so far durable (TableFile::Sync).
  absl::Status Sync();

  const std::string& name() const { return name_; }
  const TableFile& file() const { return *file_; }
  int64_t rows() const { return file_->rows(); }
  int64_t row_bytes() const { return file_->row_bytes(); }
  int64_t cache_rows() const { return cache_rows_; }
  // The memory the table holds: the cache's rows and the policy's bookkeeping.
  int64_t memory_bytes() const;
  // Rows in the cache now.
  int64_t cached_rows() const;
  // Totals since Open, for metrics: rows from the cache and rows read from the file; the reads
  // (one a row missed) with the bytes they moved (whole blocks) and their latency, from a
  // read's submission to its completion (seconds, DurationBounds()).
  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  int64_t read_bytes() const { return read_bytes_.load(std::memory_order_relaxed); }
  const Histogram& read_seconds() const { return read_seconds_; }

  // The rows a cache of `cache_bytes` holds over rows of `row_bytes` in a table of `rows` (0
  // when Open would refuse it), and the memory Open then takes (memory_bytes()): for reserving
  // memory before opening.
  static int64_t CacheRowsFor(int64_t cache_bytes, int64_t row_bytes, int64_t rows);
  // CacheRowsFor, or Open's INVALID_ARGUMENT for a cache too small, naming table `name`.
  static absl::StatusOr<int64_t> CacheRows(absl::string_view name, int64_t cache_bytes,
                                           int64_t row_bytes, int64_t rows);
  static int64_t MemoryBytesFor(int64_t cache_rows, int64_t row_bytes);

 private:
  DiskRows() = default;
  uint8_t* SlotBytes(int64_t slot) const { return cache_.get() + slot * row_bytes(); }

  std::string name_;
  std::shared_ptr<const void> hold_;  // let go after file_ is closed (declared before it)
  std::unique_ptr<TableFile> file_;
  int64_t cache_rows_ = 0;
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], FreeDeleter> cache_;

  mutable absl::Mutex mu_;
  // The policy's state changes on every lookup (counts, recency): guarded even for Fetch.
  std::unique_ptr<RowCachePolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  // Writes so far: a Fetch that saw it change while it read caches nothing it read.
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex write_mu_;
  class Recorder;  // a ReadObserver into read_bytes_ and read_seconds_, then the caller's
  mutable std::atomic<int64_t> hits_{0};
  mutable std::atomic<int64_t> misses_{0};
  mutable std::atomic<int64_t> read_bytes_{0};
  mutable Histogram read_seconds_{DurationBounds()};
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_DISK_ROWS_H_
