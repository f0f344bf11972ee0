#include "server/kserve/infer_input.h"

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/shape.h"
#include "core/status_macros.h"
#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using inference::InferTensorContents;
using inference::ModelInferRequest;

// Copies `values` (typed contents) into a new tensor of `dtype`, converting each to T.
template <typename T, typename Repeated>
absl::StatusOr<std::unique_ptr<core::Tensor>> FromContents(DataType dtype, const core::Shape& shape,
                                                           const Repeated& values,
                                                           absl::string_view what) {
  // The count is checked against the shape before anything is allocated: a shape of 2^40
  // elements with three values in the message must cost nothing (found by the fuzzer).
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value() || *n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ",
                     n.has_value() ? absl::StrCat(*n) : std::string("more than int64 holds of"),
                     " elements but its contents hold ", values.size()));
  }
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::Tensor::Allocate(dtype, shape));
  uint8_t* out = tensor.mutable_bytes().data();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const auto v = values[static_cast<int>(i)];
    const T t = static_cast<T>(v);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (static_cast<decltype(v)>(t) != v) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": contents[", i, "] = ", v,
                                                       " does not fit ",
                                                       proto::KserveDatatypeName(dtype).value()));
      }
    }
    std::memcpy(out + i * sizeof(T), &t, sizeof(T));
  }
  return std::make_unique<core::Tensor>(std::move(tensor));
}

// The typed contents of an input of `dtype`: exactly the field that datatype uses.
absl::StatusOr<std::unique_ptr<core::Tensor>> DecodeContents(DataType dtype,
                                                             const core::Shape& shape,
                                                             const InferTensorContents& c,
                                                             absl::string_view what) {
  // Which field holds the data; every other one must be empty.
  const int sizes[] = {c.bool_contents_size(), c.int_contents_size(),    c.int64_contents_size(),
                       c.uint_contents_size(), c.uint64_contents_size(), c.fp32_contents_size(),
                       c.fp64_contents_size(), c.bytes_contents_size()};
  int field = -1;  // index into sizes
  switch (dtype) {
    case DataType::kBool:
      field = 0;
      break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
      field = 1;
      break;
    case DataType::kInt64:
      field = 2;
      break;
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
      field = 3;
      break;
    case DataType::kUint64:
      field = 4;
      break;
    case DataType::kFloat32:
      field = 5;
      break;
    case DataType::kFloat64:
      field = 6;
      break;
    case DataType::kString:
      field = 7;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", proto::KserveDatatypeName(dtype).value(),
                       " has no typed contents field; send it in raw_input_contents"));
  }
  static constexpr absl::string_view kFieldNames[] = {
      "bool_contents",   "int_contents",  "int64_contents", "uint_contents",
      "uint64_contents", "fp32_contents", "fp64_contents",  "bytes_contents"};
  for (int i = 0; i < 8; ++i) {
    if (i != field && sizes[i] > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": datatype ", proto::KserveDatatypeName(dtype).value(),
                       " takes its contents in ", kFieldNames[field], ", not ", kFieldNames[i]));
    }
  }
  switch (dtype) {
    case DataType::kBool:
      return FromContents<bool>(dtype, shape, c.bool_contents(), what);
    case DataType::kInt8:
      return FromContents<int8_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt16:
      return FromContents<int16_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt32:
      return FromContents<int32_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt64:
      return FromContents<int64_t>(dtype, shape, c.int64_contents(), what);
    case DataType::kUint8:
      return FromContents<uint8_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint16:
      return FromContents<uint16_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint32:
      return FromContents<uint32_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint64:
      return FromContents<uint64_t>(dtype, shape, c.uint64_contents(), what);
    case DataType::kFloat32:
      return FromContents<float>(dtype, shape, c.fp32_contents(), what);
    case DataType::kFloat64:
      return FromContents<double>(dtype, shape, c.fp64_contents(), what);
    default:
      break;
  }
  // BYTES
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value() || *n != c.bytes_contents_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ",
                     n.has_value() ? absl::StrCat(*n) : std::string("too many"),
                     " elements but its contents hold ", c.bytes_contents_size()));
  }
  std::vector<std::string> strings(c.bytes_contents().begin(), c.bytes_contents().end());
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::Tensor::FromStrings(shape, std::move(strings)));
  return std::make_unique<core::Tensor>(std::move(tensor));
}

