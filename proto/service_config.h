// File: proto/service_config.h
//
// The gRPC service config of every channel to tensorcompute servers: the clients' (C++, and so
// the CLI and the load tester) and a server's to its shard peers. One rule for both:
//   - round_robin over every address the target resolves to;
//   - client-side health checking of tensorcompute.v1.TensorCompute: a replica whose health is
//     not SERVING (draining, or its required GPU lost) gets no calls, from the moment it says so,
//     before it closes its connections;
//   - optionally, gRPC's retry of UNAVAILABLE on another replica (a shard router's sub-calls;
//     the clients retry in their own code, client.h's RetryOptions, which covers streams too).

#ifndef TENSORCOMPUTE_PROTO_SERVICE_CONFIG_H_
#define TENSORCOMPUTE_PROTO_SERVICE_CONFIG_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace tensorcompute::proto {

struct ChannelRetry {
  int max_attempts = 5;  // 2 to 5 (gRPC caps it at 5)
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Milliseconds(500);
  double backoff_multiplier = 2;
};

// The service config JSON (grpc::ChannelArguments::SetServiceConfigJSON). `health_checking`
// false is for the health checks' own channels: a server that is not SERVING must still be
// asked. `retry`: UNAVAILABLE retried as it says, on every method of TensorCompute.
std::string ServiceConfigJson(bool health_checking,
                              std::optional<ChannelRetry> retry = std::nullopt);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_SERVICE_CONFIG_H_
