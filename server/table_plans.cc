#include "server/table_plans.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "core/table_storage.h"

namespace tensorcompute::server {
namespace {

bool Compact(const core::ResidentTensor* table) { return table != nullptr && table->compact(); }

// A plan on a sharded table must split by rows: a Gather of axis 0 or a GatherNd without batch
// dimensions (shard_router.h).
absl::Status CheckSplittable(const core::ResidentTensor* table, const core::GatherPlan& plan) {
  if (table == nullptr || !table->shard.has_value()) return absl::OkStatus();
  if (plan.batch == 1 && plan.indexed_axis == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", table->name, "' is sharded by rows (", table->shard->count,
                   " shards): Gather is served on axis 0 and GatherNd without batch_dims only"));
}

}  // namespace

absl::StatusOr<batching::TaskPlan> PlanGatherOn(const core::ResidentTensor* table,
                                                const core::TensorView& params,
                                                const core::TensorView& indices,
                                                std::optional<int64_t> axis, int64_t batch_dims,
                                                const core::PlanOptions& options) {
  if (Compact(table)) {
    return core::PlanUnpooledGather(params, table->encoding(), indices, axis, batch_dims, options);
  }
  absl::StatusOr<core::GatherPlan> plan =
      core::PlanGather(params, indices, axis, batch_dims, options);
  if (!plan.ok()) return plan.status();
  if (absl::Status splittable = CheckSplittable(table, *plan); !splittable.ok()) return splittable;
  return *std::move(plan);
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
  absl::StatusOr<core::GatherPlan> plan = core::PlanGatherNd(params, indices, batch_dims, options);
  if (!plan.ok()) return plan.status();
  if (absl::Status splittable = CheckSplittable(table, *plan); !splittable.ok()) return splittable;
  return *std::move(plan);
}

absl::StatusOr<core::EmbeddingBagPlan> PlanEmbeddingBagOn(const core::ResidentTensor* table,
                                                          const core::TensorView& params,
                                                          const core::TensorView& indices,
                                                          const core::TensorView* offsets,
                                                          const core::TensorView* weights,
                                                          core::EmbeddingBagOptions options) {
  if (table != nullptr) options.params_encoding = table->encoding();
  return core::PlanEmbeddingBag(params, indices, offsets, weights, options);
}

}  // namespace tensorcompute::server
