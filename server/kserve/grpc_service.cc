#include "server/kserve/grpc_service.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"

#include "proto/grpc_status.h"
#include "proto/method_index.h"
#include "server/kserve/codec.h"
#include "server/kserve/model_config.h"
#include "server/kserve/model_statistics.h"
#include "server/native/unary_reactor.h"

namespace tensorcompute::server::kserve {
namespace {

// One ModelInfer call: decoded by the codec, computed like a native Gather.
class InferCall final : public UnaryReactor {
 public:
  InferCall(CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context)
      : UnaryReactor(gate, compute, context, Rpc::kModelInfer) {}

 private:
  bool Parse(grpc::ByteBuffer* message) override {
    return grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(message, &request_)
        .ok();
  }

  const google::protobuf::Descriptor& RequestType() const override {
    return *inference::ModelInferRequest::descriptor();
  }

  void Run() override {
    if (const int64_t raw_strings = BytesInputsConversion(request_); raw_strings > 0) {
      if (absl::Status reserved = ReserveMore(raw_strings, "BYTES inputs in raw_input_contents");
          !reserved.ok()) {
        return Answer(reserved);
      }
    }
    // A lookup by keys' slots and found mask, charged before PrepareInfer makes them.
    if (const KeyedLookupCost keyed = KeyedLookupBytes(request_); keyed.bytes > 0) {
      if (absl::Status reserved =
              ReserveMore(keyed.bytes, absl::StrCat("the slots of ", keyed.keys, " keys"));
          !reserved.ok()) {
        return Answer(reserved);
      }
    }
    const ComputeEntry& compute = this->compute();
    if (absl::Status prepared =
            PrepareInfer(request_, compute.registry(), compute.plan_options(),
                         compute.embedding_bag_options(), &job_, compute.key_pool());
        !prepared.ok()) {
      return Answer(prepared);
    }
    ComputeRequest request;
    FillComputeRequest(&job_, &request);
    request.make_output = [this] { return PrepareInferOutput(&job_, &response_); };
    Submit(std::move(request));
  }

  grpc::Status WriteReply(grpc::ByteBuffer* reply) override {
    CompleteInferResponse(request_, &job_, &response_);
    // Serialized here, and the response freed, so that the answer is held once
    // (server/native/unary_reactor.h).
    bool own_buffer = false;
    grpc::Status serialized = grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(
        response_, reply, &own_buffer);
    response_ = inference::ModelInferResponse();
    return serialized;
  }

  inference::ModelInferRequest request_;
  InferJob job_;  // the decoded request: what the task's views point into
  inference::ModelInferResponse response_;
};

}  // namespace

GrpcService::GrpcService(CallGate* gate, ComputeEntry* compute, std::function<bool()> ready)
    : gate_(gate), compute_(compute), ready_(std::move(ready)) {
  // Read after admission (server/native/unary_reactor.h), as the native Gather.
  MarkMethodStreamed(
      proto::MethodIndex(inference::GRPCInferenceService::service_full_name(), "ModelInfer"),
      new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context) {
            auto* call = new InferCall(gate_, compute_, context);
            call->Begin();
            return call;
          }));
}

grpc::ServerUnaryReactor* GrpcService::Done(grpc::CallbackServerContext* context, Rpc rpc,
                                            absl::Time start, const absl::Status& status) {
  gate_->Answer(rpc, start, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(proto::ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcService::ServerLive(grpc::CallbackServerContext* context,
                                                  const inference::ServerLiveRequest*,
                                                  inference::ServerLiveResponse* response) {
  const absl::Time start = gate_->Arrive();
  response->set_live(true);
  return Done(context, Rpc::kServerLive, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* GrpcService::ServerReady(grpc::CallbackServerContext* context,
                                                   const inference::ServerReadyRequest*,
                                                   inference::ServerReadyResponse* response) {
  const absl::Time start = gate_->Arrive();
  response->set_ready(ready_ ? ready_() : true);
  return Done(context, Rpc::kServerReady, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* GrpcService::ModelReady(grpc::CallbackServerContext* context,
                                                  const inference::ModelReadyRequest* request,
                                                  inference::ModelReadyResponse* response) {
  const absl::Time start = gate_->Arrive();
  absl::Status status = gate_->Admit(*context, /*needs_admin=*/false);
  if (status.ok()) {
    absl::StatusOr<bool> ready =
        kserve::ModelReady(request->name(), request->version(), compute_->registry());
    if (ready.ok()) {
      response->set_ready(*ready && (ready_ ? ready_() : true));
    } else {
      status = ready.status();
    }
  }
  return Done(context, Rpc::kModelReady, start, status);
}

grpc::ServerUnaryReactor* GrpcService::ServerMetadata(grpc::CallbackServerContext* context,
                                                      const inference::ServerMetadataRequest*,
                                                      inference::ServerMetadataResponse* response) {
  const absl::Time start = gate_->Arrive();
  absl::Status status = gate_->Admit(*context, /*needs_admin=*/false);
  if (status.ok()) *response = kserve::ServerMetadata();
  return Done(context, Rpc::kServerMetadata, start, status);
}

grpc::ServerUnaryReactor* GrpcService::ModelMetadata(grpc::CallbackServerContext* context,
                                                     const inference::ModelMetadataRequest* request,
                                                     inference::ModelMetadataResponse* response) {
  const absl::Time start = gate_->Arrive();
  absl::Status status = gate_->Admit(*context, /*needs_admin=*/false);
  if (status.ok()) {
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        kserve::ModelMetadata(request->name(), request->version(), compute_->registry());
    if (metadata.ok()) {
      *response = *std::move(metadata);
    } else {
      status = metadata.status();
    }
  }
  return Done(context, Rpc::kModelMetadata, start, status);
}

grpc::ServerUnaryReactor* GrpcService::ModelConfig(grpc::CallbackServerContext* context,
                                                   const inference::ModelConfigRequest* request,
                                                   inference::ModelConfigResponse* response) {
  const absl::Time start = gate_->Arrive();
  absl::Status status = gate_->Admit(*context, /*needs_admin=*/false);
  if (status.ok()) {
    absl::StatusOr<inference::ModelConfigResponse> config = kserve::ModelConfig(
        request->name(), request->version(), compute_->registry(), compute_->batching());
    if (config.ok()) {
      *response = *std::move(config);
    } else {
      status = config.status();
    }
  }
  return Done(context, Rpc::kModelConfig, start, status);
}

grpc::ServerUnaryReactor* GrpcService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  const absl::Time start = gate_->Arrive();
  absl::Status status = gate_->Admit(*context, /*needs_admin=*/false);
  if (status.ok()) {
    absl::StatusOr<inference::ModelStatisticsResponse> stats = kserve::ModelStatistics(
        request->name(), request->version(), compute_->registry(), gate_->metrics());
    if (stats.ok()) {
      *response = *std::move(stats);
    } else {
      status = stats.status();
    }
  }
  return Done(context, Rpc::kModelStatistics, start, status);
}

}  // namespace tensorcompute::server::kserve
