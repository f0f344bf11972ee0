#include "tests/testing/random_embedding_bag.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "core/half_float.h"
#include "core/shape.h"

namespace tensorcompute::testing {

using core::DataType;
using core::EmbeddingBagMode;

std::string EmbeddingBagCase::DebugString() const {
  return absl::StrCat(
      "params ", core::DataTypeName(params.dtype()), " ", core::ShapeToString(params.shape()),
      ", indices ", core::ShapeToString(indices.shape()), offsets ? ", offsets" : "",
      weights ? ", weights" : "", ", mode ", core::EmbeddingBagModeName(options.mode),
      options.include_last_offset ? ", include_last_offset" : "",
      options.padding_idx ? absl::StrCat(", padding_idx ", *options.padding_idx) : "");
}

absl::StatusOr<core::Tensor> EmbeddingBagCase::Expected() const {
  std::optional<core::TensorView> o, w;
  if (offsets) o = offsets->view();
  if (weights) w = weights->view();
  return core::EmbeddingBag(params.view(), indices.view(), o ? &*o : nullptr, w ? &*w : nullptr,
                            options);
}

absl::StatusOr<core::EmbeddingBagPlan> EmbeddingBagCase::Plan() const {
  const core::TensorView o = offsets_view(), w = weights_view();
  return core::PlanEmbeddingBag(params.view(), indices.view(), offsets ? &o : nullptr,
                                weights ? &w : nullptr, options);
}

EmbeddingBagCase RandomEmbeddingBagCase(Rng& rng) {
  static constexpr DataType kFloats[] = {DataType::kFloat16, DataType::kBfloat16,
                                         DataType::kFloat32, DataType::kFloat64};
  static constexpr EmbeddingBagMode kModes[] = {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean,
                                                EmbeddingBagMode::kMax, EmbeddingBagMode::kSqrtn};
  EmbeddingBagCase c;
  const DataType dtype = kFloats[UniformInt(rng, 0, 3)];
  const int64_t rows = UniformInt(rng, 1, 40);
  const int64_t dim = UniformInt(rng, 1, 70);
  c.params = RandomTensor(dtype, {rows, dim}, rng);
  c.options.mode = kModes[UniformInt(rng, 0, 3)];
  const DataType index_dtype = UniformInt(rng, 0, 1) ? DataType::kInt64 : DataType::kInt32;
  const int64_t bags = UniformInt(rng, 0, 300);
  std::vector<int64_t> values;
  if (UniformInt(rng, 0, 2) == 0) {  // fixed bags
    const int64_t n = UniformInt(rng, 0, 6);
    for (int64_t i = 0; i < bags * n; ++i) values.push_back(UniformInt(rng, -rows, rows - 1));
    c.indices = MakeIndices(index_dtype, {bags, n}, values);
  } else {
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < bags; ++b) {
      starts.push_back(static_cast<int64_t>(values.size()));
      const int64_t n = UniformInt(rng, 0, 9);
      for (int64_t i = 0; i < n; ++i) values.push_back(UniformInt(rng, -rows, rows - 1));
    }
    c.options.include_last_offset = UniformInt(rng, 0, 1) == 1;
    if (c.options.include_last_offset) starts.push_back(static_cast<int64_t>(values.size()));
    const DataType offsets_dtype = UniformInt(rng, 0, 1) ? DataType::kInt64 : DataType::kInt32;
    c.offsets = MakeIndices(offsets_dtype, {static_cast<int64_t>(starts.size())}, starts);
    c.indices = MakeIndices(index_dtype, {static_cast<int64_t>(values.size())}, values);
  }
  if (c.options.mode != EmbeddingBagMode::kMax && UniformInt(rng, 0, 1) == 1) {
    c.weights =
        RandomTensor(UniformInt(rng, 0, 1) ? dtype : DataType::kFloat32, c.indices.shape(), rng);
  }
  if (UniformInt(rng, 0, 3) == 0) c.options.padding_idx = UniformInt(rng, -rows, rows - 1);
  return c;
}

namespace {

// `v` stored as `dtype` at p (float16/bfloat16 through float, round to nearest even).
void StoreValue(DataType dtype, double v, uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat16: {
      const uint16_t h = core::FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kBfloat16: {
      const uint16_t h = core::FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    default:
      std::memcpy(p, &v, 8);
  }
}

// Mostly in [-8, 8]; sometimes NaN, an infinity or a signed zero.
double RandomValue(Rng& rng) {
  if (Chance(rng, 0.02)) {
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(), -0.0, 0.0};
    return specials[UniformInt(rng, 0, 4)];
  }
  return std::uniform_real_distribution<double>(-8, 8)(rng);
}

double RandomWeight(Rng& rng) {
  return Chance(rng, 0.1) ? 0.0 : std::uniform_real_distribution<double>(-2, 2)(rng);
}

core::Tensor RandomValues(DataType dtype, const core::Shape& shape, Rng& rng,
                          double (*draw)(Rng&)) {
  core::Tensor t = *core::Tensor::Allocate(dtype, shape);
  const size_t es = core::ElementSize(dtype);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    StoreValue(dtype, draw(rng), t.mutable_bytes().data() + i * es);
  }
  return t;
}

DataType RandomIndexType(Rng& rng) {
  return Chance(rng, 0.5) ? DataType::kInt32 : DataType::kInt64;
}

}  // namespace

EmbeddingBagCase RandomEmbeddingBagCase(const RandomBagOptions& options, Rng& rng) {
  EmbeddingBagCase c;
  c.options.mode = options.mode;
  c.options.include_last_offset = options.form == BagForm::kIncludeLastOffset;
  if (options.params != nullptr) {
    c.params = options.params->Clone();
  } else {
    const int64_t rows = UniformInt(rng, 1, options.max_rows);
    const int64_t dim =
        Chance(rng, options.zero_dim_probability) ? 0 : UniformInt(rng, 1, options.max_dim);
    c.params = RandomValues(options.dtype, {rows, dim}, rng, RandomValue);
  }
  const int64_t rows = c.params.shape()[0];

  std::vector<int64_t> starts = {0};
  const int64_t fixed_size = UniformInt(rng, 0, options.max_bag_size);
  for (int64_t b = 0; b < options.bags; ++b) {
    const int64_t n = options.form == BagForm::kFixed ? fixed_size
                      : Chance(rng, options.empty_bag_probability)
                          ? 0
                          : UniformInt(rng, 1, options.max_bag_size);
    starts.push_back(starts.back() + n);
  }
  std::vector<int64_t> values(starts.back());
  for (int64_t& v : values) v = UniformInt(rng, -rows, rows - 1);
  const DataType index_dtype = RandomIndexType(rng);
  if (options.form == BagForm::kFixed) {
    c.indices = MakeIndices(index_dtype, {options.bags, fixed_size}, values);
  } else {
    c.indices = MakeIndices(index_dtype, {starts.back()}, values);
    if (!c.options.include_last_offset) starts.pop_back();
    c.offsets = MakeIndices(RandomIndexType(rng), {static_cast<int64_t>(starts.size())}, starts);
  }
  if (options.weighted) {
    const DataType wd = Chance(rng, 0.5) ? DataType::kFloat32 : options.dtype;
    c.weights = RandomValues(wd, c.indices.shape(), rng, RandomWeight);
  }
  if (Chance(rng, options.padding_probability)) {
    c.options.padding_idx = UniformInt(rng, -rows, rows - 1);
  }
  return c;
}

}  // namespace tensorcompute::testing
