#include "server/admission/peer_token.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include <openssl/crypto.h>

#include "core/status_macros.h"
#include "server/admission/token_auth.h"

namespace tensorcompute::server {

absl::StatusOr<std::unique_ptr<PeerToken>> PeerToken::Create(const std::string& path) {
  std::unique_ptr<PeerToken> token(new PeerToken(path));
  TC_RETURN_IF_ERROR(token->Reload());
  return token;
}

absl::Status PeerToken::Reload() {
  TC_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                      TokenAuth::ReadTokens(path_, "shard_peer_token_file"));
  std::string authorization = absl::StrCat("Bearer ", tokens.front());
  // The file may be the peers' whole token list: the others are wiped before their memory is
  // freed, as TokenAuth does (a plain memset may be optimized away).
  for (std::string& token : tokens) OPENSSL_cleanse(token.data(), token.size());
  {
    absl::MutexLock lock(&mu_);
    authorization_.swap(authorization);
  }
  // Now the previous token.
  OPENSSL_cleanse(authorization.data(), authorization.size());
  return absl::OkStatus();
}

std::string PeerToken::Authorization() const {
  absl::MutexLock lock(&mu_);
  return authorization_;
}

}  // namespace tensorcompute::server
