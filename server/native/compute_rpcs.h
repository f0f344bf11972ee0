// File: server/native/compute_rpcs.h
//
// The native compute calls, Gather, GatherNd and EmbeddingBag (tensorcompute.v1): a UnaryReactor
// (unary_reactor.h) that parses the request, takes params inline or from a resident tensor
// (params_name), views the tensors in place (proto/tensor_codec.h), plans (core/gather_plan.h,
// core/embedding_bag.h) and submits. An OK answer
// of a fixed-size dtype is written in place: the response's head serialized by hand
// (proto::ResponsePrefix) and the executor gathering straight into the buffer gRPC sends (no
// zero fill, no serialization copy). Strings and empty outputs go through the response message.
//
// Errors: INVALID_ARGUMENT for both params and params_name (or neither), NOT_FOUND for an
// unknown params_name, and the codec's and plan's own (core's texts, passed through).
//
// Thread-safety: as UnaryReactor.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_CALL_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_CALL_H_

#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"

namespace tensorcompute::server {

// A new call for a Gather, GatherNd or EmbeddingBag RPC, begun; it deletes itself when done. `gate`
// and `compute` are not owned and must outlive it.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGather(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context);
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGatherNd(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context);
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartEmbeddingBag(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_CALL_H_
