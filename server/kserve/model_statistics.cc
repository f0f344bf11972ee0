#include "server/kserve/model_statistics.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "server/kserve/codec.h"

namespace tensorcompute::server::kserve {
namespace {

void Fill(const core::DurationTotal& from, inference::StatisticDuration* to) {
  to->set_count(static_cast<uint64_t>(from.count()));
  to->set_ns(static_cast<uint64_t>(std::max<int64_t>(0, from.ns())));
}

void Fill(absl::string_view name, const core::RequestStats& stats,
          inference::ModelStatistics* out) {
  out->set_name(std::string(name));
  out->set_version(std::string(kModelVersion));
  out->set_last_inference(static_cast<uint64_t>(std::max<int64_t>(0, stats.last_answer_ms())));
  out->set_inference_count(static_cast<uint64_t>(stats.success().count()));
  out->set_execution_count(static_cast<uint64_t>(stats.success().count()));
  inference::InferStatistics& s = *out->mutable_inference_stats();
  Fill(stats.success(), s.mutable_success());
  Fill(stats.failure(), s.mutable_fail());
  Fill(stats.queue_total(), s.mutable_queue());
  Fill(stats.decode_total(), s.mutable_compute_input());
  Fill(stats.compute_total(), s.mutable_compute_infer());
  Fill(stats.encode_total(), s.mutable_compute_output());
  s.mutable_cache_hit();
  s.mutable_cache_miss();
}

void FillTable(const core::ResidentTensor& table, inference::ModelStatistics* out) {
  static const core::RequestStats kNone;  // a table made outside the registry has none
  Fill(table.name, table.stats != nullptr ? *table.stats : kNone, out);
  inference::MemoryUsage& memory = *out->add_memory_usage();
  memory.set_type(table.device_copy.gpu >= 0 ? "GPU" : "CPU");
  memory.set_id(std::max(0, table.device_copy.gpu));
  memory.set_byte_size(static_cast<uint64_t>(table.bytes));
}

BuiltinModel BuiltinOf(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGatherNd:
      return BuiltinModel::kGatherNd;
    case ModelKind::kEmbeddingBag:
      return BuiltinModel::kEmbeddingBag;
    case ModelKind::kGather:
    case ModelKind::kTable:
      break;
  }
  return BuiltinModel::kGather;
}

}  // namespace

absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry,
    const Metrics& metrics) {
  inference::ModelStatisticsResponse response;
  if (name.empty()) {
    if (!version.empty() && version != kModelVersion) {
      return absl::NotFoundError(
          absl::StrCat("no model has version '", version, "': the only version is '1'"));
    }
    for (int m = 0; m < kNumBuiltinModels; ++m) {
      const auto model = static_cast<BuiltinModel>(m);
      Fill(BuiltinModelName(model), *metrics.model_stats(model), response.add_model_stats());
    }
    if (registry != nullptr) {
      auto tables = registry->List();
      std::sort(tables.begin(), tables.end(),
                [](const auto& a, const auto& b) { return a->name < b->name; });
      for (const auto& table : tables) FillTable(*table, response.add_model_stats());
    }
    return response;
  }
  TC_ASSIGN_OR_RETURN(const Model model, FindModel(name, version, registry));
  if (model.kind == ModelKind::kTable) {
    FillTable(*model.table, response.add_model_stats());
  } else {
    Fill(name, *metrics.model_stats(BuiltinOf(model.kind)), response.add_model_stats());
  }
  return response;
}

}  // namespace tensorcompute::server::kserve
