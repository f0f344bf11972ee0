#include "server/builder_options.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"

namespace tensorcompute::server {
namespace {

// gRPC's channel arguments and message limits are ints: a larger value (a 4 GiB message, a
// month in milliseconds) becomes INT_MAX rather than wrapping to a negative number.
int ClampToInt(int64_t value) {
  return static_cast<int>(std::clamp<int64_t>(value, 0, std::numeric_limits<int>::max()));
}

int Milliseconds(absl::Duration d) { return ClampToInt(absl::ToInt64Milliseconds(d)); }

class DropReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    // Matched by the name grpc++_reflection gives its plugin.
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
      return plugin->name() == "proto_server_reflection";
    });
  }
};

}  // namespace

void ApplyBuilderOptions(const ServerOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(ClampToInt(options.max_message_bytes));
  builder->SetMaxSendMessageSize(ClampToInt(options.max_message_bytes));
  // A fixed window: with BDP probing on, gRPC would grow it past the lookahead
  // (server_options.h).
  if (options.stream_window_bytes > 0) {
    builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                                ClampToInt(options.stream_window_bytes));
  }
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              ClampToInt(options.max_concurrent_streams));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(options.keepalive_time));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              Milliseconds(options.keepalive_timeout));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              Milliseconds(options.keepalive_min_client_interval));
  // Pings go out with no call in flight too: an idle connection is what a vanished peer leaves.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // The "two strikes" of server_options.h, set rather than left to gRPC's default.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  if (options.max_connection_idle > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                Milliseconds(options.max_connection_idle));
  }
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                              Milliseconds(options.handshake_timeout));
  if (options.max_connection_age > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                                Milliseconds(options.max_connection_age));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                Milliseconds(options.max_connection_age_grace));
  }
}

std::unique_ptr<grpc::ServerBuilderOption> WithoutReflection() {
  return std::make_unique<DropReflection>();
}

}  // namespace tensorcompute::server
