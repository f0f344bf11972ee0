// File: client/cli_keys.h
//
// The keyed-table flags of the `tensorcompute` CLI (issue 42; client/client.h, "Keyed tables"):
//
//   put NAME --input ROWS --keys KEYS [--missing error|zero|default] [--default-row FILE]
//       [--capacity N]
//   gather --params-name NAME --keys KEYS [--missing table|error|zero|default]
//       [--found-out FILE] [--out FILE]
//   embedding-bag --params-name NAME --keys KEYS [--missing table|error|zero|default|skip]
//       [--found-out FILE] [--offsets FILE] [--mode M] ... [--out FILE]
//
// KEYS is an int64 tensor file (.npy or .json, client/tensor_io.h): for put, [rows], row i's
// key the i-th; for a lookup, in place of --indices and shaped as it would be. --missing takes
// core::ParseMissingKeys's spellings (the server says which a call accepts); --default-row is a
// file holding the row that "default" gives. --found-out writes the found mask (bool, the
// keys' shape) to a .npy or .json file; the output goes to --out or stdout as without keys.
//
// Every function returns the process exit code (CliExitCode, client/cli_common.h).
// Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_KEYS_H_
#define TENSORCOMPUTE_CLIENT_CLI_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "client/client.h"
#include "core/keyed_rows.h"
#include "core/tensor.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tensorcompute::client {

// put's keyed flags.
struct PutKeyFlags {
  std::string keys;                          // --keys FILE; empty: a table without keys
  std::string default_row;                   // --default-row FILE; empty: none
  std::optional<core::MissingKeys> missing;  // --missing
  int64_t capacity = 0;                      // --capacity; 0: the rows put
};

// Adds put's keyed flags, with their help, to `app`; parsing fills `*f` (an unknown --missing
// spelling is a CLI11 usage error).
void AddPutKeyFlags(CLI::App* app, PutKeyFlags* f);

// The tensors put's keyed flags name, held while the upload runs (PutOptions views them).
struct PutKeyTensors {
  std::optional<core::Tensor> keys, default_row;
};

// Reads the files `f` names into `*tensors` and sets the keyed fields of `*options` to them.
// Returns kOk; kUsage, after "error: message", for --missing, --default-row or --capacity
// without --keys; kIoError, after "error: FLAG PATH: message", for a file that cannot be read.
int ReadPutKeys(const PutKeyFlags& f, PutKeyTensors* tensors, PutOptions* options);

// The keyed flags of a lookup (gather, embedding-bag).
struct LookupKeyFlags {
  std::string keys;                          // --keys FILE; empty: the lookup sends --indices
  std::string found_out;                     // --found-out FILE; empty: no found mask asked
  std::optional<core::MissingKeys> missing;  // --missing; unset: the table's policy
};

// Adds --keys, --missing and --found-out, with their help, to `app`; parsing fills `*f`.
// `pooled`: embedding-bag's help (it names "skip").
void AddLookupKeyFlags(CLI::App* app, LookupKeyFlags* f, bool pooled);

// The checks made before connecting: exactly one of --indices (`indices`) and --keys; --keys
// only with --params-name (`params_name`); --missing and --found-out only with --keys;
// --found-out a .npy or .json file name. kOk, or kUsage after "error: message".
int CheckLookupKeyFlags(const std::string& indices, const std::string& params_name,
                        const LookupKeyFlags& f);

// The call's KeyedLookupOptions: f.missing (or kTable), and return_found with --found-out.
KeyedLookupOptions LookupOptionsOf(const LookupKeyFlags& f);

// Prints or writes result.output as EmitResult does (`out`), then writes result.found to
// f.found_out when set. kOk, or kIoError after "error: FLAG PATH: message".
int EmitKeyedResult(const KeyedLookupResult& result, const std::string& out,
                    const LookupKeyFlags& f);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_KEYS_H_
