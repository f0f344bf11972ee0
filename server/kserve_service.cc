#include "server/kserve_service.h"

#include <utility>

#include "server/grpc_status.h"
#include "server/kserve_codec.h"

namespace tensorcompute::server {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// ModelInfer's index in the service, in the order of the .proto.
constexpr int kModelInferMethod = 5;

}  // namespace

KserveService::KserveService(ComputeService* native, std::function<bool()> ready)
    : native_(native), ready_(std::move(ready)) {
  // Read after admission, as the native Gather (compute_service.h).
  MarkMethodStreamed(
      kModelInferMethod,
      new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context) { return native_->StartInfer(context); }));
}

absl::Status KserveService::Admit(const grpc::CallbackServerContext& context) const {
  if (absl::Status auth = native_->Authorize(context, /*admin=*/false); !auth.ok()) return auth;
  if (native_->draining()) {
    return absl::UnavailableError("server is draining; retry on another replica");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KserveService::ServerLive(grpc::CallbackServerContext* context,
                                                    const inference::ServerLiveRequest*,
                                                    inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ServerReady(grpc::CallbackServerContext* context,
                                                     const inference::ServerReadyRequest*,
                                                     inference::ServerReadyResponse* response) {
  response->set_ready(ready_ ? ready_() : true);
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelReady(grpc::CallbackServerContext* context,
                                                    const inference::ModelReadyRequest* request,
                                                    inference::ModelReadyResponse* response) {
  if (absl::Status admitted = Admit(*context); !admitted.ok()) return Done(context, admitted);
  absl::StatusOr<bool> ready =
      kserve::ModelReady(request->name(), request->version(), native_->registry());
  if (!ready.ok()) return Done(context, ready.status());
  response->set_ready(*ready && (ready_ ? ready_() : true));
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  if (absl::Status admitted = Admit(*context); !admitted.ok()) return Done(context, admitted);
  *response = kserve::ServerMetadata();
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  if (absl::Status admitted = Admit(*context); !admitted.ok()) return Done(context, admitted);
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      kserve::ModelMetadata(request->name(), request->version(), native_->registry());
  if (!metadata.ok()) return Done(context, metadata.status());
  *response = *std::move(metadata);
  return Done(context, absl::OkStatus());
}

}  // namespace tensorcompute::server
