// File: server/kserve_service.h
//
// `inference.GRPCInferenceService`, the Open Inference Protocol (KServe v2) over gRPC, served on
// the same port as tensorcompute.v1.TensorCompute so that tritonclient and KServe's SDK work
// unchanged (docs/kserve.md). ModelInfer is the native service's own call (ComputeService::
// StartInfer): same admission, budget, batcher, executors, errors and limits. The other five
// RPCs answer from kserve_codec.h's model table:
//
//   ServerLive    live: true while the process serves at all. No token needed (a probe).
//   ServerReady   ready: the server's readiness (health SERVING: preloading done, not
//                 draining). No token needed.
//   ModelReady    NOT_FOUND for an unknown model or version; ready as kserve::ModelReady.
//   ServerMetadata, ModelMetadata   as kserve_codec.h.
//
// Every RPC but ServerLive and ServerReady checks the caller's token like the native service
// (UNAUTHENTICATED), and a draining server answers them UNAVAILABLE.
//
// Thread-safety: gRPC calls it from its threads; it reads only thread-safe state.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_SERVICE_H_
#define TENSORCOMPUTE_SERVER_KSERVE_SERVICE_H_

#include <functional>

#include "inference/grpc_predict_v2.grpc.pb.h"

#include "server/compute_service.h"

namespace tensorcompute::server {

class KserveService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `native` is not owned and must outlive this service. `ready` says whether the server is
  // ready (ServerReady).
  KserveService(ComputeService* native, std::function<bool()> ready);

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

 private:
  // The token and draining checks of every RPC but the two probes.
  absl::Status Admit(const grpc::CallbackServerContext& context) const;

  ComputeService* const native_;
  const std::function<bool()> ready_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_KSERVE_SERVICE_H_
