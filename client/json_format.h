// File: client/json_format.h
//
// A small JSON form of tensors <-> core tensors.
//
// JSON: {"dtype": "float32", "shape": [2, 2], "values": [1, 2, 3, 4]}
//   dtype   a core dtype name (core::DataTypeFromName: bool, int8..int64, uint8..uint64,
//           float16, bfloat16, float32, float64, complex64, complex128, string).
//   shape   optional; without it the shape is that of `values` (nested lists give it, a bare
//           value is a scalar).
//   values  flat (row-major) or nested lists (at most 64 deep); numbers for integer and float
//           dtypes (float16 and bfloat16 rounded to nearest even; integers must be integral,
//           as 3, 3.0 and 3e0 are, and in range), true/false (or 0/1) for bool, [real, imag]
//           pairs for complex, and for floats also the strings "nan", "inf", "-inf"; strings
//           are JSON strings (UTF-8) or {"base64": "..."} for bytes that are not UTF-8.
//   Other keys are refused.
//   Written: flat values; floats printed so that they read back to the same bits (shortest
//   round-trip form; -0.0 as such; NaN as "nan", which keeps NaN but not its payload or sign);
//   non-UTF-8 strings as {"base64": ...}.
//
//
// Errors: every parse error is INVALID_ARGUMENT naming what was wrong and what was expected.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CLIENT_JSON_FORMAT_H_
#define TENSORCOMPUTE_CLIENT_JSON_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "core/tensor.h"

namespace tensorcompute::client {

absl::StatusOr<core::Tensor> ParseJson(absl::string_view text);
// One line, no trailing newline. REQUIRES: `t` is well-formed (core::ValidateTensor).
std::string SerializeJson(const core::TensorView& t);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_JSON_FORMAT_H_
