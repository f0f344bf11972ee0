// File: tests/batching/task_case.h
//
// What executor tests (CPU and CUDA) share: a request with everything a batching::Task points
// into, kept alive by the test (Case for a gather, BagCase for an EmbeddingBag), the Task over
// it whose done records the outcome (MakeTask, MakeBagTask), a check that an uncomputed
// output was never written (SentinelIntact), one thread pool for every test of a binary
// (SharedPool), running a batch to its end (RunAndWait), and a resident table (MakeTable).
// Thread-safety: a Case is written by its task's done (once) and read by the test after the
// batch finished.

#ifndef TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_
#define TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#include "core/batching/executor.h"
#include "core/batching/task.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
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

// A pool of 4 workers shared by the tests of a binary (never destroyed).
core::ThreadPool& SharedPool();

// Runs `batch` on `executor` and waits (at most 60 s, else the test fails) for batch_done.
void RunAndWait(Executor& executor, Batch batch);

// A resident table named "table" (device "cpu", version 1) holding `tensor`.
std::shared_ptr<const core::ResidentTensor> MakeTable(core::Tensor tensor);

// `task` with params viewing `table`'s tensor and holding the table, as the server makes it.
std::unique_ptr<Task> OnTable(std::unique_ptr<Task> task,
                              std::shared_ptr<const core::ResidentTensor> table);

// Runs `batch` on `executor` to its end and returns how many of `outputs` had been written (no
// longer all kSentinel) when the first of the batch's tasks was answered.
int WrittenAtFirstAnswer(Executor& executor, Batch batch,
                         const std::vector<const core::Tensor*>& outputs);

// Has `task` make its output only when an executor asks (make_output, returning `output`'s
// view and counting the call in *made) instead of holding it from the start.
void MakeOutputOnDemand(Task& task, core::Tensor& output, int* made);

// Whether a task that was answered `got`, with `output`, answered as computing its request
// alone did (`alone`): the same status, code and words, and byte-identical output. `what`
// names the request in a failure.
::testing::AssertionResult SameAsAlone(const absl::Status& got, const core::Tensor& output,
                                       const absl::StatusOr<core::Tensor>& alone,
                                       const std::string& what);

}  // namespace tensorcompute::batching::test_support

#endif  // TENSORCOMPUTE_TESTS_BATCHING_TASK_CASE_H_
