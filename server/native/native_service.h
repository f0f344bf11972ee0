// File: server/native/native_service.h
//
// The native gRPC service, tensorcompute.v1.TensorCompute, on gRPC's callback API. Each method
// is a few lines that start the call's reactor:
//
//   Gather, GatherNd, EmbeddingBag  compute_rpcs.h (read after admission: unary_reactor.h)
//   PutTensor                       put_tensor_call.h (messages parsed there: registered raw)
//   DeleteTensor, ListTensors       resident_rpcs.h
//
// Every call is admitted and answered through the CallGate (server/admission/call_gate.h); the
// compute calls go through the ComputeEntry (compute_entry.h).
//
// Thread-safety: gRPC calls the methods from its threads concurrently; the service holds only
// pointers to thread-safe objects.

#ifndef TENSORCOMPUTE_SERVER_TENSORCOMPUTE_SERVICE_H_
#define TENSORCOMPUTE_SERVER_TENSORCOMPUTE_SERVICE_H_

#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"
#include "server/native/put_tensor_call.h"

namespace tensorcompute::server {

class NativeService final : public v1::TensorCompute::CallbackService {
 public:
  // `gate` and `compute`, and what `resident` points to, are not owned and must outlive the
  // service. PutTensor charges its messages to resident.uploads (put_tensor_call.h).
  NativeService(CallGate* gate, ComputeEntry* compute, ResidentEnv resident);

  grpc::ServerUnaryReactor* DeleteTensor(grpc::CallbackServerContext* context,
                                         const v1::DeleteTensorRequest* request,
                                         v1::DeleteTensorResponse* response) override;
  grpc::ServerUnaryReactor* ListTensors(grpc::CallbackServerContext* context,
                                        const v1::ListTensorsRequest* request,
                                        v1::ListTensorsResponse* response) override;

 private:
  CallGate* const gate_;
  ComputeEntry* const compute_;
  const ResidentEnv resident_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_TENSORCOMPUTE_SERVICE_H_
