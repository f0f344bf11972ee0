#include "server/kserve/model_config.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/dtype.h"
#include "core/keyed_rows.h"
#include "core/status_macros.h"
#include "core/table_storage.h"
#include "server/kserve/codec.h"

namespace tensorcompute::server::kserve {

inference::DataType TritonDataType(absl::string_view kserve_datatype) {
  static constexpr std::pair<absl::string_view, inference::DataType> kTypes[] = {
      {"BOOL", inference::TYPE_BOOL},     {"UINT8", inference::TYPE_UINT8},
      {"UINT16", inference::TYPE_UINT16}, {"UINT32", inference::TYPE_UINT32},
      {"UINT64", inference::TYPE_UINT64}, {"INT8", inference::TYPE_INT8},
      {"INT16", inference::TYPE_INT16},   {"INT32", inference::TYPE_INT32},
      {"INT64", inference::TYPE_INT64},   {"FP16", inference::TYPE_FP16},
      {"FP32", inference::TYPE_FP32},     {"FP64", inference::TYPE_FP64},
      {"BYTES", inference::TYPE_STRING},  {"BF16", inference::TYPE_BF16}};
  for (const auto& [name, type] : kTypes) {
    if (name == kserve_datatype) return type;
  }
  return inference::TYPE_INVALID;
}

namespace {

// A table's policy as the Python client and the CLI spell it ("error", "zero", "default").
std::string MissingPolicyName(core::MissingKeys missing) {
  switch (missing) {
    case core::MissingKeys::kZero:
      return "zero";
    case core::MissingKeys::kDefaultRow:
      return "default";
    case core::MissingKeys::kSkip:
      return "skip";
    case core::MissingKeys::kTable:
    case core::MissingKeys::kError:
      break;
  }
  return "error";
}

}  // namespace

absl::StatusOr<inference::ModelConfigResponse> ModelConfig(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry,
    const batching::BatcherOptions& batching) {
  TC_ASSIGN_OR_RETURN(const Model model, FindModel(name, version, registry));
  TC_ASSIGN_OR_RETURN(const inference::ModelMetadataResponse metadata,
                      ModelMetadata(name, version, registry));

  inference::ModelConfigResponse response;
  inference::ModelConfig& config = *response.mutable_config();
  config.set_name(std::string(name));
  config.set_platform(metadata.platform());
  config.set_backend("tensorcompute");
  config.set_max_batch_size(0);
  for (const auto& tensor : metadata.inputs()) {
    inference::ModelInput& input = *config.add_input();
    input.set_name(tensor.name());
    input.set_data_type(TritonDataType(tensor.datatype()));
    for (int64_t d : tensor.shape()) input.add_dims(d);
    // A keyed table takes indices or keys, so neither is required by itself.
    input.set_optional(tensor.name() == "offsets" || tensor.name() == "per_sample_weights" ||
                       tensor.name() == "keys" ||
                       (tensor.name() == "indices" && model.kind == ModelKind::kTable &&
                        model.table->keyed != nullptr));
  }
  for (const auto& tensor : metadata.outputs()) {
    inference::ModelOutput& output = *config.add_output();
    output.set_name(tensor.name());
    output.set_data_type(TritonDataType(tensor.datatype()));
    for (int64_t d : tensor.shape()) output.add_dims(d);
  }
  inference::ModelDynamicBatching& dynamic = *config.mutable_dynamic_batching();
  dynamic.set_max_queue_delay_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(batching.max_queue_delay)));
  if (batching.max_batch_size > 0) {
    dynamic.add_preferred_batch_size(static_cast<int32_t>(batching.max_batch_size));
  }
  if (model.kind == ModelKind::kTable) {
    const core::ResidentTensor& table = *model.table;
    auto& parameters = *config.mutable_parameters();
    parameters["op"].set_string_value("gather");
    parameters["storage"].set_string_value(std::string(core::TableStorageName(table.storage)));
    parameters["dtype"].set_string_value(std::string(core::DataTypeName(table.logical_dtype())));
    parameters["shape"].set_string_value(
        absl::StrCat("[", absl::StrJoin(table.logical_shape(), ","), "]"));
    if (table.keyed != nullptr) {
      // Looked up by keys too: the policy for a key it lacks (the Python client's and the
      // CLI's spelling), whether it has a default row, its capacity and the keys held now.
      const core::KeyedRows& keyed = *table.keyed;
      parameters["keyed"].set_string_value("true");
      parameters["missing"].set_string_value(MissingPolicyName(keyed.missing()));
      parameters["default_row"].set_string_value(keyed.has_default_row() ? "true" : "false");
      parameters["capacity"].set_string_value(absl::StrCat(keyed.capacity()));
      parameters["keys"].set_string_value(absl::StrCat(keyed.size()));
    }
    if (table.shard.has_value()) {
      parameters["shard"].set_string_value(
          absl::StrCat(table.shard->index, "/", table.shard->count));
    }
  }
  return response;
}

}  // namespace tensorcompute::server::kserve
