// File: tests/testing/random_embedding_bag.h
//
// Random EmbeddingBag calls for the tests that send them through the server (the service's and
// the C++ client's) or through the CUDA path (tests/cuda), each with its expected answer:
// core::EmbeddingBag's, itself checked against a slow reference in
// tests/core/embedding_bag_test.cc. The generator is the caller's (a fixed seed, so every
// failure reproduces). Thread-safety: nothing here is shared.

#ifndef TENSORCOMPUTE_TESTS_TESTING_RANDOM_EMBEDDING_BAG_H_
#define TENSORCOMPUTE_TESTS_TESTING_RANDOM_EMBEDDING_BAG_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

#include "core/embedding_bag.h"
#include "core/tensor.h"
#include "tests/testing/random_tensor.h"

namespace tensorcompute::testing {

// One call, in core's terms: what core::EmbeddingBag is called with.
struct EmbeddingBagCase {
  core::Tensor params;
  core::Tensor indices;
  std::optional<core::Tensor> offsets;  // unset: fixed bags (rank-2 indices)
  std::optional<core::Tensor> weights;  // unset: every weight 1
  core::EmbeddingBagOptions options;

  // "params float32 [7,3], indices [12], offsets, weights, mode MEAN, padding_idx -2".
  std::string DebugString() const;

  // core::EmbeddingBag of the case: the answer the server must give, byte for byte.
  absl::StatusOr<core::Tensor> Expected() const;
  // core::PlanEmbeddingBag of the case.
  absl::StatusOr<core::EmbeddingBagPlan> Plan() const;
  // Views of offsets / weights; empty views when unset.
  core::TensorView offsets_view() const { return offsets ? offsets->view() : core::TensorView(); }
  core::TensorView weights_view() const { return weights ? weights->view() : core::TensorView(); }
};

// A random valid call (every index value in range, so the answer is OK): params float16,
// bfloat16, float32 or float64 [1..40, 1..70]; every mode; int32 or int64 indices; fixed bags
// [0..300, 0..6] (a third of the time) or offsets (int32 or int64) for 0..300 bags of 0..9,
// with or without include_last_offset; weights (float32 or the params' dtype) half the time
// when the mode is not MAX; padding_idx a quarter of the time.
EmbeddingBagCase RandomEmbeddingBagCase(Rng& rng);

// How a controlled random call gives its bags.
enum class BagForm { kOffsets, kIncludeLastOffset, kFixed };

// What a controlled random call looks like, for tests that sweep every combination.
struct RandomBagOptions {
  core::EmbeddingBagMode mode = core::EmbeddingBagMode::kSum;
  core::DataType dtype = core::DataType::kFloat32;  // float16, bfloat16, float32 or float64
  bool weighted = false;                            // REQUIRES: false with kMax
  BagForm form = BagForm::kOffsets;
  int64_t bags = 1;
  int64_t max_rows = 40;               // rows uniform in [1, max_rows]
  int64_t max_dim = 40;                // dim uniform in [1, max_dim] ...
  double zero_dim_probability = 0.0;   // ... or 0 with this chance
  int64_t max_bag_size = 6;            // indices per bag uniform in [1, max_bag_size] ...
  double empty_bag_probability = 0.2;  // ... or 0 with this chance (offsets forms)
  double padding_probability = 0.5;    // chance of a padding_idx (uniform in [-rows, rows))
  // Set: the call's params are a copy of this [rows, dim] tensor of `dtype` (a resident
  // table's, say) instead of a random one; max_rows, max_dim and zero_dim_probability unused.
  const core::Tensor* params = nullptr;
};

// A random valid call as `options` describe: params values mostly in [-8, 8], sometimes NaN,
// an infinity or a signed zero; int32 or int64 indices (uniform in [-rows, rows)) and
// offsets; weights (float32 or the params' dtype) in [-2, 2], sometimes 0.
EmbeddingBagCase RandomEmbeddingBagCase(const RandomBagOptions& options, Rng& rng);

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_RANDOM_EMBEDDING_BAG_H_
