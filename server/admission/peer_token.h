// File: server/admission/peer_token.h
//
// The bearer token this server presents to its shard peers (server_options.h:
// shard_peer_token_file): the first token of a file in auth_token_file's format, so that the
// peers' own token file can serve. Reload() re-reads it (main.cc does on SIGHUP, with the
// other token files). The shard router (server/compute/shard_router.h) asks it on every
// sub-call.
//
// The token is never logged, and no message of this class repeats it.
//
// Thread-safety: Authorization and Reload may run concurrently from any threads.

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_PEER_TOKEN_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_PEER_TOKEN_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tensorcompute::server {

class PeerToken {
 public:
  // Reads `path` (TokenAuth::ReadTokens; errors name shard_peer_token_file).
  static absl::StatusOr<std::unique_ptr<PeerToken>> Create(const std::string& path);

  // Re-reads the file. On success the sub-calls sent after it returns carry the file's first
  // token; on failure the previous token stays and the error is returned.
  absl::Status Reload();

  // The metadata value of the "authorization" key: "Bearer <token>".
  std::string Authorization() const;

 private:
  explicit PeerToken(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_PEER_TOKEN_H_
