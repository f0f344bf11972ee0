#include "tests/testing/reference_gather.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/dtype.h"

namespace tensorcompute::testing {
namespace {

using core::DataType;
using core::Shape;
using core::Tensor;
using core::TensorView;

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The row-major multi-index of `flat` within `shape`. REQUIRES: 0 <= flat < NumElements.
std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

// The row-major flat position of `index` within `shape`.
int64_t Ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + index[i];
  return flat;
}

// Copies params element `from` to output element `to`.
void CopyElement(const TensorView& params, int64_t from, const core::MutableTensorView& output,
                 int64_t to) {
  if (params.dtype == DataType::kString) {
    *output.strings[to] = *params.strings[from];
    return;
  }
  const size_t size = core::ElementSize(params.dtype);
  std::memcpy(output.data.data() + to * size, params.data.data() + from * size, size);
}

// Checks every index value, lowest flat position first. `dim_of(position)` is the size of
// the params dimension that the value at `position` indexes.
template <typename DimOf>
absl::Status CheckIndexValues(const TensorView& indices, DimOf dim_of) {
  const int64_t n = NumElements(indices.shape);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t v = ReadIndexValue(indices, p);
    const int64_t dim = dim_of(p);
    if (v < -dim || v >= dim) {
      return absl::InvalidArgumentError(ExpectedBadIndexMessage(indices.shape, p, v, dim));
    }
  }
  return absl::OkStatus();
}

int64_t Wrap(int64_t v, int64_t dim) { return v < 0 ? v + dim : v; }

}  // namespace

int64_t ReadIndexValue(const TensorView& indices, int64_t position) {
  if (indices.dtype == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, indices.data.data() + position * sizeof(v), sizeof(v));
    return v;
  }
  int64_t v;
  std::memcpy(&v, indices.data.data() + position * sizeof(v), sizeof(v));
  return v;
}

std::string ExpectedBadIndexMessage(const Shape& indices_shape, int64_t position, int64_t value,
                                    int64_t dim) {
  std::string where;
  if (!indices_shape.empty()) {
    where = absl::StrCat("[", absl::StrJoin(Unravel(position, indices_shape), ","), "]");
  }
  return absl::StrCat("indices", where, " = ", value, " is not in [-", dim, ", ", dim, ")");
}

absl::StatusOr<Tensor> RunReference(const GatherRequest& request) {
  return request.nd
             ? ReferenceGatherNd(request.params.view(), request.indices.view(), request.batch_dims)
             : ReferenceGather(request.params.view(), request.indices.view(), request.axis,
                               request.batch_dims);
}

::testing::AssertionResult AgreesWithReference(const absl::StatusOr<Tensor>& actual,
                                               const absl::StatusOr<Tensor>& expected) {
  if (expected.ok()) {
    if (!actual.ok()) {
      return ::testing::AssertionFailure()
             << "core failed with " << actual.status() << "; the reference gives "
             << TensorDebugString(expected->view());
    }
    if (!core::IdenticalTensors(actual->view(), expected->view())) {
      return ::testing::AssertionFailure()
             << "core gives " << TensorDebugString(actual->view()) << "\nthe reference gives "
             << TensorDebugString(expected->view());
    }
    return ::testing::AssertionSuccess();
  }
  if (actual.ok()) {
    return ::testing::AssertionFailure()
           << "core succeeded with " << TensorDebugString(actual->view())
           << "; the reference fails with " << expected.status();
  }
  const std::string want(expected.status().message());
  const std::string got(actual.status().message());
  if (actual.status().code() != expected.status().code()) {
    return ::testing::AssertionFailure()
           << "core fails with " << actual.status() << "; the reference with " << expected.status();
  }
  if (absl::EndsWith(want, "is not in [-0, 0)")) {
    const std::string prefix = want.substr(0, want.size() - std::strlen("not in [-0, 0)"));
    if (!absl::StartsWith(got, prefix)) {
      return ::testing::AssertionFailure()
             << "core fails with \"" << got << "\"; expected it to start with \"" << prefix << "\"";
    }
  } else if (got != want) {
    return ::testing::AssertionFailure()
           << "core fails with \"" << got << "\"; expected \"" << want << "\"";
  }
  return ::testing::AssertionSuccess();
}

