// File: core/npy_file.h
//
// A .npy file read in place, never held whole: its layout from the header, then any range of
// its data with large pread(2)s straight into the caller's buffer. --preload reads tables
// with it, and the CLI's `put` uploads a file chunk by chunk as it sends.
//
//   TC_ASSIGN_OR_RETURN(core::NpyFile file, core::NpyFile::Open(path));
//   TC_RETURN_IF_ERROR(file.CheckSize());
//   if (core::NpyRowsReadInPlace(file.layout())) {
//     TC_ASSIGN_OR_RETURN(core::Tensor rows, core::AllocateNpyRows(file.layout(), n));
//     TC_RETURN_IF_ERROR(file.ReadData(first * file.row_bytes(), rows.mutable_bytes()));
//   } else {
//     TC_ASSIGN_OR_RETURN(core::Tensor t, core::ParseNpy(*file.ReadAll()));  // the slow path
//   }
//
// Errors: opening and reading give NOT_FOUND (no such file), PERMISSION_DENIED, or INTERNAL,
// each "cannot open|read it: <strerror>"; a malformed header, a size that does not match it
// and a file that ends early are INVALID_ARGUMENT (npy_format.h's messages). No message names
// the file: callers say which (e.g. "--preload emb=PATH: ...").
// Thread-safety: const methods may run on several threads at once (pread: no shared
// offset). Copies share the open file, which closes with the last of them.

#ifndef TENSORCOMPUTE_CORE_NPY_FILE_H_
#define TENSORCOMPUTE_CORE_NPY_FILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/npy_format.h"

namespace tensorcompute::core {

class NpyFile {
 public:
  // Opens `path` and reads its preamble and header (not its data).
  static absl::StatusOr<NpyFile> Open(const std::string& path);

  const NpyLayout& layout() const { return layout_; }
  // The bytes of one row (an element of the first dimension; 0 for a table of no rows).
  int64_t row_bytes() const;
  // OK when the data that follows the header is exactly what the header's shape needs
  // (npy_format.h, CheckNpyDataBytes).
  absl::Status CheckSize() const;

  // Fills `out` with the data's bytes from byte `offset` of the data, converted as
  // ParseNpy converts them (big-endian swapped, bool bytes other than 0 made 1), in reads of at
  // most 64 MiB, adding each read's bytes to `*done` when given (progress for another thread).
  // REQUIRES: NpyRowsReadInPlace(layout()); offset and out.size() are whole elements
  // (INVALID_ARGUMENT otherwise); the range lies within the data (a file that ends first is
  // INVALID_ARGUMENT "truncated .npy file").
  absl::Status ReadData(int64_t offset, absl::Span<uint8_t> out,
                        std::atomic<int64_t>* done = nullptr) const;

  // The whole file, for ParseNpy (strings and Fortran order: their slower path).
  absl::StatusOr<std::string> ReadAll() const;

  // --- implementation details below ---
 private:
  NpyFile(std::shared_ptr<const int> fd, int64_t size) : fd_(std::move(fd)), size_(size) {}
  // Fills `out` with the file's bytes from `offset` (INVALID_ARGUMENT if the file ends first).
  absl::Status ReadRaw(int64_t offset, absl::Span<uint8_t> out, std::atomic<int64_t>* done) const;

  std::shared_ptr<const int> fd_;  // closed by its deleter
  int64_t size_ = 0;               // the file's bytes, when opened
  NpyLayout layout_;
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_NPY_FILE_H_
