// File: server/security.h
//
// What locks tensorcompute-server down (server_options.h: tls_cert, tls_key, tls_client_ca,
// auth_token_file): the gRPC server credentials for TLS and mTLS, and the bearer tokens.
//
//   MakeServerCredentials(options)  insecure, TLS, or mTLS (client certificates required and
//                                   verified against tls_client_ca); the PEM files are read and
//                                   parsed here, so a bad file fails Start, not the handshake.
//   TokenAuth                       the accepted tokens of --auth_token_file, checked against a
//                                   call's "authorization: Bearer <token>" in constant time;
//                                   Reload() re-reads the file (main.cc does on SIGHUP).
//
// Tokens are kept only as SHA-256 digests. A presented token is hashed and compared with every
// stored digest by CRYPTO_memcmp (constant time), without stopping at a match, so the time taken
// says nothing about how much of a token matched, nor which one.
// Thread-safety: TokenAuth::Check and Reload may run concurrently from any threads.

#ifndef TENSORCOMPUTE_SERVER_SECURITY_H_
#define TENSORCOMPUTE_SERVER_SECURITY_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

#include "server/server_options.h"

namespace tensorcompute::server {

// InsecureServerCredentials when options.tls_cert and tls_key are empty, else TLS with that
// certificate chain and key, and with tls_client_ca mTLS. INVALID_ARGUMENT (naming the option
// and file) when only one of cert and key is set, tls_client_ca is set without them, a file
// cannot be read or holds no PEM certificate / private key, or the key does not match the
// certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

// A ServerBuilder option that drops gRPC's reflection plugin (which every ServerBuilder gets
// once grpc++_reflection is linked): for the health-only listener, and for the main server when
// tokens are required (reflection is gRPC's own service, which cannot check them).
std::unique_ptr<grpc::ServerBuilderOption> WithoutReflection();

// For the health-only listener: answers every method other than the health service's with
// UNIMPLEMENTED ("this port serves grpc.health.v1 only ..."). (It also gives that server the
// callback method that gRPC 1.51 requires of a server without completion queues.)
std::unique_ptr<grpc::CallbackGenericService> HealthOnlyFallback();

class TokenAuth {
 public:
  // Reads `path` (see ReadTokens). INVALID_ARGUMENT when that fails.
  static absl::StatusOr<std::unique_ptr<TokenAuth>> Create(const std::string& path);

  // Re-reads the file. On success the new tokens replace the old ones (calls checked after
  // this returns see only the new set) and their number is returned; on failure the old tokens
  // stay and the error is returned.
  absl::StatusOr<int> Reload();

  // OK when `authorization` (the call's "authorization" metadata; nullopt when it has none) is
  // "Bearer <token>" with an accepted token. UNAUTHENTICATED otherwise, with a message that
  // says what was expected and never repeats what was received.
  absl::Status Check(std::optional<absl::string_view> authorization) const;

  // The file's tokens: one per line, surrounding whitespace trimmed; blank lines and lines
  // starting with '#' ignored. INVALID_ARGUMENT when the file cannot be read or has no token.
  static absl::StatusOr<std::vector<std::string>> ReadTokens(const std::string& path);

 private:
  using Digest = std::array<uint8_t, 32>;  // SHA-256
  explicit TokenAuth(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  // Replaced whole by Reload; Check copies the pointer under the lock and compares outside it.
  std::shared_ptr<const std::vector<Digest>> digests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_SECURITY_H_
