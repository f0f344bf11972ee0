#include "proto/service_config.h"

#include "absl/strings/str_cat.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

namespace tensorcompute::proto {
namespace {

// "0.02s": a JSON duration as gRPC's service config reads it.
std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d), "s"); }

}  // namespace

std::string ServiceConfigJson(bool health_checking, std::optional<ChannelRetry> retry) {
  const std::string service(v1::TensorCompute::service_full_name());
  std::string json = R"({"loadBalancingConfig": [{"round_robin": {}}])";
  if (health_checking) {
    absl::StrAppend(&json, R"(, "healthCheckConfig": {"serviceName": ")", service, R"("})");
  }
  if (retry.has_value()) {
    absl::StrAppend(&json, R"(, "methodConfig": [{"name": [{"service": ")", service,
                    R"("}], "retryPolicy": {"maxAttempts": )", retry->max_attempts,
                    R"(, "initialBackoff": ")", Seconds(retry->initial_backoff),
                    R"(", "maxBackoff": ")", Seconds(retry->max_backoff),
                    R"(", "backoffMultiplier": )", retry->backoff_multiplier,
                    R"(, "retryableStatusCodes": ["UNAVAILABLE"]}}])");
  }
  absl::StrAppend(&json, "}");
  return json;
}

}  // namespace tensorcompute::proto
