// File: server/kserve/model_statistics.h
//
// Triton's ModelStatistics (gRPC) and GET /v2/models[/{name}[/versions/{v}]]/stats (HTTP):
// each model's counts and cumulative times, read from the same counters as the Prometheus
// histograms (core::RequestStats: a resident table's own, or Metrics' built-in models'), so the
// two views never disagree. Field by field (Triton's InferStatistics):
//
//   inference_count, execution_count   requests answered OK (each request is one execution:
//                                      requests batched together still compute separately)
//   success / fail                     answered OK / with an error: arrival to answer
//   queue                              of the successes: submission to compute to batch start
//   compute_input                      arrival to submission: reading and decoding the request
//   compute_infer                      batch start to output written
//   compute_output                     output written to answer: encoding the response
//   last_inference                     the last answer, milliseconds since the Unix epoch
//   memory_usage                       a table's bytes where they live (CPU, or GPU and its id)
//
// A request for a table counts toward that table (whatever op it asks for); one with params
// sent toward the built-in model of its op, over every front end (native gRPC, KServe gRPC and
// HTTP). A table's counters follow its name across replacements and start again after a delete.
//
// Thread-safety: reads atomics and the registry (thread-safe).

#ifndef TENSORCOMPUTE_SERVER_KSERVE_MODEL_STATISTICS_H_
#define TENSORCOMPUTE_SERVER_KSERVE_MODEL_STATISTICS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/tensor_registry.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server::kserve {

// The statistics of model `name` at `version` ("" or "1"), or of every model when `name` is
// empty (the built-in ones, then the tables by name). NOT_FOUND as codec.h's FindModel.
// `registry` may be null (only the built-in models).
absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry,
    const Metrics& metrics);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_MODEL_STATISTICS_H_
