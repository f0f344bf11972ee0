#include "server/kserve/http_endpoints.h"

#include "absl/status/statusor.h"

#include "server/kserve/codec.h"
#include "server/kserve/json.h"
#include "server/kserve/model_config.h"
#include "server/kserve/model_statistics.h"

namespace tensorcompute::server::kserve {
namespace {

HttpReply ReadyReply(bool ready) {
  HttpReply reply;
  reply.status = ready ? 200 : 503;
  reply.body = ready ? "{\"ready\":true}" : "{\"ready\":false}";
  return reply;
}

HttpReply JsonReply(std::string body) {
  HttpReply reply;
  reply.body = std::move(body);
  return reply;
}

}  // namespace

absl::Status HttpEndpoints::Admit(const Route& route,
                                  std::optional<absl::string_view> authorization,
                                  absl::Time start) {
  if (route.endpoint == Endpoint::kLive || route.endpoint == Endpoint::kReady) {
    return absl::OkStatus();
  }
  absl::Status admitted = gate_.Admit(authorization, /*needs_admin=*/false);
  if (!admitted.ok()) gate_.Answer(RpcOf(route.endpoint), start, admitted);
  return admitted;
}

HttpReply HttpEndpoints::Serve(const Route& route, absl::Time start) {
  const Rpc rpc = RpcOf(route.endpoint);
  HttpReply reply;
  absl::Status status;
  switch (route.endpoint) {
    case Endpoint::kLive:
      reply = JsonReply("{\"live\":true}");
      break;
    case Endpoint::kReady:
      reply = ReadyReply(ready_() && !gate_.draining());
      break;
    case Endpoint::kServerMetadata:
      reply = JsonReply(ServerMetadataJson(ServerMetadata()));
      break;
    case Endpoint::kModelMetadata: {
      absl::StatusOr<inference::ModelMetadataResponse> metadata =
          ModelMetadata(route.model, route.version, compute_.registry());
      if (metadata.ok()) {
        reply = JsonReply(ModelMetadataJson(*metadata));
      } else {
        status = metadata.status();
      }
      break;
    }
    case Endpoint::kModelReady: {
      absl::StatusOr<bool> ready = ModelReady(route.model, route.version, compute_.registry());
      if (ready.ok()) {
        reply = ReadyReply(*ready && ready_());
      } else {
        status = ready.status();
      }
      break;
    }
    case Endpoint::kModelConfig: {
      absl::StatusOr<inference::ModelConfigResponse> config =
          ModelConfig(route.model, route.version, compute_.registry(), compute_.batching());
      if (config.ok()) {
        reply = JsonReply(ModelConfigJson(config->config()));
      } else {
        status = config.status();
      }
      break;
    }
    case Endpoint::kModelStatistics: {
      absl::StatusOr<inference::ModelStatisticsResponse> stats =
          ModelStatistics(route.model, route.version, compute_.registry(), gate_.metrics());
      if (stats.ok()) {
        reply = JsonReply(ModelStatisticsJson(*stats));
      } else {
        status = stats.status();
      }
      break;
    }
    case Endpoint::kInfer:
    case Endpoint::kNone:
      status = absl::InternalError("not an endpoint that answers at once");
      break;
  }
  gate_.Answer(rpc, start, status);
  return status.ok() ? reply : StatusReply(status);
}

}  // namespace tensorcompute::server::kserve
