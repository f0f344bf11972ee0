#include "tests/testing/random_embedding_bag.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
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

}  // namespace tensorcompute::testing
