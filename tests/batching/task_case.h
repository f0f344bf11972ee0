// File: tests/batching/task_case.h
//
// What executor tests (CPU and CUDA) share: a request with everything a batching::Task points
// into, kept alive by the test (Case for a gather, BagCase for an EmbeddingBag), the Task over
// it whose done records the outcome (MakeTask, MakeBagTask), and a check that an uncomputed
// output was never written (SentinelIntact).
// Thread-safety: a Case is written by its task's done (once) and read by the test after the
// batch finished.

#ifndef TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_
#define TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/batching/task.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"

namespace tensorcompute::batching::test_support {

// The byte an output starts filled with, so that a test can tell it was never written.
inline constexpr uint8_t kSentinel = 0xAB;

struct Case {
  tensorcompute::testing::GatherRequest req;
  core::GatherPlan plan;
  core::Tensor output;  // fixed-size dtypes start filled with kSentinel
  absl::Status got = absl::UnknownError("done was never called");
  std::atomic<int> calls{0};

  // The answer as a StatusOr, for testing::AgreesWithReference.
  absl::StatusOr<core::Tensor> Result() const {
    if (!got.ok()) return got;
    return output.Clone();
  }
};

// Plans `req` and allocates its output. Returns nullptr (and fails the test) if `req` does
// not plan.
std::unique_ptr<Case> MakeCase(tensorcompute::testing::GatherRequest req);

// A task over `c` whose done records into `c`, then runs `after` (if any).
std::unique_ptr<Task> MakeTask(Case& c, std::function<void()> after = nullptr);

// An EmbeddingBag request and what its task's done received.
struct BagCase {
  tensorcompute::testing::EmbeddingBagCase req;
  core::EmbeddingBagPlan plan;
  core::Tensor output;  // starts filled with kSentinel
  absl::Status got = absl::UnknownError("done was never called");
  std::atomic<int> calls{0};

  absl::StatusOr<core::Tensor> Result() const {
    if (!got.ok()) return got;
    return output.Clone();
  }
};

// Plans `req` and allocates its output. Returns nullptr (and fails the test) if `req` does
// not plan.
std::unique_ptr<BagCase> MakeBagCase(tensorcompute::testing::EmbeddingBagCase req);

// A task over `c` (offsets and weights views set as the plan has them) whose done records
// into `c`, then runs `after` (if any).
std::unique_ptr<Task> MakeBagTask(BagCase& c, std::function<void()> after = nullptr);

// Whether every byte of `t` is still kSentinel.
bool SentinelIntact(const core::Tensor& t);

}  // namespace tensorcompute::batching::test_support

#endif  // TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_
