// File: server/native/disk_upload.h
//
// A PutTensor with tier DISK (issue 43): the table's rows go to a new unnamed file under the
// server's --table_dir as they arrive (core/disk/table_writer.h, converted or checked as a
// table in memory's are), and only its row cache is held in memory (core/disk_rows.h).
//
// Begin checks the description against what a table on disk may be, then reserves before
// anything is allocated: the cache (and its bookkeeping) against --max_resident_bytes, what
// the table keeps in memory with a keyed table's key index, and the file's stored bytes against
// --max_table_dir_bytes. A keyed table's file is laid out as its tensor in memory would be
// (core::KeyedLayout: its capacity's slots, free ones zero, then the zero and default rows). Both
// are given back if the upload fails; once published, the file's share goes back when the
// file is closed (the table deleted or replaced and its last lookup done).
//
// Errors, before any row is read (the upload's words, "tensor 'T': ..."):
//   FAILED_PRECONDITION  the server has no --table_dir: "tensor 'T': this server keeps no
//                        tables on disk from PutTensor (start it with --table_dir)".
//   INVALID_ARGUMENT     a tier outside the enum; DT_STRING, a shard, a GPU device, rows of no
//                        bytes; a cache of less than one set of rows; a keyed table's bad
//                        default row (the words of the table in memory).
//   RESOURCE_EXHAUSTED   past --max_resident_bytes or --max_table_dir_bytes, or a file system
//                        without room for the file.
//   others               the directory's (RowFile::CreateUnnamed).
//
// Thread-safety: one thread at a time (the upload's).

#ifndef TENSORCOMPUTE_SERVER_NATIVE_DISK_UPLOAD_H_
#define TENSORCOMPUTE_SERVER_NATIVE_DISK_UPLOAD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/disk/table_writer.h"
#include "core/disk_rows.h"
#include "core/table_storage.h"
#include "core/tensor_registry.h"

namespace tensorcompute::server {

// Where PutTensor's tables on disk go.
struct DiskTier {
  std::string table_dir;                   // --table_dir; empty: PutTensor makes no table on disk
  int64_t cache_bytes = int64_t{1} << 30;  // --table_cache_bytes, each table's row cache
};

// OK for MEMORY and DISK; INVALID_ARGUMENT naming another value.
absl::Status CheckTier(const std::string& name, v1::TableTier tier);

class DiskUpload {
 public:
  // `first` is the upload's first message (its description), `layout` its storage's.
  static absl::StatusOr<std::unique_ptr<DiskUpload>> Begin(const DiskTier& tier,
                                                           core::TensorRegistry* registry,
                                                           const std::string& name,
                                                           const core::TableLayout& layout,
                                                           const v1::PutTensorRequest& first);

  // The next bytes of the table as sent (TableWriter::Append).
  absl::Status Append(absl::Span<const uint8_t> sent) { return writer_->Append(sent); }

  // Every byte has come: the table's rows, behind their cache; `*memory` is then what the
  // table counts against --max_resident_bytes (for TensorRegistry::Put).
  absl::StatusOr<std::shared_ptr<core::DiskRows>> Finish(core::TensorRegistry::Reservation* memory);

 private:
  DiskUpload() = default;
  // A keyed table's zero row and default row, after its slots in the file.
  absl::Status WriteHiddenRows(const core::TableLayout& layout, const v1::KeyedTable& keyed);

  std::string name_;
  int64_t cache_bytes_ = 0;
  std::unique_ptr<core::disk::TableWriter> writer_;
  core::TensorRegistry::Reservation memory_;  // the cache
  core::TensorRegistry::Reservation file_;    // the file's bytes
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_NATIVE_DISK_UPLOAD_H_
