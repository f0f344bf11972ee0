// File: server/admission/token_auth.h
//
// Bearer tokens (server_options.h: auth_token_file, admin_token_file): the accepted tokens of a
// file, checked against a call's "authorization: Bearer <token>" in constant time. Reload()
// re-reads the file (main.cc does on SIGHUP). CallGate (call_gate.h) asks it on every call.
//
// Tokens are kept only as SHA-256 digests. A presented token is hashed and compared with every
// stored digest by CRYPTO_memcmp (constant time), without stopping at a match, so the time taken
// says nothing about how much of a token matched, nor which one.
//
// Thread-safety: Check and Reload may run concurrently from any threads.

#ifndef TENSORCOMPUTE_SERVER_TOKEN_AUTH_H_
#define TENSORCOMPUTE_SERVER_TOKEN_AUTH_H_

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

namespace tensorcompute::server {

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
  // starting with '#' ignored. INVALID_ARGUMENT, naming `option` and the path, when the file
  // cannot be read or has no token.
  static absl::StatusOr<std::vector<std::string>> ReadTokens(
      const std::string& path, absl::string_view option = "auth_token_file");

  // The token of an "authorization" value "Bearer <token>" (RFC 6750: the scheme in any case,
  // the token's surrounding whitespace trimmed); nullopt when it is not one. Check's reading, in
  // one place (client_identity.h names a client by its token).
  static std::optional<absl::string_view> BearerToken(absl::string_view authorization);

 private:
  using Digest = std::array<uint8_t, 32>;  // SHA-256
  explicit TokenAuth(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  // Replaced whole by Reload; Check copies the pointer under the lock and compares outside it.
  std::shared_ptr<const std::vector<Digest>> digests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_TOKEN_AUTH_H_
