// CudaExecutor under injected faults, against the fake CUDA runtime
// (tests/cuda/testing/fake_cuda_runtime.h; only in cuda_fake_test): a sticky error takes the
// device out of service once, answers its batch with INTERNAL and sends every later batch to
// the fallback, without a crash; a device out of memory sends the batch to the fallback and
// stays in service. And the launches a batch makes: one per kind of task (gathers, pooled
// lookups), whatever the number of tasks. And CudaUploadTable's pinned staging: two buffers
// for a large table, none for a small one, a pageable copy when pinned memory runs out, and
// the staging freed on every path, a failed copy included.

#include <atomic>
#include <cstdint>
#include <cstring>
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
#include "tests/batching/task_case.h"
#include "tests/cuda/testing/fake_cuda_runtime.h"
#include "tests/testing/random_embedding_bag.h"
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

// `n` random lookups of every mode and dtype, as one batch with `gathers` random gathers;
// returns once batch_done was called, each lookup checked against the CPU.
void RunLookups(CudaExecutor& executor, int n, int gathers, Rng& rng) {
  using batching::test_support::BagCase;
  static constexpr core::DataType kTypes[] = {core::DataType::kFloat16, core::DataType::kBfloat16,
                                              core::DataType::kFloat32, core::DataType::kFloat64};
  std::vector<std::unique_ptr<BagCase>> cases;
  std::vector<std::unique_ptr<batching::test_support::Case>> gather_cases;
  batching::Batch batch;
  for (int i = 0; i < n; ++i) {
    testing::RandomBagOptions options;
    options.mode = static_cast<core::EmbeddingBagMode>(i % 4);
    options.dtype = kTypes[(i / 4) % 4];
    options.bags = 1 + i;
    cases.push_back(
        batching::test_support::MakeBagCase(testing::RandomEmbeddingBagCase(options, rng)));
    ASSERT_NE(cases.back(), nullptr);
    batch.push_back(batching::test_support::MakeBagTask(*cases.back()));
  }
  for (int i = 0; i < gathers; ++i) {
    testing::GatherRequest r;
    r.params = testing::RandomTensor(core::DataType::kFloat32, {8, 4}, rng);
    r.indices = testing::RandomIndices(core::DataType::kInt32, {3}, {8}, rng);
    r.axis = 0;
    gather_cases.push_back(batching::test_support::MakeCase(std::move(r)));
    batch.push_back(batching::test_support::MakeTask(*gather_cases.back()));
  }
  absl::Notification finished;
  executor.Run(std::move(batch), [&finished] { finished.Notify(); });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(120)));
  for (const std::unique_ptr<BagCase>& c : cases) {
    ASSERT_EQ(c->calls.load(), 1);
    const absl::StatusOr<core::Tensor> cpu = c->req.Expected();
    ASSERT_THAT(c->got, IsOk()) << c->req.DebugString();
    ASSERT_THAT(cpu, IsOk());
    EXPECT_TRUE(core::IdenticalTensors(c->output.view(), cpu->view())) << c->req.DebugString();
  }
  for (const auto& c : gather_cases) {
    ASSERT_THAT(c->got, IsOk());
    EXPECT_TRUE(AgreesWithReference(c->output.Clone(), RunReference(c->req)));
  }
}

TEST_F(CudaExecutorFaultTest, ABatchMakesOneLaunchPerKindOfTask) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  int64_t launches = fake::Launches();
  RunLookups(*executor, 24, 0, rng_);
  EXPECT_EQ(fake::Launches(), launches + 1);
  launches = fake::Launches();
  RunLookups(*executor, 24, 8, rng_);
  EXPECT_EQ(fake::Launches(), launches + 2);
}

TEST_F(CudaExecutorFaultTest, LookupsOutOfDeviceMemoryRunOnTheFallback) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const int64_t launches = fake::Launches();
  fake::FailNextAllocations(1);
  RunLookups(*executor, 16, 0, rng_);
  EXPECT_EQ(fake::Launches(), launches);
  EXPECT_TRUE(executor->healthy());
  RunLookups(*executor, 16, 0, rng_);
  EXPECT_EQ(fake::Launches(), launches + 1);
}

