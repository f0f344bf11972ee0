#include "server/compute/peer_channel.h"

#include <algorithm>
#include <limits>

#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"

#include "proto/service_config.h"

namespace tensorcompute::server {

std::shared_ptr<grpc::Channel> MakePeerChannel(const std::string& target,
                                               const PeerChannelOptions& options) {
  grpc::ChannelArguments args;
  // Round-robin over the shard's replicas, health-checked, UNAVAILABLE retried on another.
  args.SetServiceConfigJSON(
      proto::ServiceConfigJson(/*health_checking=*/true, proto::ChannelRetry{}));
  // The answer's tensor bytes plus 1 MiB for the rest of the message; gRPC takes an int.
  args.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(
      options.max_answer_bytes + (int64_t{1} << 20), std::numeric_limits<int>::max())));
  // Reconnect within 0.1 to 1 s (gRPC's defaults: 1 to 120 s), so that a shard back from a
  // restart serves again within about a second (docs/deploy.md, "Sharded tables").
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC stops retrying a call once it has sent more than this (default 256 KiB); 16 MiB
  // keeps sub-calls of up to about 2M int64 indices retryable.
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, 16 << 20);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  return grpc::CreateCustomChannel(
      target,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
}

}  // namespace tensorcompute::server
