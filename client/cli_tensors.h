// File: client/cli_tensors.h
//
// The tensor plumbing that the computing subcommands of the `tensorcompute` CLI share (gather,
// gather-nd, embedding-bag: the checks of --params/--params-name and --out, reading the tensor
// file a flag names, printing or writing the result), and the resident-tensor subcommands
// (cli_main.cc parses the flags and makes the Client; these run the calls and print the
// outcome):
//
//   put NAME --input FILE [--device D] [--replace] [--chunk-bytes N] [--all-targets]
//       [--keys FILE [--missing POLICY] [--default-row FILE] [--capacity N]]
//       (a C-order .npy of fixed-size elements is read as it is sent, so the CLI's memory stays
//       small whatever its size; other files are read whole; on a terminal stderr shows a
//       progress bar; --keys makes a keyed table, client/cli_keys.h)
//   put NAME --input FILE --shards N --targets T0,T1,... [--device D] [--replace] ...
//       (a table split by row ranges, core/shard_spec.h: shard i's rows uploaded to target i,
//       to each of its replicas when the entry lists several, "a:p|b:p")
//   update NAME --indices FILE --values FILE [--chunk-bytes N]
//       (rows of a resident table replaced while it is served, Client::UpdateRows: a C-order
//       .npy of values is read as it is sent; a progress bar on a terminal, as put's)
//   delete NAME [--all-targets]
//   list [--json]
//
// Output: a computed tensor is printed to stdout as one line of JSON (client/json_format.h) or,
// with --out, written to that .npy or .json file and nothing is printed. put and delete print
// one line per call describing the tensor stored or deleted; update prints
// "updated NAME: R rows in M messages, sequence S" (S: what a lookup's min_sequence takes);
// list prints a table (NAME DTYPE SHAPE STORAGE BYTES DEVICE VERSION CREATED SHARD SEQUENCE
// KEYS, plus a TARGET column in front when the client has several targets; SHARD is "I/N" for
// shard I of N by row ranges, "I/N:key" for one of a table sharded by key, or "-", KEYS
// "held/capacity" for a keyed table or "-") or, with --json, one JSON array of objects with
// those fields (lower-case; "created" in RFC 3339, "shape" an array, "target" always there,
// "shard" null or {index, count, total_rows, by_key}, "keyed" null or {keys, capacity,
// missing (core::MissingKeysName's), has_default_row}).
// Each replica holds its own copies: list asks every target.
//
// Every function returns the process exit code (CliExitCode, client/cli_common.h) and prints a
// call's error to stderr as "error: CODE: message". Thread-safety: single-threaded use, as in a
// CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_
#define TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "client/cli_common.h"
#include "client/cli_keys.h"
#include "client/client.h"
#include "core/tensor.h"

namespace tensorcompute::client {

// The flag checks of a computing subcommand, made before connecting: exactly one of `params`
// (--params FILE) and `params_name` (--params-name NAME), and `out` empty or a .npy or .json
// file name. Returns kOk, or prints the error and returns kUsage.
int CheckComputeFlags(const std::string& params, const std::string& params_name,
                      const std::string& out);

// Reads the tensor file `path` that `flag` ("--indices", ...) names: the tensor, or nullopt
// after printing "error: FLAG PATH: message" (the caller returns kIoError).
std::optional<core::Tensor> ReadFlagTensor(const char* flag, const std::string& path);

// Prints `result` as one line of JSON when `out` is empty, else writes it to `out`. Returns
// kOk, or kIoError after printing "error: --out PATH: message".
int EmitResult(const core::TensorView& result, const std::string& out);

struct PutFlags {
  std::string name;
  std::string input;  // a .npy or .json tensor file (client/tensor_io.h)
  PutOptions options;
  PutKeyFlags keyed;    // --keys, --missing, --default-row, --capacity (client/cli_keys.h)
  int32_t shards = 0;   // > 0: upload as that many row-range shards to `targets`
  std::string targets;  // one target per shard, comma-separated; '|' joins replicas
  // Whether --timeout was given. Without it an upload's deadline is the client's timeout plus
  // 1 s per 10 MB of the tensor (PutDeadline), so that a large file is not cut off at 30 s.
  bool timeout_given = false;
};

// The deadline of an upload of `bytes` (see PutFlags::timeout_given), `client_timeout` being
// the client's own.
absl::Duration PutDeadline(absl::Duration client_timeout, int64_t bytes, bool timeout_given);

// Reads f.input and the keyed flags' files (kIoError when one cannot be read; kUsage for a
// keyed flag without --keys) and puts it; kRpcError on a call error (the client's own checks
// of the keys included).
int RunPut(Client& client, const PutFlags& f);

// Makes a client for one target (the CLI's other flags as given).
using ClientFactory =
    std::function<absl::StatusOr<std::unique_ptr<Client>>(const std::string& target)>;

// put --shards: reads f.input, splits its rows into f.shards shards and uploads shard i to
// every replica of target i, printing one line per upload. With --keys (a keyed table) the
// split is by key: shard i gets the rows whose key k has KeyShard(k, f.shards) == i
// (core/key_split.h; the whole input is read into memory first), each shard's capacity
// --capacity, or its own keys. kUsage for a --targets that does not list f.shards entries, a
// scalar, a DT_STRING tensor, or keys that are not int64 [rows]; kIoError; kRpcError at the
// first failed upload (those done stay).
int RunPutSharded(const PutFlags& f, const ClientFactory& connect);

struct UpdateFlags {
  std::string name;
  std::string indices;  // int32/int64 rank 1, .npy or .json
  std::string values;   // [len(indices), row shape...] in the table's dtype, .npy or .json
  // A keyed table instead: the keys whose rows --values holds, and keys to delete (int64 rank
  // 1 each, .npy or .json); either may be given alone.
  std::string keys;
  std::string delete_keys;
  UpdateOptions options;
  bool timeout_given = false;  // as PutFlags::timeout_given (PutDeadline)
};

// Reads f.indices (or f.keys and f.delete_keys) and f.values (kIoError when one cannot be),
// checks that they go together (kUsage: CheckUpdateRows's message; exactly one of --indices and
// --keys/--delete-keys; --values with --indices or --keys), and updates the rows on the first
// target; kRpcError on a call error.
int RunUpdate(Client& client, const UpdateFlags& f);

// Deletes `name` from the first target, or every target with `all_targets`.
int RunDelete(Client& client, const std::string& name, bool all_targets);

// Lists every target's resident tensors; kRpcError if any target fails (the others are still
// listed).
int RunList(Client& client, bool json);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_TENSORS_H_
