// File: proto/grpc_status.h
//
// The one conversion between absl::Status (what core, batching, the server's logic and the
// client's API speak) and grpc::Status (what goes on the wire), both ways. Every RPC answer of
// the server goes through ToGrpcStatus; every gRPC status the server (a shard peer) or the
// client receives goes through FromGrpcStatus.

#ifndef TENSORCOMPUTE_PROTO_GRPC_STATUS_H_
#define TENSORCOMPUTE_PROTO_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tensorcompute::proto {

// Longest error message sent to a client; longer ones are cut and end in "...".
inline constexpr size_t kMaxErrorMessageBytes = 2048;

// Same code (the numbering of absl::StatusCode and grpc::StatusCode is the same), same message
// up to kMaxErrorMessageBytes. OK maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Same code, same message (whole); OK maps to OK. Error details are dropped.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_GRPC_STATUS_H_