// BYTES in raw form: each element a 4-byte little-endian length and that many bytes.
absl::StatusOr<std::unique_ptr<core::Tensor>> DecodeRawBytes(const core::Shape& shape,
                                                             absl::string_view raw,
                                                             absl::string_view what) {
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", core::ShapeToString(shape),
                                                   " has more elements than int64 holds"));
  }
  // Each element takes at least its 4-byte length: a count the bytes cannot hold is refused
  // before anything is allocated for it.
  if (*n > static_cast<int64_t>(raw.size() / 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ", *n,
                     " BYTES elements but raw_input_contents holds ", raw.size(),
                     " bytes, less than the 4-byte length each element needs"));
  }
  std::vector<std::string> strings;
  strings.reserve(static_cast<size_t>(*n));
  size_t at = 0;
  for (int64_t i = 0; i < *n; ++i) {
    if (raw.size() - at < 4) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": raw_input_contents ends at element ",
                                                     i, " of ", *n, ", before its 4-byte length"));
    }
    const uint32_t length =
        proto::ReadKserveBytesLength(reinterpret_cast<const uint8_t*>(raw.data() + at));
    at += proto::kKserveBytesLengthSize;
    if (raw.size() - at < length) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": element ", i, " says it has ", length,
                                                     " bytes but only ", raw.size() - at,
                                                     " remain in raw_input_contents"));
    }
    strings.emplace_back(raw.substr(at, length));
    at += length;
  }
  if (at != raw.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": raw_input_contents has ",
                                                   raw.size() - at, " bytes after its ", *n,
                                                   " BYTES elements"));
  }
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::Tensor::FromStrings(shape, std::move(strings)));
  return std::make_unique<core::Tensor>(std::move(tensor));
}

}  // namespace

absl::StatusOr<core::TensorView> DecodeInferInput(
    const ModelInferRequest& request, int index,
    std::vector<std::unique_ptr<core::Tensor>>* decoded) {
  const ModelInferRequest::InferInputTensor& input = request.inputs(index);
  const std::string what = absl::StrCat("input '", input.name(), "'");
  TC_ASSIGN_OR_RETURN(const DataType dtype, ParseDatatype(input.datatype(), what));
  core::Shape shape(input.shape().begin(), input.shape().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has a negative dimension"));
    }
  }
  if (request.raw_input_contents_size() > 0) {
    const std::string& raw = request.raw_input_contents(index);
    if (dtype == DataType::kString) {
      TC_ASSIGN_OR_RETURN(std::unique_ptr<core::Tensor> t, DecodeRawBytes(shape, raw, what));
      decoded->push_back(std::move(t));
      return decoded->back()->view();
    }
    core::TensorView view;
    view.dtype = dtype;
    view.shape = std::move(shape);
    view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
    // The plan's ValidateTensor checks the byte count against the shape; say it in v2 terms.
    const std::optional<int64_t> n = core::CheckedNumElements(view.shape);
    const std::optional<int64_t> bytes =
        n.has_value() ? core::CheckedMul(*n, static_cast<int64_t>(core::ElementSize(dtype)))
                      : std::nullopt;
    if (!bytes.has_value() || *bytes != static_cast<int64_t>(raw.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", input.datatype(), " shape ", core::ShapeToString(view.shape), " needs ",
          bytes.has_value() ? absl::StrCat(*bytes) : std::string("more than int64 holds of"),
          " bytes but raw_input_contents[", index, "] has ", raw.size()));
    }
    return view;
  }
  TC_ASSIGN_OR_RETURN(std::unique_ptr<core::Tensor> t,
                      DecodeContents(dtype, shape, input.contents(), what));
  decoded->push_back(std::move(t));
  return decoded->back()->view();
}

}  // namespace tensorcompute::server::kserve
