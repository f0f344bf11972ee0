// File: server/kserve/codec.h
//
// The Open Inference Protocol (KServe v2, package `inference`) in terms of core: which models
// there are, what a ModelInferRequest asks for (a plan and views of its tensors), and how the
// output goes back into a ModelInferResponse. Both front ends use it: the gRPC service
// (`inference.GRPCInferenceService`, compute_entry.cc) and the HTTP/REST one, which turns
// its JSON into a ModelInferRequest first. docs/kserve.md is the user's view of the same rules.
//
// Models:
//   gather         inputs params, indices; parameters axis (default 0), batch_dims (default 0)
//   gather_nd      inputs params, indices; parameter batch_dims (default 0)
//   embedding_bag  inputs params, indices, and optionally offsets and per_sample_weights;
//                  parameters mode ("sum" (default), "mean", "max", "sqrtn", in any case),
//                  include_last_offset (bool, default false), padding_idx (default none):
//                  core::PlanEmbeddingBag with the caller's EmbeddingBagOptions as the base
//   <table>        every resident tensor (core/tensor_registry.h) under its own name: the
//                  inputs above minus params; parameter op = "gather" (default), "gather_nd"
//                  or "embedding_bag", and that op's parameters as above (another op's
//                  parameter is INVALID_ARGUMENT). The built-in names win over a table.
//                  A keyed table (core/keyed_rows.h) also takes `keys` (INT64, any shape its
//                  indices take) in place of indices, for op "gather" (axis 0, no batch_dims)
//                  and "embedding_bag" (no padding_idx), with parameters missing ("table"
//                  (default), "error", "zero", "default", "skip": core::ParseMissingKeys) and
//                  return_found (bool; or the requested output "found"), which adds the output
//                  "found", BOOL of the keys' shape. The native API's rules and words
//                  (server/compute/keyed_lookup.h): "set either indices or keys, not both".
//   Versions: "" or "1" (a table's replacements keep its model version "1").
//
// Datatypes: BOOL, UINT8..64, INT8..64, FP16, BF16, FP32, FP64 and BYTES (strings). complex64
// and complex128 have no v2 datatype: a request that would need one is INVALID_ARGUMENT.
// Inputs come as raw_input_contents (for every input, or for none; little-endian, BYTES as a
// 4-byte little-endian length before each element) or as typed `contents` (FP16 and BF16 have
// none: raw only; infer_input.h). The output is "output" (then "found", when asked), always in
// raw_output_contents.
//
// Errors are our status table's (INVALID_ARGUMENT for a malformed request, NOT_FOUND for an
// unknown model or version, and the plan's own codes and messages, e.g. "indices[1] = 7 is not
// in [-3, 3)"), each message naming the input or parameter at fault.
//
// Lifetimes: the views in an InferJob point into the request (raw contents) or into the job's
// own storage (decoded typed contents and BYTES), and into the resident table it holds; keep
// the request and the job alive, unchanged, until the task is done.
//
// Thread-safety: pure functions over their arguments; the registry is thread-safe.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_CODEC_H_
#define TENSORCOMPUTE_SERVER_KSERVE_CODEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/batching/task.h"
#include "core/dtype.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "server/compute/compute_entry.h"
#include "server/compute/keyed_lookup.h"

namespace tensorcompute::server::kserve {

inline constexpr absl::string_view kGatherModel = "gather";
inline constexpr absl::string_view kGatherNdModel = "gather_nd";
inline constexpr absl::string_view kEmbeddingBagModel = "embedding_bag";
inline constexpr absl::string_view kModelVersion = "1";
inline constexpr absl::string_view kOutputName = "output";
inline constexpr absl::string_view kFoundName = "found";

// The core type of a v2 datatype name (proto/kserve_wire.h), or INVALID_ARGUMENT naming
// `what` (e.g. "input 'params'") and listing the datatypes accepted.
absl::StatusOr<core::DataType> ParseDatatype(absl::string_view datatype, absl::string_view what);

// One inference request, decoded: what a batching::Task needs, and the storage its views use.
// The built-in model or table a request names.
enum class ModelKind { kGather, kGatherNd, kEmbeddingBag, kTable };

struct Model {
  ModelKind kind = ModelKind::kGather;
  std::shared_ptr<const core::ResidentTensor> table;  // set for kTable
};

// The model `name` names ('gather', 'gather_nd', 'embedding_bag', or a resident table of
// `registry`, which may be null) at `version` ("" or "1"). NOT_FOUND for an unknown model
// ("model 'x' not found: the models are ...") or version.
absl::StatusOr<Model> FindModel(absl::string_view name, absl::string_view version,
                                const core::TensorRegistry* registry);

struct InferJob {
  std::string model_name;
  BuiltinModel op = BuiltinModel::kGather;  // the operation (a table's `op` parameter)
  batching::TaskPlan plan;                  // a gather's, or an embedding_bag's
  core::TensorView params;
  core::TensorView indices;
  core::TensorView offsets;  // embedding_bag's, when sent
  core::TensorView weights;  // embedding_bag's per_sample_weights, when sent
  std::shared_ptr<const core::ResidentTensor> table;  // set for a table's model

