// File: server/admission/option_file.h
//
// Reads a file that an option names (a PEM file, a token file), for Start to fail early with a
// message naming the option: "tls_cert=PATH: cannot read the file".
//
// Thread-safety: a pure function of the file system.

#ifndef TENSORCOMPUTE_SERVER_OPTION_FILE_H_
#define TENSORCOMPUTE_SERVER_OPTION_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensorcompute::server {

// The whole file at `path`, or INVALID_ARGUMENT "<option>=<path>: cannot read the file".
absl::StatusOr<std::string> ReadOptionFile(absl::string_view option, const std::string& path);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_OPTION_FILE_H_
