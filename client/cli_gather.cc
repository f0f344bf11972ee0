#include "client/cli_gather.h"

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "client/cli_common.h"
#include "client/cli_tensors.h"
#include "core/tensor.h"

namespace tensorcompute::client {

void AddGatherFlags(CLI::App* app, GatherFlags* f, bool nd) {
  CLI::Option* params = app->add_option("--params", f->params, "params tensor, .npy or .json");
  app->add_option("--params-name", f->params_name,
                  "gather from this resident tensor (see put) instead of --params")
      ->excludes(params);
  CLI::Option* indices =
      app->add_option("--indices", f->indices, "indices tensor (int32/int64), .npy or .json");
  // gather's --keys stands in for --indices (CheckLookupKeyFlags asks for one of the two).
  if (nd) indices->required();
  if (!nd) app->add_option("--axis", f->axis, "axis to gather along (default: batch_dims)");
  app->add_option("--batch-dims", f->batch_dims, "leading batch dimensions")->capture_default_str();
  app->add_option("--out", f->out, "write the result to this .npy or .json file");
  if (!nd) AddLookupKeyFlags(app, &f->keyed, /*pooled=*/false);
}

int RunGather(Client& client, const GatherFlags& f, bool nd) {
  if (!f.keyed.keys.empty()) {
    if (f.axis.value_or(0) != 0 || f.batch_dims != 0) {
      return ReportUsageError(absl::InvalidArgumentError(
          "--keys gathers along axis 0 without --batch-dims (a key names a whole row)"));
    }
    std::optional<core::Tensor> keys = ReadFlagTensor("--keys", f.keyed.keys);
    if (!keys.has_value()) return kIoError;
    absl::StatusOr<KeyedLookupResult> result =
        client.GatherByKeys(f.params_name, keys->view(), LookupOptionsOf(f.keyed));
    if (!result.ok()) return ReportRpcError(result.status());
    return EmitKeyedResult(*result, f.out, f.keyed);
  }
  std::optional<core::Tensor> params;  // unset with --params-name
  if (f.params_name.empty()) {
    params = ReadFlagTensor("--params", f.params);
    if (!params.has_value()) return kIoError;
  }
  std::optional<core::Tensor> indices = ReadFlagTensor("--indices", f.indices);
  if (!indices.has_value()) return kIoError;
  absl::StatusOr<core::Tensor> result =
      !f.params_name.empty()
          ? (nd ? client.GatherNdByName(f.params_name, indices->view(), f.batch_dims)
                : client.GatherByName(f.params_name, indices->view(), f.axis, f.batch_dims))
          : (nd ? client.GatherNd(params->view(), indices->view(), f.batch_dims)
                : client.Gather(params->view(), indices->view(), f.axis, f.batch_dims));
  if (!result.ok()) return ReportRpcError(result.status());
  return EmitResult(result->view(), f.out);
}

}  // namespace tensorcompute::client
