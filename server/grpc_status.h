// File: server/grpc_status.h
//
// The one conversion from absl::Status (what core and batching speak) to grpc::Status (what
// goes on the wire). Every RPC answer goes through it.

#ifndef TENSORCOMPUTE_SERVER_GRPC_STATUS_H_
#define TENSORCOMPUTE_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tensorcompute::server {

// Longest error message sent to a client; longer ones are cut and end in "...".
inline constexpr size_t kMaxErrorMessageBytes = 2048;

// Same code (the numbering of absl::StatusCode and grpc::StatusCode is the same), same message
// up to kMaxErrorMessageBytes. OK maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_GRPC_STATUS_H_
