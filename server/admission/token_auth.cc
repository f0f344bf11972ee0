#include "server/admission/token_auth.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "core/status_macros.h"
#include "server/admission/option_file.h"

namespace tensorcompute::server {

absl::StatusOr<std::vector<std::string>> TokenAuth::ReadTokens(const std::string& path,
                                                               absl::string_view option) {
  TC_ASSIGN_OR_RETURN(const std::string text, ReadOptionFile(option, path));
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, "=", path, ": no token in the file (one per line; # starts a comment)"));
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::Create(const std::string& path) {
  std::unique_ptr<TokenAuth> auth(new TokenAuth(path));
  TC_RETURN_IF_ERROR(auth->Reload().status());
  return auth;
}

absl::StatusOr<int> TokenAuth::Reload() {
  TC_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokens(path_));
  // Hashed outside the lock and swapped in whole: a Check never waits for the file or the
  // hashing, and sees the old set or the new one, never a mix.
  auto digests = std::make_shared<std::vector<Digest>>(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& token = tokens[i];
    SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
           (*digests)[i].data());
    // Wipes the plaintext before its memory is freed (a plain memset may be optimized away).
    OPENSSL_cleanse(token.data(), token.size());
  }
  absl::MutexLock lock(&mu_);
  digests_ = std::move(digests);
  return static_cast<int>(tokens.size());
}

std::optional<absl::string_view> TokenAuth::BearerToken(absl::string_view authorization) {
  // RFC 6750: the scheme is case-insensitive; one space, then the token.
  if (authorization.size() < 7 || !absl::EqualsIgnoreCase(authorization.substr(0, 7), "Bearer ")) {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(authorization.substr(7));
}

absl::Status TokenAuth::Check(std::optional<absl::string_view> authorization) const {
  constexpr absl::string_view kExpected =
      "expected the call metadata \"authorization: Bearer <token>\" with a token that this "
      "server accepts (--auth_token_file)";
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat("missing credentials: ", kExpected));
  }
  const std::optional<absl::string_view> bearer = BearerToken(*authorization);
  if (!bearer.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat("malformed authorization metadata (not a Bearer token): ", kExpected));
  }
  const absl::string_view token = *bearer;
  // Compared as fixed-size digests: the comparisons take the same time whatever was presented,
  // and say nothing of the stored tokens' lengths.
  Digest presented;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), presented.data());
  std::shared_ptr<const std::vector<Digest>> digests;
  {
    absl::MutexLock lock(&mu_);
    digests = digests_;
  }
  int matches = 0;
  for (const Digest& digest : *digests) {
    matches |= CRYPTO_memcmp(digest.data(), presented.data(), presented.size()) == 0;
  }
  if (matches == 0) {
    return absl::UnauthenticatedError(absl::StrCat("invalid token: ", kExpected));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
