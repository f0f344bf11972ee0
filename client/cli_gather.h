// File: client/cli_gather.h
//
// The `gather` and `gather-nd` subcommands of the `tensorcompute` CLI: tf.gather and
// tf.gather_nd (tensorcompute.proto states every rule) on the server, from tensor files or a
// resident table:
//
//   tensorcompute gather    --target HOST:PORT (--params FILE | --params-name NAME)
//       --indices FILE [--axis N] [--batch-dims N] [--out FILE]
//   tensorcompute gather    --target HOST:PORT --params-name NAME --keys FILE
//       [--missing POLICY] [--found-out FILE] [--out FILE]   (a keyed table, cli_keys.h)
//   tensorcompute gather-nd --target HOST:PORT (--params FILE | --params-name NAME)
//       --indices FILE [--batch-dims N] [--out FILE]
//
// Tensors are .npy or .json files (client/tensor_io.h). The result is printed as one line of
// JSON or written to --out (EmitResult, client/cli_tensors.h).
// cli_main.cc checks the flags (CheckComputeFlags, and for gather CheckLookupKeyFlags) and
// makes the Client.
// Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_GATHER_H_
#define TENSORCOMPUTE_CLIENT_CLI_GATHER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "client/cli_keys.h"
#include "client/client.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tensorcompute::client {

struct GatherFlags {
  std::string params, params_name, indices, out;
  std::optional<int64_t> axis;  // gather only; unset: batch_dims
  int64_t batch_dims = 0;
  LookupKeyFlags keyed;  // gather only: --keys, --missing, --found-out
};

// Adds gather's flags (`nd`: gather-nd's, which have no --axis), with their help, to the
// subcommand `app`; parsing fills `*f`.
void AddGatherFlags(CLI::App* app, GatherFlags* f, bool nd);

// Reads the files that `f` names (kIoError when one cannot be read), makes the call (GatherNd
// when `nd`), and prints or writes the result. Returns kOk, kRpcError after printing the call's
// error ("error: CODE: message"), or kIoError.
// With --keys (gather only), GatherByKeys, and the found mask written to --found-out; kUsage,
// after "error: message", for --keys with --axis other than 0 or with --batch-dims.
// REQUIRES: CheckComputeFlags(f.params, f.params_name, f.out) == kOk and, for gather,
// CheckLookupKeyFlags(f.indices, f.params_name, f.keyed) == kOk.
int RunGather(Client& client, const GatherFlags& f, bool nd);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_GATHER_H_
