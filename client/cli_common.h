// File: client/cli_common.h
//
// What every subcommand of the `tensorcompute` CLI shares: the flags that say how to reach the
// server(s) (CommonFlags, put on each subcommand by AddCommonFlags), the Client made from them,
// the process's exit codes, and the two ways an error reaches stderr.
//
// Exit codes (docs/cli.md, "Common flags and exit codes", states them to users; the CLI tests
// assert them, so a code never changes meaning):
//   kOk        0  success
//   kUsage     2  a usage error: a flag CLI11 rejects or the CLI does (a bad value, flags that
//                 go badly together), a client that cannot be made from the flags (an unreadable
//                 token file, ...), a load test that cannot run as asked
//   kRpcError  3  a call failed, printed as "error: CODE: message"; or a health status other
//                 than SERVING
//   kIoError   4  a tensor file (or a report file) that cannot be read, parsed or written
//
// Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_COMMON_H_
#define TENSORCOMPUTE_CLIENT_CLI_COMMON_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "client/client.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tensorcompute::client {

// The CLI's exit codes (the file comment says what each means).
enum CliExitCode { kOk = 0, kUsage = 2, kRpcError = 3, kIoError = 4 };

// Prints "error: CODE: message" to stderr: a call's failure.
void PrintError(const absl::Status& status);

// PrintError(status), then returns kRpcError.
int ReportRpcError(const absl::Status& status);

// Prints "error: message" to stderr (no code: the message says what to fix), then returns kUsage.
int ReportUsageError(const absl::Status& status);

// The flags of every subcommand; each default is the one --help shows. ClientOptions
// (client/client.h) says what each setting does.
struct CommonFlags {
  std::string target = "localhost:50051";  // --target: host:port[,host:port...] or a gRPC URI
  double timeout_s = 30;                   // --timeout: deadline of each call
  int64_t max_message_bytes = int64_t{64} << 20;  // --max-message-bytes
  int retries = 0;                                // --retries: on UNAVAILABLE, with backoff
  int connections = 1;                            // --connections: per target
  std::string compression = "none";               // --compression: none, gzip or deflate
  bool tls = false;                               // --tls (implied by any --tls-* flag)
  std::string tls_ca, tls_cert, tls_key, tls_server_name;  // --tls-ca, ...: PEM files, a name
  std::string auth_token_file;   // --auth-token-file; empty: $TENSORCOMPUTE_TOKEN
  std::string admin_token_file;  // --admin-token-file; empty: $TENSORCOMPUTE_ADMIN_TOKEN
};

// Adds the CommonFlags' flags, with their help, to the subcommand `app`; parsing fills `*f`.
void AddCommonFlags(CLI::App* app, CommonFlags* f);

// The bearer token of every call: the first line of --auth-token-file that is not blank or a
// '#' comment (the server's file format), else $TENSORCOMPUTE_TOKEN, else "" (none).
// INVALID_ARGUMENT "--auth-token-file FILE: ..." when the file cannot be read or holds no token.
absl::StatusOr<std::string> AuthToken(const CommonFlags& f);

// A Client for f.target configured by every flag of `f`. INVALID_ARGUMENT, its message naming
// the flag, for a token file that AuthToken (or the admin token's twin) rejects or an unknown
// --compression; otherwise what Client::Create returns.
absl::StatusOr<std::unique_ptr<Client>> MakeClient(const CommonFlags& f);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_COMMON_H_
