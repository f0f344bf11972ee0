// File: core/npy_format.h
//
// NumPy's .npy format <-> core tensors.
//
// .npy (format versions 1.0, 2.0 and 3.0 read; 1.0 written, 2.0 when the header needs it):
//   reads every dtype NumPy has that tensorcompute has: b1, i1/i2/i4/i8, u1/u2/u4/u8, f2/f4/f8,
//   c8/c16, in either byte order (big-endian data is swapped), C or Fortran order (Fortran is
//   transposed to row-major); fixed-width strings 'S<n>' (bytes, trailing NULs stripped, as
//   NumPy does) and 'U<n>' (UTF-32, converted to UTF-8). Object arrays ('O', pickled) and
//   structured/void dtypes are refused with INVALID_ARGUMENT. NumPy has no bfloat16; use JSON.
//   Bool bytes other than 0 read as 1 (NumPy reads any nonzero byte as True).
//   Writes little-endian C order; strings as 'U<n>' when every element is valid UTF-8 without
//   NUL characters, otherwise as 'S<n>' (NumPy strips trailing NULs from 'S' on read).
//
//
// Errors: every parse error is INVALID_ARGUMENT naming what was wrong and what was expected.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_NPY_FORMAT_H_
#define TENSORCOMPUTE_CORE_NPY_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "core/tensor.h"

namespace tensorcompute::core {

absl::StatusOr<core::Tensor> ParseNpy(absl::string_view bytes);

// A .npy file read in pieces (a shard's rows of a large file, --preload --shard_index):
// NpyHeaderBytes reads the preamble (the file's first 12 bytes, or all of a shorter file)
// and says how many bytes the preamble and header take; ParseNpyLayout reads those bytes.
// The rows themselves are read in place (below). Errors as ParseNpy's.
struct NpyLayout {
  std::string descr;  // e.g. "<f4"
  DataType dtype = DataType::kUnspecified;
  Shape shape;
  bool fortran_order = false;  // and rank > 1: the file's rows are not contiguous
  int64_t data_offset = 0;     // where the data starts in the file
  int64_t data_bytes = 0;      // the data's bytes
  int64_t item_bytes = 0;      // bytes per element in the file
};
absl::StatusOr<int64_t> NpyHeaderBytes(absl::string_view preamble);
absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view head);
// OK when `data_bytes` (what follows the header) is what `layout`'s shape needs; else
// INVALID_ARGUMENT saying both, and whether the file looks truncated or has trailing bytes.
absl::Status CheckNpyDataBytes(const NpyLayout& layout, int64_t data_bytes);
// Rows read straight into their tensor (--preload of a large file, in one copy): whether
// `layout`'s rows can be (C order, fixed-size elements: not strings, not Fortran order); the
// tensor for `rows` rows of it, uninitialized, to read the file's bytes into (its bytes are
// the file's, element for element); and, once they are in, their conversion in place
// (big-endian data swapped, bool bytes other than 0 made 1), as ParseNpy converts them.
bool NpyRowsReadInPlace(const NpyLayout& layout);
absl::StatusOr<core::Tensor> AllocateNpyRows(const NpyLayout& layout, int64_t rows);
absl::Status ConvertNpyRowsInPlace(const NpyLayout& layout, absl::Span<uint8_t> data);
// Returns INVALID_ARGUMENT for bfloat16 (NumPy has no such dtype) and for a malformed `t`
// (core::ValidateTensor); every other dtype works.
absl::StatusOr<std::string> SerializeNpy(const core::TensorView& t);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_NPY_FORMAT_H_