std::string TensorDebugString(const TensorView& t) {
  constexpr int64_t kMaxShown = 64;
  const int64_t n = NumElements(t.shape);
  std::string out =
      absl::StrCat(core::DataTypeName(t.dtype), "[", absl::StrJoin(t.shape, ","), "]{");
  const size_t size = core::ElementSize(t.dtype);
  for (int64_t i = 0; i < n && i < kMaxShown; ++i) {
    if (i > 0) absl::StrAppend(&out, ", ");
    if (t.dtype == DataType::kString) {
      absl::StrAppend(&out, "\"", absl::CHexEscape(*t.strings[i]), "\"");
      continue;
    }
    uint64_t lo = 0, hi = 0;  // hi: the upper half of a 16-byte element
    std::memcpy(&lo, t.data.data() + i * size, std::min<size_t>(size, 8));
    if (size == 16) std::memcpy(&hi, t.data.data() + i * size + 8, 8);
    switch (t.dtype) {
      case DataType::kInt8:
        absl::StrAppend(&out, static_cast<int8_t>(lo));
        break;
      case DataType::kInt16:
        absl::StrAppend(&out, static_cast<int16_t>(lo));
        break;
      case DataType::kInt32:
        absl::StrAppend(&out, static_cast<int32_t>(lo));
        break;
      case DataType::kInt64:
        absl::StrAppend(&out, static_cast<int64_t>(lo));
        break;
      case DataType::kBool:
      case DataType::kUint8:
      case DataType::kUint16:
      case DataType::kUint32:
      case DataType::kUint64:
        absl::StrAppend(&out, lo);
        break;
      default:
        absl::StrAppend(&out, "0x",
                        size == 16 ? absl::StrCat(absl::Hex(hi, absl::kZeroPad16)) : std::string(),
                        absl::Hex(lo, size == 16 ? absl::kZeroPad16 : absl::kNoPad));
    }
  }
  if (n > kMaxShown) absl::StrAppend(&out, ", ...");
  return absl::StrCat(out, "}");
}

absl::StatusOr<Tensor> ReferenceGather(const TensorView& params, const TensorView& indices,
                                       std::optional<int64_t> axis_arg, int64_t batch_dims) {
  const int64_t r = params.rank();
  const int64_t q = indices.rank();
  const int64_t b = batch_dims < 0 ? batch_dims + q : batch_dims;
  int64_t axis = axis_arg.value_or(b);
  if (axis < 0) axis += r;
  const int64_t dim = params.shape[axis];

  if (absl::Status s = CheckIndexValues(indices, [dim](int64_t) { return dim; }); !s.ok()) {
    return s;
  }

  // output.shape = params.shape[:axis] + indices.shape[b:] + params.shape[axis + 1:]
  Shape out_shape(params.shape.begin(), params.shape.begin() + axis);
  out_shape.insert(out_shape.end(), indices.shape.begin() + b, indices.shape.end());
  out_shape.insert(out_shape.end(), params.shape.begin() + axis + 1, params.shape.end());
  absl::StatusOr<Tensor> output = Tensor::Allocate(params.dtype, out_shape);
  if (!output.ok()) return output.status();

  const core::MutableTensorView out_view = output->mutable_view();
  const int64_t n = NumElements(out_shape);
  const int64_t num_index_dims = q - b;
  for (int64_t o = 0; o < n; ++o) {
    const std::vector<int64_t> out = Unravel(o, out_shape);
    // The indices multi-index: the batch coordinates (the first b output coordinates, which
    // are also params' first b) followed by the output coordinates at [axis, axis + q - b).
    std::vector<int64_t> in(out.begin(), out.begin() + b);
    in.insert(in.end(), out.begin() + axis, out.begin() + axis + num_index_dims);
    const int64_t v = ReadIndexValue(indices, Ravel(in, indices.shape));
    // The params multi-index: out[:axis], the index value, then the trailing coordinates.
    std::vector<int64_t> p(out.begin(), out.begin() + axis);
    p.push_back(Wrap(v, dim));
    p.insert(p.end(), out.begin() + axis + num_index_dims, out.end());
    CopyElement(params, Ravel(p, params.shape), out_view, o);
  }
  return output;
}

absl::StatusOr<Tensor> ReferenceGatherNd(const TensorView& params, const TensorView& indices,
                                         int64_t batch_dims) {
  const int64_t q = indices.rank();
  const int64_t b = batch_dims;
  const int64_t depth = indices.shape[q - 1];

  if (absl::Status s =
          CheckIndexValues(indices, [&](int64_t p) { return params.shape[b + p % depth]; });
      !s.ok()) {
    return s;
  }

  // output.shape = indices.shape[:-1] + params.shape[b + depth:]
  Shape out_shape(indices.shape.begin(), indices.shape.end() - 1);
  out_shape.insert(out_shape.end(), params.shape.begin() + b + depth, params.shape.end());
  absl::StatusOr<Tensor> output = Tensor::Allocate(params.dtype, out_shape);
  if (!output.ok()) return output.status();

  const core::MutableTensorView out_view = output->mutable_view();
  const int64_t n = NumElements(out_shape);
  for (int64_t o = 0; o < n; ++o) {
    const std::vector<int64_t> out = Unravel(o, out_shape);
    // The index tuple sits at indices[out[:q-1], 0..depth-1].
    std::vector<int64_t> in(out.begin(), out.begin() + (q - 1));
    in.push_back(0);
    std::vector<int64_t> p(out.begin(), out.begin() + b);
    for (int64_t k = 0; k < depth; ++k) {
      in.back() = k;
      p.push_back(Wrap(ReadIndexValue(indices, Ravel(in, indices.shape)), params.shape[b + k]));
    }
    p.insert(p.end(), out.begin() + (q - 1), out.end());
    CopyElement(params, Ravel(p, params.shape), out_view, o);
  }
  return output;
}

}  // namespace tensorcompute::testing
