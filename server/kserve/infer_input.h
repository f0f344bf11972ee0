// File: server/kserve/infer_input.h
//
// One input of a ModelInferRequest as a core::TensorView: its datatype (codec.h's
// ParseDatatype), shape and data, which come either in raw_input_contents (little-endian; BYTES
// as a 4-byte little-endian length before each element) or in the typed `contents` field its
// datatype uses (FP16 and BF16 have none). PrepareInfer (codec.h) decodes every input with it.
//
// Nothing is allocated before the shape has been checked against the data that came: a shape
// of 2^40 elements with three values in the message costs nothing.
//
// Thread-safety: a pure function over its arguments.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_INFER_INPUT_H_
#define TENSORCOMPUTE_SERVER_KSERVE_INFER_INPUT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/tensor.h"

namespace tensorcompute::server::kserve {

// Input `index` of `request` as a view. Raw bytes of a fixed-size datatype are viewed in place
// (keep `request` alive and unchanged while the view is used); typed contents and BYTES are
// decoded into a new tensor appended to `decoded`, which the view points into.
// Returns INVALID_ARGUMENT naming the input ("input 'params': ...") for an unknown datatype, a
// negative dimension, raw bytes that do not match the shape, malformed BYTES framing, typed
// contents in another field than the datatype's, a count other than the shape's, or a value
// that does not fit the datatype.
// REQUIRES: 0 <= index < request.inputs_size(); raw_input_contents is empty or has an entry for
// every input.
absl::StatusOr<core::TensorView> DecodeInferInput(
    const inference::ModelInferRequest& request, int index,
    std::vector<std::unique_ptr<core::Tensor>>* decoded);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_INFER_INPUT_H_
