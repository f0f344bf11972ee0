#include "server/credentials.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "core/status_macros.h"
#include "server/admission/option_file.h"

namespace tensorcompute::server {
namespace {

// Each check parses the PEM with OpenSSL, as gRPC would at the first handshake. With `out`, the
// caller owns what was parsed; without it, it is freed here.
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
  absl::StatusOr<std::string> pem = ReadOptionFile(option, path);
  if (pem.ok() && !ParsesAs<X509>(*pem, PEM_read_bio_X509, X509_free)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, "=", path, ": no PEM certificate (BEGIN CERTIFICATE) in the file"));
  }
  return pem;
}

}  // namespace

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
  TC_ASSIGN_OR_RETURN(std::string cert, ReadCertificates("tls_cert", options.tls_cert));
  TC_ASSIGN_OR_RETURN(std::string key, ReadOptionFile("tls_key", options.tls_key));
  EVP_PKEY* pkey = nullptr;
  if (!ParsesAs<EVP_PKEY>(key, PEM_read_bio_PrivateKey, EVP_PKEY_free, &pkey)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_key=", options.tls_key, ": no unencrypted PEM private key (BEGIN PRIVATE KEY)"));
  }
  // Cannot fail: ReadCertificates has parsed the same text.
  X509* x509 = nullptr;
  ParsesAs<X509>(cert, PEM_read_bio_X509, X509_free, &x509);
  // A key that does not match its certificate would otherwise fail every handshake, not Start.
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
    TC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                        ReadCertificates("tls_client_ca", options.tls_client_ca));
  }
  ssl.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakePeerChannelCredentials(
    const ServerOptions& options) {
  if (!options.shard_peer_tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  // Empty pem_root_certs: gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, else its own).
  if (!options.shard_peer_tls_ca.empty()) {
    TC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                        ReadCertificates("shard_peer_tls_ca", options.shard_peer_tls_ca));
  }
  // The server's own certificate, not a flag of its own: a shard's peers are servers like it,
  // and an operator who gives them mTLS has given each one a certificate already.
  if (!options.tls_cert.empty()) {
    TC_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadCertificates("tls_cert", options.tls_cert));
    TC_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadOptionFile("tls_key", options.tls_key));
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace tensorcompute::server
