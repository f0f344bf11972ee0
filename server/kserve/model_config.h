// File: server/kserve/model_config.h
//
// Triton's ModelConfig (gRPC) and GET /v2/models/{name}[/versions/{v}]/config (HTTP): a model's
// configuration in Triton's ModelConfig message (proto/inference/model_config.proto), built
// from what ModelMetadata says of it (codec.h), so the two never disagree:
//
//   name, platform and backend   the model's name, "tensorcompute", "tensorcompute"
//   max_batch_size               0: a request carries its whole shape (no batch dimension)
//   input, output                ModelMetadata's, datatypes as Triton's TYPE_* (TYPE_INVALID
//                                where it varies with the request: params, the output);
//                                offsets and per_sample_weights optional; a keyed table's
//                                indices and keys optional (one or the other), and its
//                                output "found" (sent only when asked); dims -1: any size
//   dynamic_batching             the server's batcher: max_queue_delay_microseconds
//                                (--max_queue_delay_us) and preferred_batch_size
//                                (--max_batch_size)
//   parameters                   a table's: "op" (its default op, "gather"), "storage",
//                                "dtype", "shape"; for a keyed table "keyed" ("true"),
//                                "missing" (its policy: "error", "zero" or "default"),
//                                "default_row" ("true"/"false"), "capacity" and "keys" (held
//                                now); and, for a shard, "shard" ("i/N")
//
// Thread-safety: pure functions of their arguments (the registry is thread-safe).

#ifndef TENSORCOMPUTE_SERVER_KSERVE_MODEL_CONFIG_H_
#define TENSORCOMPUTE_SERVER_KSERVE_MODEL_CONFIG_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/batching/batcher.h"
#include "core/tensor_registry.h"

namespace tensorcompute::server::kserve {

// The configuration of model `name` at `version`: NOT_FOUND as codec.h's FindModel, or
// ModelMetadata's INVALID_ARGUMENT for a table with no KServe datatype. `registry` may be null.
absl::StatusOr<inference::ModelConfigResponse> ModelConfig(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry,
    const batching::BatcherOptions& batching);

// Triton's TYPE_* for a KServe v2 datatype name ("FP32" -> TYPE_FP32, "BYTES" ->
// TYPE_STRING); TYPE_INVALID for "" (it varies) or an unknown name.
inference::DataType TritonDataType(absl::string_view kserve_datatype);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_MODEL_CONFIG_H_
