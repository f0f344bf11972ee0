// File: server/native/resident_rpcs.h
//
// The resident-tensor RPCs of tensorcompute.v1 that need no reactor of their own: DeleteTensor
// and ListTensors over core::TensorRegistry, and the TensorInfo that they and PutTensor
// (put_tensor_call.h) answer with. Admission and answers go through CallGate like every call:
// DeleteTensor needs an admin token when admin tokens are configured, ListTensors an ordinary
// one when tokens are required; both are refused while draining.
//
// Thread-safety: the registry is thread-safe; these are called from gRPC's threads.

#ifndef TENSORCOMPUTE_SERVER_RESIDENT_RPCS_H_
#define TENSORCOMPUTE_SERVER_RESIDENT_RPCS_H_

#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/tensor_registry.h"
#include "server/admission/call_gate.h"

namespace tensorcompute::server {

// `entry` as the wire's TensorInfo.
void ToInfo(const core::ResidentTensor& entry, v1::TensorInfo* info);

// DeleteTensor: the removed entry's info, or NOT_FOUND; UNIMPLEMENTED without a registry.
grpc::ServerUnaryReactor* DeleteTensor(CallGate* gate, core::TensorRegistry* registry,
                                       grpc::CallbackServerContext* context,
                                       const v1::DeleteTensorRequest& request,
                                       v1::DeleteTensorResponse* response);

// ListTensors: every resident tensor's info (none without a registry).
grpc::ServerUnaryReactor* ListTensors(CallGate* gate, const core::TensorRegistry* registry,
                                      grpc::CallbackServerContext* context,
                                      v1::ListTensorsResponse* response);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_RESIDENT_RPCS_H_
