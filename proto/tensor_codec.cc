#include "proto/tensor_codec.h"

#include <cstring>
#include <limits>
#include <string>

#include "core/status_macros.h"

namespace tensorcompute::proto {
namespace {

// The two enums must agree number for number: the conversions below are plain casts.
#define TC_SAME_DTYPE_NUMBER(core_name, wire_name) \
  static_assert(static_cast<int>(core::DataType::core_name) == v1::wire_name)
TC_SAME_DTYPE_NUMBER(kUnspecified, DT_UNSPECIFIED);
TC_SAME_DTYPE_NUMBER(kBool, DT_BOOL);
TC_SAME_DTYPE_NUMBER(kInt8, DT_INT8);
TC_SAME_DTYPE_NUMBER(kInt16, DT_INT16);
TC_SAME_DTYPE_NUMBER(kInt32, DT_INT32);
TC_SAME_DTYPE_NUMBER(kInt64, DT_INT64);
TC_SAME_DTYPE_NUMBER(kUint8, DT_UINT8);
TC_SAME_DTYPE_NUMBER(kUint16, DT_UINT16);
TC_SAME_DTYPE_NUMBER(kUint32, DT_UINT32);
TC_SAME_DTYPE_NUMBER(kUint64, DT_UINT64);
TC_SAME_DTYPE_NUMBER(kFloat16, DT_FLOAT16);
TC_SAME_DTYPE_NUMBER(kBfloat16, DT_BFLOAT16);
TC_SAME_DTYPE_NUMBER(kFloat32, DT_FLOAT32);
TC_SAME_DTYPE_NUMBER(kFloat64, DT_FLOAT64);
TC_SAME_DTYPE_NUMBER(kComplex64, DT_COMPLEX64);
TC_SAME_DTYPE_NUMBER(kComplex128, DT_COMPLEX128);
TC_SAME_DTYPE_NUMBER(kString, DT_STRING);
#undef TC_SAME_DTYPE_NUMBER
static_assert(v1::DataType_MIN == 0 && v1::DataType_MAX == core::kLastDataType);

}  // namespace

core::DataType FromProtoDataType(v1::DataType dtype) {
  return static_cast<core::DataType>(static_cast<int32_t>(dtype));
}

v1::DataType ToProtoDataType(core::DataType dtype) {
  return static_cast<v1::DataType>(static_cast<int32_t>(dtype));
}

absl::StatusOr<core::TensorView> ViewTensor(const v1::Tensor& t, absl::string_view name) {
  core::TensorView view;
  view.dtype = FromProtoDataType(t.dtype());
  if (!core::DataTypeFromInt(static_cast<int32_t>(t.dtype()))) {
    // The error text lives in core: ValidateTensor checks the dtype first and, by its
    // contract, never accepts an unknown one, so this always returns INVALID_ARGUMENT.
    return core::ValidateTensor(view, name, std::numeric_limits<int64_t>::max());
  }
  view.shape.assign(t.shape().begin(), t.shape().end());
  // No copy: the view points into the message, which the caller keeps alive.
  const std::string& data = t.data();
  view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  // RepeatedPtrField<std::string>::data() is the message's own array of string pointers,
  // which is exactly the form TensorView::strings takes.
  view.strings = absl::Span<const std::string* const>(t.strings().data(),
                                                      static_cast<size_t>(t.strings_size()));
  return view;
}

void ToProto(const core::TensorView& t, v1::Tensor* out) {
  out->Clear();
  out->set_dtype(ToProtoDataType(t.dtype));
  out->mutable_shape()->Assign(t.shape.begin(), t.shape.end());
  if (t.dtype == core::DataType::kString) {
    // The pointer array allocated once, instead of regrowing as the strings are added.
    out->mutable_strings()->Reserve(static_cast<int>(t.strings.size()));
    for (const std::string* s : t.strings) out->add_strings(*s);
  } else {
    out->set_data(t.data.data(), t.data.size());
  }
}

absl::StatusOr<core::Tensor> FromProto(const v1::Tensor& t, absl::string_view name,
                                       int64_t max_rank) {
  TC_ASSIGN_OR_RETURN(core::TensorView view, ViewTensor(t, name));
  // Validated before Allocate, so that a shape the bytes do not match allocates nothing.
  TC_RETURN_IF_ERROR(core::ValidateTensor(view, name, max_rank));
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::Tensor::Allocate(view.dtype, view.shape));
  core::MutableTensorView dst = tensor.mutable_view();
  if (view.dtype == core::DataType::kString) {
    for (size_t i = 0; i < view.strings.size(); ++i) *dst.strings[i] = *view.strings[i];
  } else if (!view.data.empty()) {
    std::memcpy(dst.data.data(), view.data.data(), view.data.size());
  }
  return tensor;
}

