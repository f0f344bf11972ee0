// File: proto/grpc_compression.h
//
// The gRPC message compressions this project speaks, by name: "none", "gzip" and "deflate"
// (the server's --grpc_compression, the clients' ClientOptions::compression and the CLI's
// --compression). The one list of them.

#ifndef TENSORCOMPUTE_PROTO_GRPC_COMPRESSION_H_
#define TENSORCOMPUTE_PROTO_GRPC_COMPRESSION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpc/compression.h"

namespace tensorcompute::proto {

// The names, in the order error messages give them: {"none", "gzip", "deflate"}.
const std::vector<std::string>& CompressionNames();

// The algorithm of `name`, or INVALID_ARGUMENT naming the three.
absl::StatusOr<grpc_compression_algorithm> ParseCompression(absl::string_view name);

// OK for GRPC_COMPRESS_NONE, _GZIP and _DEFLATE; INVALID_ARGUMENT for any other value.
absl::Status CheckCompression(grpc_compression_algorithm algorithm);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_GRPC_COMPRESSION_H_
