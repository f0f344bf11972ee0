// File: server/kserve/grpc_service.h
//
// `inference.GRPCInferenceService`, the Open Inference Protocol (KServe v2) over gRPC, served on
// the same port as tensorcompute.v1.TensorCompute so that tritonclient and KServe's SDK work
// unchanged (docs/kserve.md):
//
//   ModelInfer     a UnaryReactor (server/native/unary_reactor.h: read after admission, the same
//   budget,
//                  batcher, executors, errors and limits as the native Gather), decoded by
//                  codec.h. Its decoded cost is charged before parsing, as for Gather; BYTES
//                  inputs in raw_input_contents, one protobuf string each, become one core
//                  string per element, which is charged once parsed and before they are
//                  decoded (RESOURCE_EXHAUSTED beyond the whole budget, UNAVAILABLE without room).
//   ServerLive     live: true while the process serves at all. No token needed (a probe).
//   ServerReady    ready: the server's readiness (health SERVING: preloading done, not
//                  draining). No token needed.
//   ModelReady     NOT_FOUND for an unknown model or version; ready as kserve::ModelReady.
//   ServerMetadata, ModelMetadata   as codec.h.
//   ModelConfig    Triton's: as model_config.h.
//   ModelStatistics  Triton's: as model_statistics.h (an empty name: every model).
//
// Every RPC but ServerLive and ServerReady is admitted by the CallGate like the native service
// (UNAUTHENTICATED, or UNAVAILABLE while draining); every RPC is answered through it (counted
// and, when it fails, logged).
//
// Thread-safety: gRPC calls it from its threads; it reads only thread-safe state.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_GRPC_SERVICE_H_
#define TENSORCOMPUTE_SERVER_KSERVE_GRPC_SERVICE_H_

#include <functional>

#include "inference/grpc_predict_v2.grpc.pb.h"

#include "server/admission/call_gate.h"
#include "server/compute/compute_entry.h"

namespace tensorcompute::server::kserve {

class GrpcService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `gate` and `compute` are not owned and must outlive this service. `ready` says whether the
  // server is ready (ServerReady, ModelReady).
  GrpcService(CallGate* gate, ComputeEntry* compute, std::function<bool()> ready);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;

 private:
  // Counts `status` for `rpc` and finishes the call with it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, Rpc rpc, absl::Time start,
                                 const absl::Status& status);

  CallGate* const gate_;
  ComputeEntry* const compute_;
  const std::function<bool()> ready_;
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_GRPC_SERVICE_H_