core::MutableTensorView PrepareOutput(core::DataType dtype, const core::Shape& shape,
                                      int64_t num_elements, int64_t num_bytes, v1::Tensor* out) {
  out->set_dtype(ToProtoDataType(dtype));
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  core::MutableTensorView view;
  view.dtype = dtype;
  view.shape = shape;
  if (dtype == core::DataType::kString) {
    out->clear_data();
    auto* strings = out->mutable_strings();
    strings->Clear();
    strings->Reserve(static_cast<int>(num_elements));
    for (int64_t i = 0; i < num_elements; ++i) strings->Add();
    // pointer_begin() walks the message's own contiguous array of string pointers (the
    // array mutable_data() returns; that accessor is deprecated in protobuf 3.21).
    if (!strings->empty()) {
      view.strings = absl::Span<std::string* const>(&*strings->pointer_begin(),
                                                    static_cast<size_t>(strings->size()));
    }
  } else {
    out->clear_strings();
    std::string* data = out->mutable_data();
    // clear() first so that every byte is zero, not left over from an earlier use of `out`.
    data->clear();
    data->resize(static_cast<size_t>(num_bytes));
    view.data = absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(data->data()), data->size());
  }
  return view;
}

namespace {

// Base 128, least significant group first, the high bit set on every byte but the last
// (protobuf's varint): at most 10 bytes for a uint64_t.
void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

constexpr char kLengthDelimited = 2;  // protobuf wire type of messages and bytes
// One prefix serves both responses only while their `output` has the same number.
static_assert(static_cast<int>(v1::GatherResponse::kOutputFieldNumber) ==
              static_cast<int>(v1::GatherNdResponse::kOutputFieldNumber));

}  // namespace

// Written by hand because protobuf can only serialize a message whose data it holds: the
// server gathers the output straight into the buffer after this prefix (tensor_codec.h).
// Byte for byte protobuf's own serialization, which writes fields in number order: the
// response's field 1 `output` (a message: wire type 2, tag 0x0a, then its length), inside it
// Tensor's dtype (1) and shape (2), serialized by protobuf, then data (3: wire type 2, tag
// 0x1a, the length num_bytes); strings (4) is empty and so absent. Each tag is one byte, as
// field numbers below 16 give.
std::string ResponsePrefix(core::DataType dtype, const core::Shape& shape, int64_t num_bytes) {
  v1::Tensor head;  // Tensor's fields 1 (dtype) and 2 (shape); data (3) follows, then nothing
  head.set_dtype(ToProtoDataType(dtype));
  head.mutable_shape()->Assign(shape.begin(), shape.end());
  std::string tensor = head.SerializeAsString();
  tensor.push_back(static_cast<char>((v1::Tensor::kDataFieldNumber << 3) | kLengthDelimited));
  PutVarint(static_cast<uint64_t>(num_bytes), &tensor);
  std::string prefix;
  prefix.push_back(
      static_cast<char>((v1::GatherResponse::kOutputFieldNumber << 3) | kLengthDelimited));
  PutVarint(tensor.size() + static_cast<uint64_t>(num_bytes), &prefix);
  prefix += tensor;
  return prefix;
}

}  // namespace tensorcompute::proto
