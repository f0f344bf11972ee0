// File: tests/testing/random_tensor.h
//
// Tensors for tests: literal ones written out in a test (MakeTensor, MakeStrings,
// MakeIndices), and random ones drawn from a caller-owned std::mt19937_64 with a fixed seed,
// so every failure reproduces. Random numeric tensors are random bytes (NaN payloads and all:
// gather compares bytes, never values), bools are 0 or 1, strings are 0 to 12 random bytes.
// Thread-safety: the generator is the caller's; nothing here is shared.

#ifndef TENSORCOMPUTE_TESTS_TESTING_RANDOM_TENSOR_H_
#define TENSORCOMPUTE_TESTS_TESTING_RANDOM_TENSOR_H_

#include <complex>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::testing {

using Rng = std::mt19937_64;

// ---- Literal tensors ----

// The DataType of a C++ element type (the fixed-width integers, float, double,
// std::complex<float>, std::complex<double>; bool maps to kBool but has no MakeTensor, since
// std::vector<bool> is not contiguous).
template <typename T>
constexpr core::DataType DataTypeOf();

// A tensor of `values` whose dtype follows from T. REQUIRES: values.size() matches `shape`.
template <typename T>
core::Tensor MakeTensor(core::Shape shape, const std::vector<T>& values) {
  // Tensor::FromValues memcpy()s from values.data(), which is null for an empty vector.
  if (values.empty()) return *core::Tensor::Allocate(DataTypeOf<T>(), std::move(shape));
  return core::Tensor::FromValues<T>(DataTypeOf<T>(), std::move(shape), values);
}

// A kString tensor. REQUIRES: values.size() matches `shape`.
core::Tensor MakeStrings(core::Shape shape, std::vector<std::string> values);

// An int32 or int64 tensor of `values`. REQUIRES: values fit the type and match `shape`.
core::Tensor MakeIndices(core::DataType index_dtype, core::Shape shape,
                         const std::vector<int64_t>& values);

// ---- Random tensors ----

// A uniform integer in [lo, hi].
int64_t UniformInt(Rng& rng, int64_t lo, int64_t hi);

// True with probability p.
bool Chance(Rng& rng, double p);

// A random tensor of `dtype` and `shape` (see the file comment for the values).
core::Tensor RandomTensor(core::DataType dtype, const core::Shape& shape, Rng& rng);

// `rank` dimensions, each 0 with probability zero_probability, else uniform in [1, max_dim].
core::Shape RandomShape(int64_t rank, Rng& rng, int64_t max_dim = 4,
                        double zero_probability = 0.08);

// Random valid index values of `index_dtype` and `shape`: the value at flat position p is
// uniform in [-d, d) for d = component_dims[p % component_dims.size()] (negative values
// included). Pass {s} for Gather, the indexed dims for GatherNd.
// REQUIRES: every d > 0, or `shape` has no elements.
core::Tensor RandomIndices(core::DataType index_dtype, const core::Shape& shape,
                           absl::Span<const int64_t> component_dims, Rng& rng);

// A value that `index_dtype` can hold but that lies outside [-dim, dim): just past either end,
// far away, or the type's extremes.
int64_t RandomOutOfRangeValue(int64_t dim, core::DataType index_dtype, Rng& rng);

// Overwrites the index value at flat position `position`. REQUIRES: it fits the dtype.
void SetIndexValue(core::Tensor& indices, int64_t position, int64_t value);

// ---- Random gather requests ----

// One Gather or GatherNd request, as the randomized tests draw them.
struct GatherRequest {
  bool nd = false;  // GatherNd if true
  core::Tensor params;
  core::Tensor indices;
  std::optional<int64_t> axis;  // Gather only; may be negative or unset
  int64_t batch_dims = 0;       // may be negative for Gather

  // A deep copy (Tensor is move-only).
  GatherRequest Clone() const;

  // "Gather(params int8[2,0,3], indices int32[4], axis=-1, batch_dims=0)".
  std::string DebugString() const;
};

struct RandomRequestOptions {
  int64_t min_params_rank = 1;
  int64_t max_params_rank = 6;
  int64_t max_indices_rank = 6;    // Gather; GatherNd indices have up to this + 1 dims
  int64_t max_dim = 4;             // nonzero dimensions are uniform in [1, max_dim]
  double zero_probability = 0.03;  // chance that a dimension is 0
  int64_t max_elements = 2048;     // cap on the params' and the output's element counts
  double negative_args = 0.5;      // chance of a negative axis / batch_dims spelling
};

// A random valid Gather request: params rank min_params_rank..max_params_rank, indices rank
// 0..max_indices_rank (scalars included), batch_dims and axis uniform over their legal values
// (spelled negatively or left unset at random). Index values are uniform in [-s, s) of the
// dimension they index, except when that dimension is 0: then every value is out of range.
GatherRequest RandomGatherRequest(core::DataType dtype, core::DataType index_dtype, Rng& rng,
                                  const RandomRequestOptions& options = {});

// A random valid GatherNd request: batch_dims in [0, rank(params)), depth in
// [1, rank(params) - batch_dims]. Index values as RandomGatherRequest.
GatherRequest RandomGatherNdRequest(core::DataType dtype, core::DataType index_dtype, Rng& rng,
                                    const RandomRequestOptions& options = {});

// The size of the params dimension indexed by each component of an index tuple: one entry
// (params.shape[axis]) for Gather, `depth` entries for GatherNd.
std::vector<int64_t> IndexedDims(const GatherRequest& request);

// Overwrites `count` random flat positions of request.indices with out-of-range values.
// Returns the lowest position written. REQUIRES: indices has at least one element.
int64_t InjectOutOfRangeIndices(GatherRequest& request, int count, Rng& rng);

// ---- implementation details ----

template <typename T>
constexpr core::DataType DataTypeOf() {
  using core::DataType;
  if constexpr (std::is_same_v<T, bool>) return DataType::kBool;
  if constexpr (std::is_same_v<T, int8_t>) return DataType::kInt8;
  if constexpr (std::is_same_v<T, int16_t>) return DataType::kInt16;
  if constexpr (std::is_same_v<T, int32_t>) return DataType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DataType::kInt64;
  if constexpr (std::is_same_v<T, uint8_t>) return DataType::kUint8;
  if constexpr (std::is_same_v<T, uint16_t>) return DataType::kUint16;
  if constexpr (std::is_same_v<T, uint32_t>) return DataType::kUint32;
  if constexpr (std::is_same_v<T, uint64_t>) return DataType::kUint64;
  if constexpr (std::is_same_v<T, float>) return DataType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DataType::kFloat64;
  if constexpr (std::is_same_v<T, std::complex<float>>) return DataType::kComplex64;
  if constexpr (std::is_same_v<T, std::complex<double>>) return DataType::kComplex128;
  return DataType::kUnspecified;
}

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_RANDOM_TENSOR_H_
