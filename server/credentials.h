// File: server/credentials.h
//
// The gRPC server credentials of the main port (server_options.h: tls_cert, tls_key,
// tls_client_ca): plaintext, TLS, or mTLS; and the channel credentials of the sub-calls to the
// shard peers (shard_peer_tls, shard_peer_tls_ca, with tls_cert and tls_key as the client
// certificate). The PEM files are read and parsed here, with OpenSSL as gRPC would at the first
// handshake, so a bad file fails Start, not the handshake.
//
// Thread-safety: a pure function of the options and the files they name.

#ifndef TENSORCOMPUTE_SERVER_CREDENTIALS_H_
#define TENSORCOMPUTE_SERVER_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

#include "server/server_options.h"

namespace tensorcompute::server {

// InsecureServerCredentials when options.tls_cert and tls_key are empty, else TLS with that
// certificate chain and key, and with tls_client_ca mTLS (client certificates required and
// verified against it). INVALID_ARGUMENT (naming the option and file) when only one of cert
// and key is set, tls_client_ca is set without them, a file cannot be read or holds no PEM
// certificate / private key, or the key does not match the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

// InsecureChannelCredentials without options.shard_peer_tls, else TLS verified against
// shard_peer_tls_ca (empty: the system's roots), presenting tls_cert and tls_key as the client
// certificate when they are set (for peers that require one). INVALID_ARGUMENT (naming the
// option and file) when a file cannot be read or holds no PEM certificate / private key. Call
// it after MakeServerCredentials, which checks that tls_key is tls_cert's.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakePeerChannelCredentials(
    const ServerOptions& options);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_CREDENTIALS_H_
