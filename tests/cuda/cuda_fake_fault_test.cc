// CudaExecutor under injected faults, against the fake CUDA runtime
// (tests/cuda/testing/fake_cuda_runtime.h; only in cuda_fake_test): a sticky error takes the
// device out of service once, answers its batch with INTERNAL and sends every later batch to
// the fallback, without a crash; a device out of memory sends the batch to the fallback and
// stays in service.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/cuda/cuda_executor.h"
#include "core/gather_plan.h"
#include "core/thread_pool.h"
#include "tests/cuda/testing/fake_cuda_runtime.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// One request and what its done received.
struct Job {
  GatherRequest req;
  core::Tensor output;
  absl::Status got = absl::UnknownError("done was never called");
  std::atomic<int> calls{0};
};

class CudaExecutorFaultTest : public ::testing::Test {
 protected:
  void SetUp() override { fake::Reset(); }
  void TearDown() override { fake::Reset(); }

  std::unique_ptr<CudaExecutor> MakeExecutor(CudaExecutorOptions options = {}) {
    options.fallback = &fallback_;
    absl::StatusOr<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::Create(options);
    EXPECT_THAT(executor, IsOk());
    return executor.ok() ? *std::move(executor) : nullptr;
  }

  // `n` random float Gathers, run as one batch; returns once batch_done was called.
  std::vector<std::unique_ptr<Job>> RunBatch(CudaExecutor& executor, int n) {
    std::vector<std::unique_ptr<Job>> jobs;
    batching::Batch batch;
    for (int i = 0; i < n; ++i) {
      auto job = std::make_unique<Job>();
      job->req = RandomGatherRequest(core::DataType::kFloat32, core::DataType::kInt32, rng_);
      absl::StatusOr<core::GatherPlan> plan = core::PlanGather(
          job->req.params.view(), job->req.indices.view(), job->req.axis, job->req.batch_dims);
      EXPECT_THAT(plan, IsOk());
      if (!plan.ok()) return {};
      job->output = *core::Tensor::Allocate(plan->dtype, plan->output_shape);
      auto task = std::make_unique<batching::Task>();
      task->plan = *plan;
      task->params = job->req.params.view();
      task->indices = job->req.indices.view();
      task->output = job->output.mutable_view();
      task->done = [j = job.get()](absl::Status status) {
        j->got = std::move(status);
        j->calls.fetch_add(1);
      };
      batch.push_back(std::move(task));
      jobs.push_back(std::move(job));
    }
    absl::Notification finished;
    executor.Run(std::move(batch), [&finished] { finished.Notify(); });
    EXPECT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(120)));
    return jobs;
  }

  // Every job answered once, with the reference's answer.
  static void ExpectCorrect(const std::vector<std::unique_ptr<Job>>& jobs) {
    for (const std::unique_ptr<Job>& job : jobs) {
      ASSERT_EQ(job->calls.load(), 1) << job->req.DebugString();
      const absl::StatusOr<core::Tensor> got =
          job->got.ok() ? absl::StatusOr<core::Tensor>(job->output.Clone()) : job->got;
      EXPECT_TRUE(AgreesWithReference(got, RunReference(job->req))) << job->req.DebugString();
    }
  }

  core::ThreadPool pool_{2};
  batching::CpuExecutor fallback_{&pool_};
  Rng rng_{0xfa17};
};

TEST_F(CudaExecutorFaultTest, StickyErrorTakesTheDeviceOutOnceAndLaterBatchesUseTheFallback) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.streams_per_device = 2;
  options.on_device_lost = [&lost](int device, const absl::Status& error) {
    EXPECT_EQ(device, 0);
    EXPECT_THAT(error, StatusIs(absl::StatusCode::kInternal, HasSubstr("cudaErrorLaunchFailure")));
    lost.fetch_add(1);
  };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  ExpectCorrect(RunBatch(*executor, 10));

  fake::FailLaunchAfter(0);
  int internal = 0;
  for (const std::unique_ptr<Job>& job : RunBatch(*executor, 10)) {
    EXPECT_EQ(job->calls.load(), 1);
    internal += absl::IsInternal(job->got);
  }
  EXPECT_GT(internal, 0);
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  EXPECT_EQ(executor->slots(), 0);

  const int64_t launches = fake::Launches();
  for (int b = 0; b < 3; ++b) ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches) << "a batch went to the lost device";
  EXPECT_EQ(lost.load(), 1);
}

TEST_F(CudaExecutorFaultTest, OutOfMemoryRunsTheBatchOnTheFallback) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const int64_t launches = fake::Launches();
  fake::FailNextAllocations(1);
  ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches);
  EXPECT_TRUE(executor->healthy());

  ExpectCorrect(RunBatch(*executor, 10));  // the device serves the next batch
  EXPECT_EQ(fake::Launches(), launches + 1);
}

}  // namespace
}  // namespace tensorcompute::cuda
