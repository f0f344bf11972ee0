#include "server/native/native_service.h"

#include <utility>

#include "proto/method_index.h"
#include "server/native/compute_rpcs.h"
#include "server/native/resident_rpcs.h"
#include "server/native/update_rows_call.h"

namespace tensorcompute::server {
namespace {

// The index of `method` in the service (proto/method_index.h).
int Method(absl::string_view method) {
  return proto::MethodIndex(v1::TensorCompute::service_full_name(), method);
}

}  // namespace

NativeService::NativeService(CallGate* gate, ComputeEntry* compute, ResidentEnv resident)
    : gate_(gate), compute_(compute), resident_(std::move(resident)) {
  // Read after admission (unary_reactor.h): registered as streamed, answered as unary. The
  // service owns the handlers it is given; `this` outlives them, as a service outlives its
  // server.
  MarkMethodStreamed(Method("Gather"),
                     new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                         [this](grpc::CallbackServerContext* context) {
                           return StartGather(gate_, compute_, context);
                         }));
  MarkMethodStreamed(Method("GatherNd"),
                     new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                         [this](grpc::CallbackServerContext* context) {
                           return StartGatherNd(gate_, compute_, context);
                         }));
  MarkMethodStreamed(Method("EmbeddingBag"),
                     new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                         [this](grpc::CallbackServerContext* context) {
                           return StartEmbeddingBag(gate_, compute_, context);
                         }));
  // Its messages parsed by the call, once their decoded cost is checked (put_tensor_call.h).
  MarkMethodRawCallback(
      Method("PutTensor"),
      new grpc::internal::CallbackClientStreamingHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context, grpc::ByteBuffer* reply) {
            return StartPutTensor(&resident_, context, reply);
          }));
  MarkMethodRawCallback(
      Method("UpdateRows"),
      new grpc::internal::CallbackClientStreamingHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context, grpc::ByteBuffer* reply) {
            return StartUpdateRows(&resident_, context, reply);
          }));
}

grpc::ServerUnaryReactor* NativeService::DeleteTensor(grpc::CallbackServerContext* context,
                                                      const v1::DeleteTensorRequest* request,
                                                      v1::DeleteTensorResponse* response) {
  return server::DeleteTensor(gate_, resident_.registry, context, *request, response);
}

grpc::ServerUnaryReactor* NativeService::ListTensors(grpc::CallbackServerContext* context,
                                                     const v1::ListTensorsRequest* /*request*/,
                                                     v1::ListTensorsResponse* response) {
  return server::ListTensors(gate_, resident_.registry, context, response);
}

}  // namespace tensorcompute::server