  // A lookup by keys (a keyed table's `keys` input): `indices` views keyed's slots, filled under
  // the batch's read lease (FillComputeRequest's resolve), and `params` the table's keyed view.
  bool by_keys = false;
  bool return_found = false;  // the `found` output asked for (parameter or requested output)
  KeyedLookup keyed;
  std::string found;  // the found mask, one byte a key, written by resolve

  // Storage behind views that are not the request's own bytes.
  std::vector<std::unique_ptr<core::Tensor>> decoded;  // typed contents and BYTES inputs
  core::Tensor output_strings;                         // a BYTES output, before encoding
};

// What decoding `request`'s BYTES inputs sent in raw_input_contents will add to it: each is
// one protobuf string, but PrepareInfer turns every 4-byte length and its bytes into a core
// string (proto::kConvertedString, and its contents beyond the short buffer; proto/
// decoded_cost.h). Counted by walking the lengths, up to the count the shape claims; a malformed
// framing stops the walk (PrepareInfer refuses it before it allocates more). For the front ends
// to charge to the in-flight budget before PrepareInfer.
int64_t BytesInputsConversion(const inference::ModelInferRequest& request);

// What a lookup by keys will hold beside its keys (server/compute/keyed_lookup.h): a slot
// (int64) for each key the request carries, and a byte for each when it asks for the found mask
// (return_found, or the output "found"). Counted from the keys sent (raw bytes or int64
// contents), up to the count the shape claims; zero for a request without INT64 keys. For the
// front ends to charge to the in-flight budget before PrepareInfer makes them, in the native
// API's words ("the slots of N keys").
struct KeyedLookupCost {
  int64_t keys = 0;
  int64_t bytes = 0;
};
KeyedLookupCost KeyedLookupBytes(const inference::ModelInferRequest& request);

// Decodes and plans `request`: the model (`registry` may be null: then only the built-in
// models exist), its version, parameters, inputs and requested outputs. A gather is planned
// with `options`, a lookup with `bag_options` (the server's limits; the request's parameters
// set its mode, include_last_offset and padding_idx). On success `job` holds the plan and
// views, ready for a Task. Checked in this order: model and version (NOT_FOUND); parameter
// names; op; raw_input_contents' count; the inputs' names (indices or keys, not both); the
// outputs'; an embedding_bag's parameters; a lookup by keys' (missing, return_found, then axis,
// batch_dims and padding_idx refused with keys); a table's datatype; each input's decoding;
// the keys (KeyedLookup::Prepare: the table has keys, their dtype and rank, the policy); a
// gather's axis and batch_dims; the plan's own checks (in the keys' words for keys).
// A lookup by keys is prepared with server/compute/keyed_lookup.h (`key_pool`, may be null,
// splits long ones) and planned on the table's keyed view, as the native API plans it.
absl::Status PrepareInfer(const inference::ModelInferRequest& request,
                          const core::TensorRegistry* registry, const core::PlanOptions& options,
                          const core::EmbeddingBagOptions& bag_options, InferJob* job,
                          core::ThreadPool* key_pool = nullptr);

// The job's plan, views and table in `request` (its deadline, cancel flag and output are the
// front end's to set), and for a lookup by keys its resolve step, which writes into `job`.
// REQUIRES: `job` outlives the request's task.
void FillComputeRequest(InferJob* job, ComputeRequest* request);

// The output slot for a Task of `job`: for fixed-size types, the bytes of a new
// raw_output_contents entry of `response`; for BYTES, job->output_strings.
core::MutableTensorView PrepareInferOutput(InferJob* job, inference::ModelInferResponse* response);

// After the task computed OK: fills the response's model name and version, id and the output's
// name, datatype and shape; for BYTES, encodes job->output_strings into raw_output_contents.
// With return_found, a second output, "found": BOOL of the keys' shape.
void CompleteInferResponse(const inference::ModelInferRequest& request, InferJob* job,
                           inference::ModelInferResponse* response);

// The models' metadata, readiness and the server's. `name`/`version` as in the request:
// NOT_FOUND for an unknown model or version; INVALID_ARGUMENT (ModelMetadata) for a table whose
// dtype has no v2 datatype. A table's model is ready when its dtype has one.
absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry);
absl::StatusOr<bool> ModelReady(absl::string_view name, absl::string_view version,
                                const core::TensorRegistry* registry);
inference::ServerMetadataResponse ServerMetadata();

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_CODEC_H_
