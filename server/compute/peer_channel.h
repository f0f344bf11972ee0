// File: server/compute/peer_channel.h
//
// The gRPC channel of one shard's target (--shard_peers entry), as the shard router
// (shard_router.h) sends its sub-calls on it: round-robin over what the target resolves to,
// client-side health checking, UNAVAILABLE retried on another replica, fast reconnects, and the
// credentials of the sub-calls (server/credentials.h: MakePeerChannelCredentials).
//
// Thread-safety: a pure function of its arguments.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_PEER_CHANNEL_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_PEER_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace tensorcompute::server {

struct PeerChannelOptions {
  // Plaintext when null; else TLS (or mTLS) as the server's options say.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name verified against the peers' certificates instead of the target's host
  // (--shard_peer_tls_server_name); empty: the target's host.
  std::string tls_server_name;
  // The largest sub-call answer accepted (the server's output cap).
  int64_t max_answer_bytes = int64_t{64} << 20;
};

std::shared_ptr<grpc::Channel> MakePeerChannel(const std::string& target,
                                               const PeerChannelOptions& options);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_PEER_CHANNEL_H_
