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

// The level to answer with so that a call is compressed with `algorithm` when its client
// accepts it, and never with what the client does not accept. gRPC's compression spec forbids
// answering with an algorithm the client left out of its grpc-accept-encoding, and clients break
// on it: grpc-go without its gzip package, grpc-java with deflate. Setting the algorithm itself
// (ServerContext::set_compression_algorithm) ignores that header, and the C++ API never shows
// it (the core takes it out of the metadata); a level is what the core resolves against it, per
// call: of the accepted algorithms ranked {gzip, deflate}, LOW takes the first and HIGH the last,
// and none is taken when the client accepts neither. So gzip is LOW and deflate HIGH; a client
// that accepts only the other one gets the other one. GRPC_COMPRESS_NONE is LEVEL_NONE.
grpc_compression_level CompressionLevelFor(grpc_compression_algorithm algorithm);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_GRPC_COMPRESSION_H_
