// File: proto/tensor_codec.h
//
// The one place that translates between the wire tensor (tensorcompute::v1::Tensor) and
// core's tensor types. Shared by the server (request decode, response encode) and the client.
//
// What is checked where:
//   ViewTensor  checks only wire-level facts that core's types cannot represent: the dtype
//               number must name a known type. Shape/data consistency is left to
//               core::ValidateTensor, which core::PlanGather/PlanGatherNd run on every input.
//   FromProto   copies and runs core::ValidateTensor, so its result is always well-formed.
//   ToProto / PrepareOutput  trust their input (it comes from core, already valid).
//
// Lifetimes: a TensorView from ViewTensor and a MutableTensorView from PrepareOutput point
// into the message. They stay valid while the message lives and the viewed fields are not
// mutated (no set_data/add_strings/Clear/Swap/arena reset on it); the caller guarantees that.
// A view points to the message's own buffers, never to copies.
//
// Thread-safety: pure functions. Concurrent ViewTensor calls on one message are safe (const
// access); PrepareOutput writes `out` and needs exclusive access to it.

#ifndef TENSORCOMPUTE_PROTO_TENSOR_CODEC_H_
#define TENSORCOMPUTE_PROTO_TENSOR_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/dtype.h"
#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::proto {

// Returns the core type with the same number as `dtype`. Pure cast: the numbers of both enums
// are equal by construction (static_asserts in the .cc). An out-of-enum wire value (proto3
// enums are open) maps to the out-of-enum core value of the same number; use
// core::DataTypeFromInt to check it.
core::DataType FromProtoDataType(v1::DataType dtype);

// Returns the wire type with the same number as `dtype`.
v1::DataType ToProtoDataType(core::DataType dtype);

// A zero-copy view of `t`: `data` spans t.data()'s bytes and, for DT_STRING, `strings` spans
// the message's own array of string pointers (no per-string copy). `name` ("params",
// "indices") starts every error message.
// Returns the view, or INVALID_ARGUMENT when t.dtype() is not a known type, with
// core::ValidateTensor's text: "params: unknown dtype 99; expected one of bool, ..." or, for
// DT_UNSPECIFIED, "params: dtype is unspecified; expected one of ...".
// Does NOT check that shape and data agree: run core::ValidateTensor (PlanGather does).
// The view is valid while `t` lives and is not mutated.
absl::StatusOr<core::TensorView> ViewTensor(const v1::Tensor& t, absl::string_view name);

// Writes `t` into `*out`, replacing its contents (copies bytes and strings).
// REQUIRES: t is well-formed (core::ValidateTensor would accept it); out != nullptr.
void ToProto(const core::TensorView& t, v1::Tensor* out);

// Returns an owning copy of `t`, or INVALID_ARGUMENT for an unknown dtype (as ViewTensor) or
// a malformed tensor (core::ValidateTensor's message, prefixed by `name`; ranks above
// `max_rank` included).
absl::StatusOr<core::Tensor> FromProto(const v1::Tensor& t, absl::string_view name,
                                       int64_t max_rank = core::PlanOptions().max_rank);

// Turns `*out` into an output slot of `dtype` and `shape` and returns a view that writes
// straight into it, so that the server fills its response without an extra copy:
//   - fixed-size dtypes: out->data() is resized to `num_bytes` and the view's `data` spans it.
//     std::string::resize zero-fills the bytes, so every byte is written twice (once here);
//     acceptable for now, and never uninitialised memory on the wire.
//   - DT_STRING: `num_elements` empty strings are appended to out->strings() and the view's
//     `strings` spans the message's pointer array (assign into *view.strings[i]).
// Any previous data/strings in `*out` are discarded.
// REQUIRES: out != nullptr; dtype is a known type; num_elements == product(shape);
//   num_bytes == num_elements * ElementSize(dtype) (0 for strings); the caller has checked
//   the sizes against its limits (core::PlanGather does), so num_elements fits a protobuf
//   repeated field (< 2^31) and num_bytes a message (< 2 GiB).
// The view is valid while `*out` lives and its data/strings fields are not otherwise mutated.
core::MutableTensorView PrepareOutput(core::DataType dtype, const core::Shape& shape,
                                      int64_t num_elements, int64_t num_bytes, v1::Tensor* out);

// The wire form of a GatherResponse or GatherNdResponse (both: `Tensor output = 1`) whose output
// has fixed-size `dtype`, `shape` and `num_bytes` of data, up to the data: the whole message is
// this prefix followed by the data's `num_bytes` bytes, byte for byte what protobuf would
// serialize. The server writes an output straight into a buffer that starts with this (no
// zero fill, no serialization copy).
// REQUIRES: dtype is a known type other than kString; num_bytes > 0 (protobuf omits empty
//   data, and so must the caller: use PrepareOutput then).
std::string ResponsePrefix(core::DataType dtype, const core::Shape& shape, int64_t num_bytes);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_TENSOR_CODEC_H_
