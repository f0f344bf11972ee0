#include "tests/testing/random_tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorcompute::testing {

using core::DataType;
using core::Shape;
using core::Tensor;

Tensor MakeStrings(Shape shape, std::vector<std::string> values) {
  return *Tensor::FromStrings(std::move(shape), std::move(values));
}

Tensor MakeIndices(DataType index_dtype, Shape shape, const std::vector<int64_t>& values) {
  if (index_dtype == DataType::kInt64) return MakeTensor<int64_t>(std::move(shape), values);
  return MakeTensor<int32_t>(std::move(shape), std::vector<int32_t>(values.begin(), values.end()));
}

int64_t UniformInt(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool Chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

Tensor RandomTensor(DataType dtype, const Shape& shape, Rng& rng) {
  Tensor t = *Tensor::Allocate(dtype, shape);
  if (dtype == DataType::kString) {
    core::MutableTensorView v = t.mutable_view();
    for (std::string* s : v.strings) {
      s->resize(UniformInt(rng, 0, 12));
      for (char& c : *s) c = static_cast<char>(UniformInt(rng, 0, 255));
    }
    return t;
  }
  absl::Span<uint8_t> bytes = t.mutable_bytes();
  if (dtype == DataType::kBool) {
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(UniformInt(rng, 0, 1));
    return t;
  }
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const uint64_t word = rng();
    std::memcpy(bytes.data() + i, &word, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return t;
}

Shape RandomShape(int64_t rank, Rng& rng, int64_t max_dim, double zero_probability) {
  Shape shape(rank);
  for (int64_t& d : shape) d = Chance(rng, zero_probability) ? 0 : UniformInt(rng, 1, max_dim);
  return shape;
}

Tensor RandomIndices(DataType index_dtype, const Shape& shape,
                     absl::Span<const int64_t> component_dims, Rng& rng) {
  Tensor t = *Tensor::Allocate(index_dtype, shape);
  for (int64_t p = 0; p < t.num_elements(); ++p) {
    const int64_t d = component_dims[p % component_dims.size()];
    SetIndexValue(t, p, UniformInt(rng, -d, d - 1));
  }
  return t;
}

int64_t RandomOutOfRangeValue(int64_t dim, DataType index_dtype, Rng& rng) {
  const int64_t lowest = index_dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::min()
                                                         : std::numeric_limits<int64_t>::min();
  const int64_t highest = index_dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::max()
                                                          : std::numeric_limits<int64_t>::max();
  switch (UniformInt(rng, 0, 5)) {
    case 0:
      return dim;  // one past the end
    case 1:
      return -dim - 1;  // one before the start
    case 2:
      return dim + UniformInt(rng, 1, 1000);
    case 3:
      return -dim - UniformInt(rng, 1, 1000);
    case 4:
      return highest;
    default:
      return lowest;
  }
}

void SetIndexValue(Tensor& indices, int64_t position, int64_t value) {
  uint8_t* data = indices.mutable_bytes().data();
  if (indices.dtype() == DataType::kInt32) {
    const auto v = static_cast<int32_t>(value);
    std::memcpy(data + position * sizeof(v), &v, sizeof(v));
  } else {
    std::memcpy(data + position * sizeof(value), &value, sizeof(value));
  }
}

namespace {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape Concat(const Shape& a, const Shape& b) {
  Shape out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

Shape Slice(const Shape& s, size_t begin, size_t end) {
  return Shape(s.begin() + begin, s.begin() + end);
}

// Index values in range where the indexed dimension is nonzero (anything is out of range
// where it is 0).
Tensor IndicesFor(DataType index_dtype, const Shape& shape, const std::vector<int64_t>& dims,
                  Rng& rng) {
  std::vector<int64_t> nonzero = dims;
  for (int64_t& d : nonzero) d = std::max<int64_t>(d, 1);
  return RandomIndices(index_dtype, shape, nonzero, rng);
}

}  // namespace

GatherRequest GatherRequest::Clone() const {
  GatherRequest copy;
  copy.nd = nd;
  copy.params = params.Clone();
  copy.indices = indices.Clone();
  copy.axis = axis;
  copy.batch_dims = batch_dims;
  return copy;
}

std::string GatherRequest::DebugString() const {
  auto describe = [](const Tensor& t) {
    return absl::StrCat(core::DataTypeName(t.dtype()), "[", absl::StrJoin(t.shape(), ","), "]");
  };
  return absl::StrCat(nd ? "GatherNd" : "Gather", "(params ", describe(params), ", indices ",
                      describe(indices),
                      nd ? "" : absl::StrCat(", axis=", axis ? absl::StrCat(*axis) : "unset"),
                      ", batch_dims=", batch_dims, ")");
}

GatherRequest RandomGatherRequest(DataType dtype, DataType index_dtype, Rng& rng,
                                  const RandomRequestOptions& options) {
  while (true) {
    const int64_t r = UniformInt(rng, options.min_params_rank, options.max_params_rank);
    const int64_t q = UniformInt(rng, 0, options.max_indices_rank);
    const int64_t b = UniformInt(rng, 0, std::min(q, r - 1));
    const int64_t axis = UniformInt(rng, b, r - 1);
    const Shape ps = RandomShape(r, rng, options.max_dim, options.zero_probability);
    const Shape is =
        Concat(Slice(ps, 0, b), RandomShape(q - b, rng, options.max_dim, options.zero_probability));
    const Shape out = Concat(Concat(Slice(ps, 0, axis), Slice(is, b, q)), Slice(ps, axis + 1, r));
    if (NumElements(ps) > options.max_elements || NumElements(out) > options.max_elements) {
      continue;
    }
    GatherRequest req;
    req.params = RandomTensor(dtype, ps, rng);
    req.indices = IndicesFor(index_dtype, is, {ps[axis]}, rng);
    req.batch_dims = (b < q && Chance(rng, options.negative_args)) ? b - q : b;
    if (axis == b && Chance(rng, 0.3)) {
      req.axis = std::nullopt;
    } else {
      req.axis = Chance(rng, options.negative_args) ? axis - r : axis;
    }
    return req;
  }
}

GatherRequest RandomGatherNdRequest(DataType dtype, DataType index_dtype, Rng& rng,
                                    const RandomRequestOptions& options) {
  while (true) {
    const int64_t r = UniformInt(rng, options.min_params_rank, options.max_params_rank);
    const int64_t b = UniformInt(rng, 0, std::min(r - 1, options.max_indices_rank));
    const int64_t depth = UniformInt(rng, 1, r - b);
    const int64_t extra = UniformInt(rng, 0, std::max<int64_t>(0, options.max_indices_rank - b));
    const Shape ps = RandomShape(r, rng, options.max_dim, options.zero_probability);
    const Shape is = Concat(
        Concat(Slice(ps, 0, b), RandomShape(extra, rng, options.max_dim, options.zero_probability)),
        Shape{depth});
    const Shape out = Concat(Slice(is, 0, is.size() - 1), Slice(ps, b + depth, r));
    if (NumElements(ps) > options.max_elements || NumElements(out) > options.max_elements) {
      continue;
    }
    GatherRequest req;
    req.nd = true;
    req.params = RandomTensor(dtype, ps, rng);
    const Shape dims = Slice(ps, b, b + depth);
    req.indices = IndicesFor(index_dtype, is, std::vector<int64_t>(dims.begin(), dims.end()), rng);
    req.batch_dims = b;
    return req;
  }
}

std::vector<int64_t> IndexedDims(const GatherRequest& request) {
  const Shape& ps = request.params.shape();
  const int64_t r = static_cast<int64_t>(ps.size());
  if (request.nd) {
    const int64_t depth = request.indices.shape().back();
    return std::vector<int64_t>(ps.begin() + request.batch_dims,
                                ps.begin() + request.batch_dims + depth);
  }
  const int64_t q = static_cast<int64_t>(request.indices.shape().size());
  const int64_t b = request.batch_dims < 0 ? request.batch_dims + q : request.batch_dims;
  int64_t axis = request.axis.value_or(b);
  if (axis < 0) axis += r;
  return {ps[axis]};
}

int64_t InjectOutOfRangeIndices(GatherRequest& request, int count, Rng& rng) {
  const std::vector<int64_t> dims = IndexedDims(request);
  const int64_t n = request.indices.num_elements();
  int64_t lowest = n;
  for (int i = 0; i < count; ++i) {
    const int64_t p = UniformInt(rng, 0, n - 1);
    const int64_t dim = dims[p % dims.size()];
    SetIndexValue(request.indices, p, RandomOutOfRangeValue(dim, request.indices.dtype(), rng));
    lowest = std::min(lowest, p);
  }
  return lowest;
}

}  // namespace tensorcompute::testing
