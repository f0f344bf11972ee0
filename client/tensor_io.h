// File: client/tensor_io.h
//
// Tensors in files, for the CLI and the tests: NumPy's .npy format (npy_format.h) and a small
// JSON form (json_format.h), chosen by the file name's extension.
//
// Errors: every parse error is INVALID_ARGUMENT naming what was wrong and what was expected
// (e.g. `values[3]: 300 does not fit uint8`); file errors are NOT_FOUND / PERMISSION_DENIED /
// INTERNAL with the path and strerror. Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CLIENT_TENSOR_IO_H_
#define TENSORCOMPUTE_CLIENT_TENSOR_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "client/json_format.h"
#include "core/npy_format.h"
#include "core/tensor.h"

namespace tensorcompute::client {

enum class TensorFormat { kNpy, kJson };

// The format that a file name's extension names: ".npy" or ".json" (case-insensitive).
// Returns INVALID_ARGUMENT for any other name.
absl::StatusOr<TensorFormat> FormatFromPath(absl::string_view path);

// Reads / writes a whole file in the format its extension names. Parse errors keep their code
// and get the path as a prefix; an unknown extension, a malformed `t` and a bfloat16 tensor
// written as .npy are INVALID_ARGUMENT.
absl::StatusOr<core::Tensor> ReadTensorFile(const std::string& path);
absl::Status WriteTensorFile(const core::TensorView& t, const std::string& path);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_TENSOR_IO_H_
