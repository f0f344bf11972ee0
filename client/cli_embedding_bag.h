// File: client/cli_embedding_bag.h
//
// The `embedding-bag` subcommand of the `tensorcompute` CLI: pooled lookups
// (torch.nn.functional.embedding_bag, plus TensorFlow's "sqrtn"; tensorcompute.proto states
// every rule), with its arguments taken as `gather` takes them:
//
//   tensorcompute embedding-bag --target HOST:PORT (--params FILE | --params-name NAME)
//       --indices FILE [--offsets FILE] [--per-sample-weights FILE] [--mode sum|mean|max|sqrtn]
//       [--include-last-offset] [--padding-idx N] [--out FILE]
//   tensorcompute embedding-bag --target HOST:PORT --params-name NAME --keys FILE
//       [--missing POLICY] [--found-out FILE] [the flags above but --padding-idx]
//       (a keyed table, cli_keys.h; --missing skip leaves a missing key out of its bag)
//
// Tensors are .npy or .json files (client/tensor_io.h). Rank-1 indices come with --offsets;
// rank-2 indices [bags, n] without are fixed bags of n. The result, [bags, dim] in the params'
// dtype, is printed or written as gather's is (EmitResult, client/cli_tensors.h).
// cli_main.cc checks the flags (CheckComputeFlags, CheckLookupKeyFlags) and makes the Client.
// Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_EMBEDDING_BAG_H_
#define TENSORCOMPUTE_CLIENT_CLI_EMBEDDING_BAG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "client/cli_keys.h"
#include "client/client.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tensorcompute::client {

struct EmbeddingBagFlags {
  std::string params, params_name, indices, out;
  std::string offsets, per_sample_weights;  // files; empty: none
  std::string mode = "sum";                 // sum, mean, max or sqrtn, in any case
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx;
  LookupKeyFlags keyed;  // --keys, --missing, --found-out
};

// Adds embedding-bag's flags, with their help, to the subcommand `app`; parsing fills `*f`.
void AddEmbeddingBagFlags(CLI::App* app, EmbeddingBagFlags* f);

// Reads the files that `f` names (kIoError when one cannot be read), makes the call, and prints
// or writes the result. Returns kOk, kUsage for a mode that core::EmbeddingBagModeName does not
// name (case aside), kRpcError after printing the call's error ("error: CODE: message"), or
// kIoError. With --keys, EmbeddingBagByKeys, and the found mask written to --found-out.
// REQUIRES: CheckComputeFlags(f.params, f.params_name, f.out) == kOk and
// CheckLookupKeyFlags(f.indices, f.params_name, f.keyed) == kOk.
int RunEmbeddingBag(Client& client, const EmbeddingBagFlags& f);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_EMBEDDING_BAG_H_