TEST_F(CudaExecutorFaultTest, AFailedLookupLaunchTakesTheDeviceOut) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.on_device_lost = [&lost](int, const absl::Status& error) {
    EXPECT_THAT(error, StatusIs(absl::StatusCode::kInternal, HasSubstr("EmbeddingBag kernel")));
    lost.fetch_add(1);
  };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  fake::FailLaunchAfter(0);
  using batching::test_support::BagCase;
  testing::RandomBagOptions bag_options;
  bag_options.bags = 5;
  std::unique_ptr<BagCase> c =
      batching::test_support::MakeBagCase(testing::RandomEmbeddingBagCase(bag_options, rng_));
  ASSERT_NE(c, nullptr);
  batching::Batch batch;
  batch.push_back(batching::test_support::MakeBagTask(*c));
  absl::Notification finished;
  executor->Run(std::move(batch), [&finished] { finished.Notify(); });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(120)));
  EXPECT_EQ(c->calls.load(), 1);
  EXPECT_THAT(c->got, StatusIs(absl::StatusCode::kInternal, HasSubstr("cudaErrorLaunchFailure")));
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
}

// A uint8 [bytes] table whose byte i is a hash of i.
core::Tensor PatternTable(int64_t bytes) {
  core::Tensor t = *core::Tensor::Allocate(core::DataType::kUint8, {bytes});
  absl::Span<uint8_t> b = t.mutable_bytes();
  for (int64_t i = 0; i < bytes; ++i) {
    b[i] = static_cast<uint8_t>((static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) >> 56);
  }
  return t;
}

// Whether the fake device copy (a host pointer here) holds `t`'s bytes.
bool DeviceCopyHolds(const core::DeviceCopy& copy, const core::Tensor& t) {
  return std::memcmp(copy.data, t.bytes().data(), t.bytes().size()) == 0;
}

// Slow copies: the host would overwrite a staging buffer before its chunk left, were it not
// waiting for the buffer's event.
TEST_F(CudaExecutorFaultTest, UploadStagesLargeTablesThroughTwoPinnedBuffersAndFreesThem) {
  fake::DelayAsyncCopies(100'000);
  const int64_t held = fake::PinnedBuffersHeld();
  struct Size {
    int64_t bytes;
    int64_t pinned;  // staging buffers the upload allocates
  };
  for (const Size size : {Size{int64_t{4} << 20, 0}, Size{(int64_t{4} << 20) + 1, 1},
                          Size{(int64_t{150} << 20) + 3072, 2}}) {
    const core::Tensor t = PatternTable(size.bytes);
    const int64_t allocations = fake::PinnedAllocations();
    absl::StatusOr<core::DeviceCopy> copy = CudaUploadTable(0, t);
    ASSERT_THAT(copy, IsOk()) << size.bytes << " bytes";
    EXPECT_TRUE(DeviceCopyHolds(*copy, t)) << size.bytes << " bytes";
    EXPECT_EQ(fake::PinnedAllocations() - allocations, size.pinned) << size.bytes << " bytes";
    EXPECT_EQ(fake::PinnedBuffersHeld(), held) << size.bytes << " bytes";
  }
}

TEST_F(CudaExecutorFaultTest, UploadCopiesFromPageableMemoryWhenPinnedMemoryRunsOut) {
  const int64_t held = fake::PinnedBuffersHeld();
  const core::Tensor t = PatternTable((int64_t{130} << 20) + 5);
  for (int had : {0, 1}) {  // the first buffer fails, or the second after the first was had
    fake::Reset();
    fake::FailPinnedAllocationsAfter(had);
    const int64_t allocations = fake::PinnedAllocations();
    absl::StatusOr<core::DeviceCopy> copy = CudaUploadTable(0, t);
    ASSERT_THAT(copy, IsOk());
    EXPECT_TRUE(DeviceCopyHolds(*copy, t));
    EXPECT_EQ(fake::PinnedAllocations() - allocations, had);
    EXPECT_EQ(fake::PinnedBuffersHeld(), held);
  }
}

TEST_F(CudaExecutorFaultTest, AFailedStagedCopyIsInternalAndFreesTheStaging) {
  const int64_t held = fake::PinnedBuffersHeld();
  const core::Tensor t = PatternTable((int64_t{150} << 20) + 3072);
  fake::DelayAsyncCopies(100'000);  // the first two chunks are still in flight...
  fake::FailAsyncCopyAfter(2);      // ...when the third chunk's copy fails
  EXPECT_THAT(CudaUploadTable(0, t),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cudaErrorInvalidValue: injected by the fake CUDA runtime "
                                 "(copying a table to device 0)")));
  EXPECT_EQ(fake::PinnedBuffersHeld(), held);
  absl::StatusOr<core::DeviceCopy> copy = CudaUploadTable(0, t);  // the error was not sticky
  ASSERT_THAT(copy, IsOk());
  EXPECT_TRUE(DeviceCopyHolds(*copy, t));
}

}  // namespace
}  // namespace tensorcompute::cuda
