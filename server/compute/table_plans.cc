#include "server/compute/table_plans.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "core/table_storage.h"

namespace tensorcompute::server {
namespace {

bool Compact(const core::ResidentTensor* table) { return table != nullptr && table->compact(); }
bool OnDisk(const core::ResidentTensor* table) {
  return table != nullptr && table->disk != nullptr;
}

// A table on disk stages the distinct rows a lookup reads (disk_lookup.h): whole rows of
// dimension 0, so a Gather of axis 0 without batch dimensions.
absl::Status CheckOnDiskServes(const core::ResidentTensor* table, const core::GatherPlan& plan) {
  if (!OnDisk(table) || (plan.batch == 1 && plan.indexed_axis == 0 && plan.depth == 1)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor '", table->name, "' is on disk: Gather is served on axis 0 without batch_dims"));
}

}  // namespace

absl::Status CheckSplitsByRows(const core::ResidentTensor* table, const core::GatherPlan& plan) {
  if (table == nullptr || !table->shard.has_value()) return absl::OkStatus();
  // A split by rows needs the first index component to pick rows of params (dimension 0),
  // with no batch dimensions in front of it.
  if (plan.batch == 1 && plan.indexed_axis == 0) return absl::OkStatus();
  if (table->shard->by_key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", table->name, "' is sharded by key (", table->shard->count,
        " shards): look it up by keys (Gather along axis 0, or EmbeddingBag), not by indices"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", table->name, "' is sharded by rows (", table->shard->count,
                   " shards): Gather is served on axis 0 and GatherNd without batch_dims only"));
}

absl::StatusOr<batching::TaskPlan> PlanGatherOn(const core::ResidentTensor* table,
                                                const core::TensorView& params,
                                                const core::TensorView& indices,
                                                std::optional<int64_t> axis, int64_t batch_dims,
                                                const core::PlanOptions& options) {
  // No CheckSplitsByRows here: PlanUnpooledGather takes only axis 0 and batch_dims 0, which
  // split by rows already.
  if (Compact(table)) {
    return core::PlanUnpooledGather(params, table->encoding(), indices, axis, batch_dims, options);
  }
  TC_ASSIGN_OR_RETURN(core::GatherPlan plan,
                      core::PlanGather(params, indices, axis, batch_dims, options));
  TC_RETURN_IF_ERROR(CheckSplitsByRows(table, plan));
  TC_RETURN_IF_ERROR(CheckOnDiskServes(table, plan));
  return plan;
}

absl::StatusOr<batching::TaskPlan> PlanGatherNdOn(const core::ResidentTensor* table,
                                                  const core::TensorView& params,
                                                  const core::TensorView& indices,
                                                  int64_t batch_dims,
                                                  const core::PlanOptions& options) {
  if (Compact(table)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", table->name, "' is stored ", core::TableStorageName(table->storage),
        ": GatherNd is not served on compact tables; use Gather (axis 0) or EmbeddingBag"));
  }
  if (OnDisk(table)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", table->name,
                     "' is on disk: GatherNd is not served on tables on disk; use Gather (axis "
                     "0) or EmbeddingBag"));
  }
  TC_ASSIGN_OR_RETURN(core::GatherPlan plan,
                      core::PlanGatherNd(params, indices, batch_dims, options));
  TC_RETURN_IF_ERROR(CheckSplitsByRows(table, plan));
  return plan;
}

absl::StatusOr<core::EmbeddingBagPlan> PlanEmbeddingBagOn(const core::ResidentTensor* table,
                                                          const core::TensorView& params,
                                                          const core::TensorView& indices,
                                                          const core::TensorView* offsets,
                                                          const core::TensorView* weights,
                                                          core::EmbeddingBagOptions options) {
  // An EmbeddingBag's indices always pick whole rows, so it always splits by rows: no check.
  if (table != nullptr) options.params_encoding = table->encoding();
  return core::PlanEmbeddingBag(params, indices, offsets, weights, options);
}

}  // namespace tensorcompute::server
