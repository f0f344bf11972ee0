// File: server/kserve/infer_parameters.h
//
// The request parameters of a ModelInferRequest that the models read (codec.h lists which
// model takes which), each checked for its type:
//   integers   int64_param, or uint64_param that fits int64 (axis, batch_dims, padding_idx);
//   booleans   bool_param (include_last_offset);
//   mode       string_param "sum", "mean", "max" or "sqrtn", in any case (embedding_bag).
// A parameter of the wrong type is INVALID_ARGUMENT naming it and the type it needs. Which
// names a model accepts at all is codec.cc's business.
//
// Thread-safety: pure functions over their arguments.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_INFER_PARAMETERS_H_
#define TENSORCOMPUTE_SERVER_KSERVE_INFER_PARAMETERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/embedding_bag.h"

namespace tensorcompute::server::kserve {

using InferParameters = google::protobuf::Map<std::string, inference::InferParameter>;

// The integer parameter `name`, or nullopt when absent. INVALID_ARGUMENT when it is not an
// integer ("parameter 'axis' must be an integer (int64_param)") or a uint64 past INT64_MAX.
absl::StatusOr<std::optional<int64_t>> IntParameter(const InferParameters& parameters,
                                                    const std::string& name);

// The boolean parameter `name`, or nullopt when absent. INVALID_ARGUMENT when it is not a
// bool_param.
absl::StatusOr<std::optional<bool>> BoolParameter(const InferParameters& parameters,
                                                  const std::string& name);

// `base` (the server's limits) with the EmbeddingBag parameters of `parameters` applied: mode
// (default "sum"), include_last_offset (default false) and padding_idx (default none).
// INVALID_ARGUMENT for a mode that is not one of the four strings (the message quotes it,
// escaped and cut at 64 bytes) or a parameter of the wrong type.
absl::StatusOr<core::EmbeddingBagOptions> EmbeddingBagParameters(
    const InferParameters& parameters, const core::EmbeddingBagOptions& base);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_INFER_PARAMETERS_H_
