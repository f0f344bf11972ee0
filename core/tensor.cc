#include "core/tensor.h"

#include <new>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <sys/mman.h>

#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

constexpr std::align_val_t kAlignment{64};

// From this size on, storage is aligned to and advised for transparent huge pages (as NumPy
// does for large arrays): the first touch of a fresh buffer then faults 2 MiB at a time
// instead of 4 KiB, which costs several times less on our VMs, and random reads of a large
// tensor stop missing the TLB.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kAdviseHugePagesFrom = size_t{4} << 20;

uint8_t* AllocateBytes(size_t bytes) {
  if (bytes < kAdviseHugePagesFrom) {
    return static_cast<uint8_t*>(::operator new[](bytes ? bytes : 1, kAlignment));
  }
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  auto* p = static_cast<uint8_t*>(::operator new[](rounded, std::align_val_t{kHugePageBytes}));
#if defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: on failure the pages stay 4 KiB
#endif
  return p;
}

// "an int32", "a float32": the article for a dtype name in a message.
const char* Article(absl::string_view name) {
  return !name.empty() && absl::string_view("aeiou").find(name[0]) != absl::string_view::npos ? "an"
                                                                                              : "a";
}

std::string KnownTypeNames() {
  std::vector<std::string> names;
  for (DataType d : kAllDataTypes) names.push_back(DataTypeName(d));
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status ValidateDataType(DataType dtype, absl::string_view name) {
  if (DataTypeFromInt(static_cast<int32_t>(dtype))) return absl::OkStatus();
  if (dtype == DataType::kUnspecified) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype is unspecified; expected one of ", KnownTypeNames()));
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": unknown dtype ",
                                                 static_cast<int32_t>(dtype), "; expected one of ",
                                                 KnownTypeNames()));
}

absl::Status ValidateTensor(const TensorView& t, absl::string_view name, int64_t max_rank) {
  TC_RETURN_IF_ERROR(ValidateDataType(t.dtype, name));
  if (t.rank() > max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": rank ", t.rank(), " exceeds the maximum rank ", max_rank));
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": dimension ", i, " is ", t.shape[i],
                                                     " in shape ", ShapeToString(t.shape),
                                                     "; dimensions must be >= 0"));
    }
  }
  const std::optional<int64_t> n = CheckedNumElements(t.shape);
  if (!n) {
    if (absl::c_linear_search(t.shape, int64_t{0})) {  // no elements: not "too many"
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": shape ", ShapeToString(t.shape),
          ": the product of its nonzero dimensions must fit in int64, even though a dimension "
          "is 0 (the tensor is empty)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": shape ", ShapeToString(t.shape),
                     " has too many elements; the product of its dimensions must fit in int64"));
  }
  if (t.dtype == DataType::kString) {
    if (!t.data.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": a string tensor carries its values in strings, but data has ",
                       t.data.size(), " bytes; expected 0"));
    }
    if (static_cast<int64_t>(t.strings.size()) != *n) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": has ", t.strings.size(), " strings but shape ",
                       ShapeToString(t.shape), " has ", *n, " elements; expected one string each"));
    }
    return absl::OkStatus();
  }
  if (!t.strings.empty()) {
    const std::string type = DataTypeName(t.dtype);
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", Article(type), " ", type,
                                                   " tensor carries its values in data, but has ",
                                                   t.strings.size(), " strings; expected 0"));
  }
  const size_t elem = ElementSize(t.dtype);
  const std::optional<int64_t> bytes = CheckedMul(*n, static_cast<int64_t>(elem));
  if (!bytes || static_cast<uint64_t>(*bytes) != t.data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": data has ", t.data.size(), " bytes but shape ", ShapeToString(t.shape), " of ",
        DataTypeName(t.dtype), " needs ", *n, " elements x ", elem,
        " bytes = ", bytes ? absl::StrCat(*bytes) : std::string("more than 2^63"), " bytes"));
  }
  return absl::OkStatus();
}

bool IdenticalTensors(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  if (a.dtype == DataType::kString) {
    if (a.strings.size() != b.strings.size()) return false;
    for (size_t i = 0; i < a.strings.size(); ++i) {
      if (*a.strings[i] != *b.strings[i]) return false;
    }
    return true;
  }
  return a.data.size() == b.data.size() &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
}

void internal::AlignedFree::operator()(uint8_t* p) const {
  if (bytes < kAdviseHugePagesFrom) {
    ::operator delete[](p, kAlignment);
  } else {
    ::operator delete[](p, std::align_val_t{kHugePageBytes});
  }
}

Tensor::Tensor() = default;

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype, Shape shape) {
  if (dtype == DataType::kUnspecified || !DataTypeFromInt(static_cast<int32_t>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate a tensor of ", DataTypeName(dtype)));
  }
  const std::optional<int64_t> n = CheckedNumElements(shape);
  const std::optional<int64_t> bytes =
      n ? CheckedMul(*n, static_cast<int64_t>(ElementSize(dtype))) : std::nullopt;
  if (!bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate a tensor of shape ", ShapeToString(shape)));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.num_elements_ = *n;
  if (dtype == DataType::kString) {
    t.strings_.resize(*n);
    t.string_ptrs_.reserve(*n);
    for (std::string& s : t.strings_) t.string_ptrs_.push_back(&s);
  } else {
    t.num_bytes_ = static_cast<size_t>(*bytes);
    // Uninitialised on purpose: every byte is written by whoever fills the tensor.
    t.bytes_ = std::unique_ptr<uint8_t[], internal::AlignedFree>(
        AllocateBytes(t.num_bytes_), internal::AlignedFree{t.num_bytes_});
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DataType dtype, Shape shape,
                                         absl::Span<const uint8_t> bytes) {
  TensorView v{dtype, shape, bytes, {}};
  if (absl::Status s = ValidateTensor(v, "tensor", 1 << 20); !s.ok()) return s;
  if (dtype == DataType::kString) {
    return absl::InvalidArgumentError("FromBytes cannot make a string tensor");
  }
  absl::StatusOr<Tensor> t = Allocate(dtype, std::move(shape));
  if (t.ok() && !bytes.empty()) std::memcpy(t->bytes_.get(), bytes.data(), bytes.size());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromStrings(Shape shape, std::vector<std::string> strings) {
  absl::StatusOr<Tensor> t = Allocate(DataType::kString, std::move(shape));
  if (!t.ok()) return t.status();
  if (static_cast<int64_t>(strings.size()) != t->num_elements_) {
    return absl::InvalidArgumentError(absl::StrCat("tensor: has ", strings.size(),
                                                   " strings but shape ", ShapeToString(t->shape_),
                                                   " has ", t->num_elements_, " elements"));
  }
  for (size_t i = 0; i < strings.size(); ++i) t->strings_[i] = std::move(strings[i]);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = *Allocate(dtype_, shape_);
  if (num_bytes_ > 0) std::memcpy(t.bytes_.get(), bytes_.get(), num_bytes_);
  for (size_t i = 0; i < strings_.size(); ++i) t.strings_[i] = strings_[i];
  return t;
}

TensorView Tensor::view() const {
  TensorView v;
  v.dtype = dtype_;
  v.shape = shape_;
  v.data = bytes();
  v.strings = absl::Span<const std::string* const>(string_ptrs_.data(), string_ptrs_.size());
  return v;
}

MutableTensorView Tensor::mutable_view() {
  MutableTensorView v;
  v.dtype = dtype_;
  v.shape = shape_;
  v.data = mutable_bytes();
  v.strings = absl::Span<std::string* const>(string_ptrs_.data(), string_ptrs_.size());
  return v;
}

}  // namespace tensorcompute::core
