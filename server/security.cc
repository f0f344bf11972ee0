#include "server/security.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

namespace tensorcompute::server {
namespace {

absl::StatusOr<std::string> ReadFile(const char* option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(option, "=", path, ": cannot read the file"));
  }
  return text.str();
}

// Each check parses the PEM with OpenSSL, as gRPC would at the first handshake.
template <typename T, typename Read, typename Free>
bool ParsesAs(const std::string& pem, Read read, Free free_fn, T** out = nullptr) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  T* value = bio == nullptr ? nullptr : read(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (out != nullptr) {
    *out = value;
  } else if (value != nullptr) {
    free_fn(value);
  }
  return value != nullptr;
}

absl::StatusOr<std::string> ReadCertificates(const char* option, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(option, path);
  if (pem.ok() && !ParsesAs<X509>(*pem, PEM_read_bio_X509, X509_free)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, "=", path, ": no PEM certificate (BEGIN CERTIFICATE) in the file"));
  }
  return pem;
}

class DropReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
      return plugin->name() == "proto_server_reflection";
    });
  }
};

class HealthOnly final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            "this port (health_listen) serves grpc.health.v1 only; call "
                            "TensorCompute on the server's main port"));
      }
      void OnDone() override { delete this; }
    };
    return new Reactor;
  }
};

}  // namespace

std::unique_ptr<grpc::CallbackGenericService> HealthOnlyFallback() {
  return std::make_unique<HealthOnly>();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both tls_cert and tls_key (a PEM certificate chain and its private key)");
  }
  if (options.tls_cert.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca (mTLS) needs TLS: set tls_cert and tls_key too");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::string> cert = ReadCertificates("tls_cert", options.tls_cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile("tls_key", options.tls_key);
  if (!key.ok()) return key.status();
  EVP_PKEY* pkey = nullptr;
  if (!ParsesAs<EVP_PKEY>(*key, PEM_read_bio_PrivateKey, EVP_PKEY_free, &pkey)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_key=", options.tls_key, ": no unencrypted PEM private key (BEGIN PRIVATE KEY)"));
  }
  X509* x509 = nullptr;
  ParsesAs<X509>(*cert, PEM_read_bio_X509, X509_free, &x509);
  const bool matches = X509_check_private_key(x509, pkey) == 1;
  X509_free(x509);
  EVP_PKEY_free(pkey);
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("tls_key=", options.tls_key,
                                                   " is not the private key of the certificate in ",
                                                   "tls_cert=", options.tls_cert));
  }
  grpc::SslServerCredentialsOptions ssl(
      options.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                    : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!options.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadCertificates("tls_client_ca", options.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  return grpc::SslServerCredentials(ssl);
}

std::unique_ptr<grpc::ServerBuilderOption> WithoutReflection() {
  return std::make_unique<DropReflection>();
}

absl::StatusOr<std::vector<std::string>> TokenAuth::ReadTokens(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile("auth_token_file", path);
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "auth_token_file=", path, ": no token in the file (one per line; # starts a comment)"));
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::Create(const std::string& path) {
  std::unique_ptr<TokenAuth> auth(new TokenAuth(path));
  absl::StatusOr<int> loaded = auth->Reload();
  if (!loaded.ok()) return loaded.status();
  return auth;
}

absl::StatusOr<int> TokenAuth::Reload() {
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokens(path_);
  if (!tokens.ok()) return tokens.status();
  auto digests = std::make_shared<std::vector<Digest>>(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    std::string& token = (*tokens)[i];
    SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
           (*digests)[i].data());
    OPENSSL_cleanse(token.data(), token.size());
  }
  absl::MutexLock lock(&mu_);
  digests_ = std::move(digests);
  return static_cast<int>(tokens->size());
}

absl::Status TokenAuth::Check(std::optional<absl::string_view> authorization) const {
  constexpr absl::string_view kExpected =
      "expected the call metadata \"authorization: Bearer <token>\" with a token that this "
      "server accepts (--auth_token_file)";
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat("missing credentials: ", kExpected));
  }
  absl::string_view token = *authorization;
  // RFC 6750: the scheme is case-insensitive; one space, then the token.
  if (token.size() < 7 || !absl::EqualsIgnoreCase(token.substr(0, 7), "Bearer ")) {
    return absl::UnauthenticatedError(
        absl::StrCat("malformed authorization metadata (not a Bearer token): ", kExpected));
  }
  token = absl::StripAsciiWhitespace(token.substr(7));
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
