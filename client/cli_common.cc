#include "client/cli_common.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

#include "proto/grpc_compression.h"

namespace tensorcompute::client {
namespace {

// A token: the first line of `file` that is not blank or a '#' comment, else $`env`, else none.
// `flag` names the file's flag in errors.
absl::StatusOr<std::string> ReadToken(const char* flag, const std::string& file, const char* env) {
  if (file.empty()) {
    const char* value = std::getenv(env);
    return std::string(value == nullptr ? "" : value);
  }
  std::ifstream in(file);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: cannot read the file", flag, file));
  }
  for (std::string line; std::getline(in, line);) {
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (!token.empty() && token[0] != '#') return std::string(token);
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s %s: no token in the file", flag, file));
}

}  // namespace

void PrintError(const absl::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
}

int ReportRpcError(const absl::Status& status) {
  PrintError(status);
  return kRpcError;
}

int ReportUsageError(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return kUsage;
}

void AddCommonFlags(CLI::App* app, CommonFlags* f) {
  app->add_option("--target", f->target,
                  "server(s): host:port, host:port,host:port, or a gRPC URI (dns:///name:port)")
      ->capture_default_str();
  app->add_option("--timeout", f->timeout_s, "deadline of each call, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-message-bytes", f->max_message_bytes,
                  "largest message sent or received (match the server's)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--retries", f->retries, "retries on UNAVAILABLE, with backoff")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--connections", f->connections, "connections per target")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--compression", f->compression,
                  "compress the messages sent: none, gzip or deflate (gRPC's per-message "
                  "compression; the server decompresses them)")
      ->capture_default_str()
      ->check(CLI::IsMember(proto::CompressionNames()));
  app->add_flag("--tls", f->tls, "TLS (implied by any --tls-* option)");
  app->add_option("--tls-ca", f->tls_ca,
                  "PEM CA certificate(s) to verify the server (default: "
                  "the system's roots)");
  app->add_option("--tls-cert", f->tls_cert, "mTLS: PEM client certificate chain");
  app->add_option("--tls-key", f->tls_key, "mTLS: PEM private key of --tls-cert");
  app->add_option("--tls-server-name", f->tls_server_name,
                  "name to verify the server's certificate against (default: the target's host)");
  app->add_option("--auth-token-file", f->auth_token_file,
                  "file whose first line is the bearer token sent on every call (default: "
                  "$TENSORCOMPUTE_TOKEN, if set)");
  app->add_option(
      "--admin-token-file", f->admin_token_file,
      "file whose first line is the bearer token that put, update and delete send instead "
      "(default: $TENSORCOMPUTE_ADMIN_TOKEN, if set)");
}

absl::StatusOr<std::string> AuthToken(const CommonFlags& f) {
  return ReadToken("--auth-token-file", f.auth_token_file, "TENSORCOMPUTE_TOKEN");
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient(const CommonFlags& f) {
  ClientOptions options;
  absl::StatusOr<std::string> token = AuthToken(f);
  if (!token.ok()) return token.status();
  options.auth_token = *std::move(token);
  absl::StatusOr<std::string> admin_token =
      ReadToken("--admin-token-file", f.admin_token_file, "TENSORCOMPUTE_ADMIN_TOKEN");
  if (!admin_token.ok()) return admin_token.status();
  options.admin_token = *std::move(admin_token);
  // Any TLS file implies --tls.
  options.tls.enabled = f.tls || !f.tls_ca.empty() || !f.tls_cert.empty() || !f.tls_key.empty() ||
                        !f.tls_server_name.empty();
  options.tls.ca_file = f.tls_ca;
  options.tls.cert_file = f.tls_cert;
  options.tls.key_file = f.tls_key;
  options.tls.server_name = f.tls_server_name;
  options.target = f.target;
  options.timeout = absl::Seconds(f.timeout_s);
  options.max_message_bytes = f.max_message_bytes;
  options.connections_per_target = f.connections;
  options.retry.max_attempts = 1 + f.retries;  // --retries counts the attempts after the first
  absl::StatusOr<grpc_compression_algorithm> compression = ParseCompression(f.compression);
  if (!compression.ok()) return compression.status();
  options.compression = *compression;
  return Client::Create(options);
}

}  // namespace tensorcompute::client
