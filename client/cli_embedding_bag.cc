#include "client/cli_embedding_bag.h"

#include <cstdio>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"

#include "client/cli_tensors.h"
#include "core/embedding_bag.h"
#include "core/tensor.h"

namespace tensorcompute::client {

void AddEmbeddingBagFlags(CLI::App* app, EmbeddingBagFlags* f) {
  CLI::Option* params =
      app->add_option("--params", f->params, "params: a [rows, dim] float table, .npy or .json");
  app->add_option("--params-name", f->params_name,
                  "look up in this resident tensor (see put) instead of --params")
      ->excludes(params);
  app->add_option("--indices", f->indices,
                  "indices (int32/int64): rank 1 with --offsets, or rank 2 [bags, n] (fixed "
                  "bags) without; .npy or .json (or --keys)");
  app->add_option("--offsets", f->offsets,
                  "where each bag starts in rank-1 indices, .npy or .json");
  app->add_option("--per-sample-weights", f->per_sample_weights,
                  "one weight per index (float32 or the params' dtype), .npy or .json");
  app->add_option("--mode", f->mode, "how a bag is reduced: sum, mean, max or sqrtn")
      ->capture_default_str();
  app->add_flag("--include-last-offset", f->include_last_offset,
                "--offsets has one entry more than there are bags, the last being len(indices)");
  app->add_option("--padding-idx", f->padding_idx,
                  "a row in [-rows, rows) whose lookups add nothing and do not count");
  app->add_option("--out", f->out, "write the result to this .npy or .json file");
  AddLookupKeyFlags(app, &f->keyed, /*pooled=*/true);
}

int RunEmbeddingBag(Client& client, const EmbeddingBagFlags& f) {
  EmbeddingBagArgs args;
  bool known_mode = false;
  for (core::EmbeddingBagMode mode :
       {core::EmbeddingBagMode::kSum, core::EmbeddingBagMode::kMean, core::EmbeddingBagMode::kMax,
        core::EmbeddingBagMode::kSqrtn}) {
    if (absl::EqualsIgnoreCase(f.mode, core::EmbeddingBagModeName(mode))) {
      args.mode = mode;
      known_mode = true;
    }
  }
  if (!known_mode) {
    std::fprintf(stderr, "error: --mode %s: expected sum, mean, max or sqrtn\n", f.mode.c_str());
    return kUsage;
  }
  args.include_last_offset = f.include_last_offset;
  args.padding_idx = f.padding_idx;

  std::optional<core::Tensor> params;  // unset with --params-name
  if (f.params_name.empty()) {
    params = ReadFlagTensor("--params", f.params);
    if (!params.has_value()) return kIoError;
  }
  const bool by_keys = !f.keyed.keys.empty();
  std::optional<core::Tensor> indices =
      by_keys ? ReadFlagTensor("--keys", f.keyed.keys) : ReadFlagTensor("--indices", f.indices);
  if (!indices.has_value()) return kIoError;
  std::optional<core::Tensor> offsets, weights;
  std::optional<core::TensorView> offsets_view, weights_view;
  if (!f.offsets.empty()) {
    offsets = ReadFlagTensor("--offsets", f.offsets);
    if (!offsets.has_value()) return kIoError;
    offsets_view = offsets->view();
    args.offsets = &*offsets_view;
  }
  if (!f.per_sample_weights.empty()) {
    weights = ReadFlagTensor("--per-sample-weights", f.per_sample_weights);
    if (!weights.has_value()) return kIoError;
    weights_view = weights->view();
    args.per_sample_weights = &*weights_view;
  }

  if (by_keys) {
    absl::StatusOr<KeyedLookupResult> result =
        client.EmbeddingBagByKeys(f.params_name, indices->view(), args, LookupOptionsOf(f.keyed));
    if (!result.ok()) return ReportRpcError(result.status());
    return EmitKeyedResult(*result, f.out, f.keyed);
  }
  absl::StatusOr<core::Tensor> result =
      f.params_name.empty() ? client.EmbeddingBag(params->view(), indices->view(), args)
                            : client.EmbeddingBagByName(f.params_name, indices->view(), args);
  if (!result.ok()) return ReportRpcError(result.status());
  return EmitResult(result->view(), f.out);
}

}  // namespace tensorcompute::client
