// File: tests/testing/random_embedding_bag.h
//
// Random EmbeddingBag calls for the tests that send them through the server (the service's and
// the C++ client's), each with its expected answer: core::EmbeddingBag's, itself checked
// against a slow reference in tests/core/embedding_bag_test.cc. The generator is the caller's
// (a fixed seed, so every failure reproduces). Thread-safety: nothing here is shared.

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
};

// A random valid call (every index value in range, so the answer is OK): params float16,
// bfloat16, float32 or float64 [1..40, 1..70]; every mode; int32 or int64 indices; fixed bags
// [0..300, 0..6] (a third of the time) or offsets (int32 or int64) for 0..300 bags of 0..9,
// with or without include_last_offset; weights (float32 or the params' dtype) half the time
// when the mode is not MAX; padding_idx a quarter of the time.
EmbeddingBagCase RandomEmbeddingBagCase(Rng& rng);

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_RANDOM_EMBEDDING_BAG_H_
