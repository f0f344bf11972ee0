// File: client/tensor_source.h
//
// A tensor of fixed-size elements that an upload reads as it sends, chunk by chunk, instead of
// holding it whole in memory (Client::PutTensor; the CLI's `put` of a large .npy file):
//
//   absl::StatusOr<std::optional<TensorSource>> source = OpenNpySource("emb.npy");
//   if (source.ok() && source->has_value()) client.PutTensor("emb", **source);
//
// Thread-safety: a source's `read` is called by one upload at a time; OpenNpySource's may be
// called from several threads at once (pread). Copies of a source share what it reads from.

#ifndef TENSORCOMPUTE_CLIENT_TENSOR_SOURCE_H_
#define TENSORCOMPUTE_CLIENT_TENSOR_SOURCE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/tensor.h"

namespace tensorcompute::client {

struct TensorSource {
  core::DataType dtype = core::DataType::kUnspecified;  // never kString
  core::Shape shape;
  // Fills `out` with bytes [offset, offset + out.size()) of the tensor as a core::Tensor holds
  // them (row-major, host byte order). An upload calls it for whole elements, in order, and
  // from 0 again when it is retried; an error ends the upload with that error.
  std::function<absl::Status(int64_t offset, absl::Span<uint8_t> out)> read;
};

// The tensor's bytes (elements times their size), or nullopt when the shape overflows int64.
std::optional<int64_t> SourceBytes(const TensorSource& source);

// A fixed-size tensor in memory as a source (a copy per chunk). REQUIRES: tensor.dtype is not
// kString; tensor's storage outlives the source.
TensorSource SourceOf(const core::TensorView& tensor);

// Rows [rows.begin, rows.end) of `whole` (its first dimension) as a source of their own.
// REQUIRES: whole has rank >= 1 and 0 <= rows.begin <= rows.end <= whole.shape[0].
TensorSource SourceRows(const TensorSource& whole, core::RowRange rows);

// The .npy file at `path`, read as it is sent (core/npy_file.h): nullopt when its data cannot
// be read in place (strings and Fortran order; read those with ReadTensorFile). Errors: those
// of core::NpyFile::Open and CheckSize, which do not name the file (NOT_FOUND,
// PERMISSION_DENIED, INTERNAL; INVALID_ARGUMENT for a malformed header or a size that does not
// match it); a read's error as the upload goes ends it.
absl::StatusOr<std::optional<TensorSource>> OpenNpySource(const std::string& path);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_TENSOR_SOURCE_H_
