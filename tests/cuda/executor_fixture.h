// File: tests/cuda/executor_fixture.h
//
// The fixture of the CUDA executor's tests (cuda_executor_test.cc, cuda_executor_bag_test.cc):
// each test is skipped, with the reason, when there is no device; MakeExecutor makes a fresh
// executor whose fallback is a CPU executor over the shared test pool; Run runs one batch and
// waits for its batch_done (a failure, not a hang, if it never comes).

#ifndef TENSORCOMPUTE_TESTS_CUDA_EXECUTOR_FIXTURE_H_
#define TENSORCOMPUTE_TESTS_CUDA_EXECUTOR_FIXTURE_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/cuda/cuda_executor.h"
#include "tests/batching/task_case.h"

namespace tensorcompute::cuda::test_support {

// How long a batch may take before a test fails (the first batch compiles nothing, but a
// sanitizer build and a busy machine are slow).
inline constexpr absl::Duration kBatchTimeout = absl::Seconds(120);

class CudaExecutorFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << CudaDeviceDescription(0).status().message();
    }
  }

  // A fresh executor (`options` with the fixture's fallback); null, and a test failure, if
  // Create fails.
  std::unique_ptr<CudaExecutor> MakeExecutor(CudaExecutorOptions options = {}) {
    options.fallback = &fallback_;
    absl::StatusOr<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::Create(options);
    EXPECT_TRUE(executor.ok()) << executor.status();
    return executor.ok() ? *std::move(executor) : nullptr;
  }

  // Runs `batch` and waits for batch_done.
  static void Run(CudaExecutor& executor, batching::Batch batch) {
    absl::Notification finished;
    executor.Run(std::move(batch), [&finished] { finished.Notify(); });
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kBatchTimeout));
  }

  batching::CpuExecutor fallback_{&batching::test_support::SharedPool()};
};

}  // namespace tensorcompute::cuda::test_support

#endif  // TENSORCOMPUTE_TESTS_CUDA_EXECUTOR_FIXTURE_H_
