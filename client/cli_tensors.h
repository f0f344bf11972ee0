// File: client/cli_tensors.h
//
// The resident-tensor subcommands of the `tensorcompute` CLI (cli_main.cc parses the flags and
// makes the Client; these run the calls and print the outcome):
//
//   put NAME --input FILE [--device D] [--replace] [--chunk-bytes N] [--all-targets]
//   delete NAME [--all-targets]
//   list [--json]
//
// Output: put and delete print one line per call describing the tensor stored or deleted;
// list prints a table (NAME DTYPE SHAPE BYTES DEVICE VERSION CREATED, plus a TARGET column in
// front when the client has several targets) or, with --json, one JSON array of objects with
// those fields (lower-case; "created" in RFC 3339, "shape" an array, "target" always there).
// Each replica holds its own copies: list asks every target.
//
// Every function returns the process exit code (CliExitCode) and prints errors to stderr as
// "error: CODE: message". Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_
#define TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

#include "client/client.h"

namespace tensorcompute::client {

// The CLI's exit codes (cli_main.cc's file comment).
enum CliExitCode { kOk = 0, kUsage = 2, kRpcError = 3, kIoError = 4 };

// Prints "error: CODE: message" to stderr.
void PrintError(const absl::Status& status);

struct PutFlags {
  std::string name;
  std::string input;  // a .npy or .json tensor file (client/tensor_io.h)
  PutOptions options;
};

// Reads f.input (kIoError when it cannot) and puts it; kRpcError on a call error.
int RunPut(Client& client, const PutFlags& f);

// Deletes `name` from the first target, or every target with `all_targets`.
int RunDelete(Client& client, const std::string& name, bool all_targets);

// Lists every target's resident tensors; kRpcError if any target fails (the others are still
// listed).
int RunList(Client& client, bool json);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_
