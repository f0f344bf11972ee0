// File: server/compute/table_plans.h
//
// The plan of a request whose params may be a resident table, for every front end (the native
// gRPC calls, KServe over gRPC and HTTP): one place decides how a table's storage
// (core/table_storage.h) changes what a request means.
//
//   - params inline, or a table stored AS_IS: core's planners as they are.
//   - a compact table (FLOAT16, INT8_ROWWISE, INT8_ROWWISE_PREQUANTIZED): EmbeddingBag reads
//     it through its encoding (returning float32); Gather of axis 0 becomes
//     core::PlanUnpooledGather (float32 rows, dequantized exactly); GatherNd is
//     INVALID_ARGUMENT ("tensor 'NAME' is stored INT8_ROWWISE: GatherNd is not served on
//     compact tables; use Gather (axis 0) or EmbeddingBag").
//   - a shard of a table (core/shard_spec.h; `params` its plan_view()): planned on the whole
//     table and then split by rows (shard_router.h), so a Gather of another axis than 0 and
//     a GatherNd with batch_dims are INVALID_ARGUMENT ("tensor 'NAME' is sharded by rows (3
//     shards): Gather is served on axis 0 and GatherNd without batch_dims only"). A keyed
//     table sharded by key is planned on its own rows: it serves lookups by keys only
//     (shard_router.h), and another axis is "tensor 'NAME' is sharded by key (3 shards): look
//     it up by keys (Gather along axis 0, or EmbeddingBag), not by indices".
//   - a table on disk (core/disk_rows.h; `params` its plan_view()): planned on its whole rows,
//     then made again on the rows it reads (disk_lookup.h), so a Gather of another axis than 0
//     or with batch_dims is INVALID_ARGUMENT ("tensor 'NAME' is on disk: Gather is served on
//     axis 0 without batch_dims"), and so is a GatherNd ("... is on disk: GatherNd is not
//     served on tables on disk; use Gather (axis 0) or EmbeddingBag"). A compact table on disk
//     follows both rules.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_SERVER_TABLE_PLANS_H_
#define TENSORCOMPUTE_SERVER_TABLE_PLANS_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

#include "core/batching/task.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"

namespace tensorcompute::server {

// The one rule of which gathers a sharded table serves: those that split by rows, a Gather of
// axis 0 and a GatherNd without batch dimensions. OK for inline params and for a table that is
// not sharded; else INVALID_ARGUMENT (the message above). The planners below apply it, and the
// shard router (shard_router.h) checks every plan it is given with it.
absl::Status CheckSplitsByRows(const core::ResidentTensor* table, const core::GatherPlan& plan);

// `table` is the resident tensor that `params` views (its plan_view()), or null for inline
// params.
absl::StatusOr<batching::TaskPlan> PlanGatherOn(const core::ResidentTensor* table,
                                                const core::TensorView& params,
                                                const core::TensorView& indices,
                                                std::optional<int64_t> axis, int64_t batch_dims,
                                                const core::PlanOptions& options);

absl::StatusOr<batching::TaskPlan> PlanGatherNdOn(const core::ResidentTensor* table,
                                                  const core::TensorView& params,
                                                  const core::TensorView& indices,
                                                  int64_t batch_dims,
                                                  const core::PlanOptions& options);

// `options.params_encoding` is set from the table.
absl::StatusOr<core::EmbeddingBagPlan> PlanEmbeddingBagOn(const core::ResidentTensor* table,
                                                          const core::TensorView& params,
                                                          const core::TensorView& indices,
                                                          const core::TensorView* offsets,
                                                          const core::TensorView* weights,
                                                          core::EmbeddingBagOptions options);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_TABLE_PLANS_H_
