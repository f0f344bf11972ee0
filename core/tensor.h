// File: core/tensor.h
//
// The plain tensor types that core/ speaks instead of protobuf:
//   TensorView        read-only, non-owning: dtype, shape, and either packed bytes or string
//                     pointers. The server builds one over a parsed request without copying it.
//   MutableTensorView a writable output slot of the same form (bytes sized by the caller, or
//                     pre-created strings), e.g. straight inside a response message.
//   Tensor            owns its storage; move-only (Clone() copies, for tests).
//
// Storage layout (identical to the wire's Tensor.data): row-major, little-endian, packed; bool
// is one byte 0/1; complex is (real, imag). Strings are one std::string per element, reached
// through an array of pointers so that protobuf's RepeatedPtrField<std::string> (whose data()
// is exactly such an array) can be viewed in place.
//
// Thread-safety: views are plain values; concurrent reads are safe, writes need the caller's
// synchronisation. A view never outlives the storage it points to (caller's duty).

#ifndef TENSORCOMPUTE_CORE_TENSOR_H_
#define TENSORCOMPUTE_CORE_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/shape.h"

namespace tensorcompute::core {

struct TensorView {
  DataType dtype = DataType::kUnspecified;
  Shape shape;                                   // empty = scalar
  absl::Span<const uint8_t> data;                // all but kString
  absl::Span<const std::string* const> strings;  // kString only, one per element

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

struct MutableTensorView {
  DataType dtype = DataType::kUnspecified;
  Shape shape;
  absl::Span<uint8_t> data;                // all but kString; exactly output bytes long
  absl::Span<std::string* const> strings;  // kString only; one existing string per element
};

// Checks that `dtype` is one of kAllDataTypes. Returns OK, or INVALID_ARGUMENT whose message
// starts with `name` and lists the known types: "params: dtype is unspecified; expected one of
// bool, int8, ..., string" for kUnspecified, "params: unknown dtype 99; expected one of ..."
// for a number that names no type.
absl::Status ValidateDataType(DataType dtype, absl::string_view name);

// Checks that `t` is a well-formed tensor: a known dtype (ValidateDataType), at most
// `max_rank` dimensions, none negative, an element count that fits int64 (CheckedNumElements),
// and storage that matches: data of exactly elements x element-size bytes (and no strings), or
// exactly one string per element (and no data) for kString.
// Returns OK or INVALID_ARGUMENT whose message starts with `name` ("params", "indices") and
// states what was found and what was expected.
absl::Status ValidateTensor(const TensorView& t, absl::string_view name, int64_t max_rank);

// Returns true if `a` and `b` have the same dtype and shape and identical bytes or strings.
bool IdenticalTensors(const TensorView& a, const TensorView& b);

namespace internal {
// Frees Tensor storage with the alignment that its size chose.
struct AlignedFree {
  size_t bytes = 0;  // the size asked for
  void operator()(uint8_t* p) const;
};
}  // namespace internal

class Tensor {
 public:
  // An empty float32 tensor of shape [0].
  Tensor();

  // A tensor of `dtype` and `shape` whose bytes are uninitialised (fixed-size dtypes) or whose
  // strings are empty. Returns INVALID_ARGUMENT for kUnspecified, a negative dimension or an
  // element count that overflows.
  static absl::StatusOr<Tensor> Allocate(DataType dtype, Shape shape);

  // A tensor holding a copy of `bytes`. Returns INVALID_ARGUMENT when the byte count does not
  // match the shape (ValidateTensor's rules).
  static absl::StatusOr<Tensor> FromBytes(DataType dtype, Shape shape,
                                          absl::Span<const uint8_t> bytes);

  // A kString tensor. Returns INVALID_ARGUMENT when the count does not match the shape.
  static absl::StatusOr<Tensor> FromStrings(Shape shape, std::vector<std::string> strings);

  // A tensor of C++ values (bool stored as one byte). REQUIRES: values.size() equals the
  // shape's element count and sizeof(T) == ElementSize(dtype).
  template <typename T>
  static Tensor FromValues(DataType dtype, Shape shape, absl::Span<const T> values) {
    auto t = Allocate(dtype, std::move(shape));
    if (!values.empty()) {  // an empty span's data() may be null: no memcpy then
      std::memcpy(t->bytes_.get(), values.data(), values.size() * sizeof(T));
    }
    return *std::move(t);
  }

  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // A deep copy. Only tests use it: the request path never copies a tensor it can move.
  Tensor Clone() const;

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return num_elements_; }
  absl::Span<const uint8_t> bytes() const { return {bytes_.get(), num_bytes_}; }
  absl::Span<uint8_t> mutable_bytes() { return {bytes_.get(), num_bytes_}; }
  const std::vector<std::string>& strings() const { return strings_; }

  // Typed read access. REQUIRES: sizeof(T) == ElementSize(dtype()).
  template <typename T>
  absl::Span<const T> values() const {
    return {reinterpret_cast<const T*>(bytes_.get()), static_cast<size_t>(num_elements_)};
  }

  TensorView view() const;
  MutableTensorView mutable_view();

 private:
  DataType dtype_ = DataType::kFloat32;
  Shape shape_ = {0};
  int64_t num_elements_ = 0;
  size_t num_bytes_ = 0;
  // 64-byte aligned; from 4 MiB on, 2 MiB aligned and advised for huge pages.
  std::unique_ptr<uint8_t[], internal::AlignedFree> bytes_;
  std::vector<std::string> strings_;
  std::vector<std::string*> string_ptrs_;  // &strings_[i]; stable across moves
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_TENSOR_H_
