// File: tests/fuzz/infer_check.h
//
// The KServe fuzzers' shared step (wire_request_fuzzer: gRPC ModelInfer; http_request_fuzzer:
// HTTP infer): a request that PrepareInfer planned is computed as the CPU executor computes it
// and checked against the slow reference (fuzz_check.h), then its response completed. An
// embedding_bag request is computed with core::ExecuteEmbeddingBag, which may only succeed or
// refuse an index with INVALID_ARGUMENT.

#ifndef TENSORCOMPUTE_TESTS_FUZZ_INFER_CHECK_H_
#define TENSORCOMPUTE_TESTS_FUZZ_INFER_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "server/kserve/codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace tensorcompute::fuzz {

// The lookup limits the server derives from its plan limits
// (server::ComputeEntry::embedding_bag_options).
inline core::EmbeddingBagOptions BagOptionsOf(const core::PlanOptions& options) {
  core::EmbeddingBagOptions bag;
  bag.max_output_bytes = options.max_output_bytes;
  return bag;
}

// Computes `job` (planned from `request` by PrepareInfer) into `response`, checks the plan and
// the output against the reference, and on success completes the response
// (CompleteInferResponse). Returns what the gather returned.
inline absl::Status ExecuteAndCheckInfer(const inference::ModelInferRequest& request,
                                         server::kserve::InferJob* job,
                                         inference::ModelInferResponse* response) {
  // The axis and batch_dims the plan was made with, as the reference wants them.
  std::optional<int64_t> axis;
  int64_t batch_dims = 0;
  for (const auto& [name, value] : request.parameters()) {
    const int64_t v = value.parameter_choice_case() == inference::InferParameter::kInt64Param
                          ? value.int64_param()
                          : static_cast<int64_t>(value.uint64_param());
    if (name == "axis") axis = v;
    if (name == "batch_dims") batch_dims = v;
  }
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&job->plan)) {
    const core::MutableTensorView output = server::kserve::PrepareInferOutput(job, response);
    Check(static_cast<int64_t>(output.data.size()) == bag->output_bytes,
          "embedding_bag: output slot != plan's bytes");
    const absl::Status executed = core::ExecuteEmbeddingBag(
        *bag, job->params, job->indices, bag->fixed_bags() ? nullptr : &job->offsets,
        bag->weighted() ? &job->weights : nullptr, output);
    Check(executed.ok() || executed.code() == absl::StatusCode::kInvalidArgument,
          "embedding_bag: unexpected code " + executed.ToString());
    if (executed.ok()) server::kserve::CompleteInferResponse(request, job, response);
    return executed;
  }
  const core::GatherPlan& plan = std::get<core::GatherPlan>(job->plan);
  CheckPlan(plan, job->params, batch_dims);
  const core::MutableTensorView output = server::kserve::PrepareInferOutput(job, response);
  const absl::Status executed = core::ExecuteGather(plan, job->params, job->indices, output);
  core::TensorView output_view;
  output_view.dtype = output.dtype;
  output_view.shape = output.shape;
  output_view.data = output.data;
  std::vector<const std::string*> strings(output.strings.begin(), output.strings.end());
  output_view.strings = strings;
  CheckAgainstReference(plan, job->params, job->indices, axis, batch_dims, executed, output_view);
  if (executed.ok()) server::kserve::CompleteInferResponse(request, job, response);
  return executed;
}

}  // namespace tensorcompute::fuzz

#endif  // TENSORCOMPUTE_TESTS_FUZZ_INFER_CHECK_H_
