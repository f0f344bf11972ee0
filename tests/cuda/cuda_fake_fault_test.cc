// CudaExecutor under injected faults, against the fake CUDA runtime
// (tests/cuda/testing/fake_cuda_runtime.h; only in cuda_fake_test): a sticky error or a hung
// device takes the device out of service once, the CPU answers the batch's tasks and every
// later batch, without a crash, and shutdown does not wait for the device; a device out of
// memory is trimmed and tried again, then sends the batch to the fallback and stays in
// service; an error left behind by a timing query fails no launch; kernels the device cannot
// run make Create fail; a bag longer than max_bag_length goes to the CPU. And the launches a
// batch makes: one per kind of task (gathers, pooled lookups), whatever the number of tasks.
// And UploadTable: two pinned staging buffers, made on the first large table and kept, none
// for a small one, a pageable copy when pinned memory runs out, a retry after trimming, and
// a hung upload taking the device out. And UpdateRows: one launch per staging window through
// the same two pinned buffers (their reuse waiting for slow copies), host staging when pinned
// memory runs out, a failed copy (INTERNAL, the device stays), a retry after trimming, and a
// sticky error or a hang taking the device out (UNAVAILABLE, "GPU 0 is out of service").

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
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
using ::testing::AllOf;
using ::testing::HasSubstr;

// One request and what its done received.
struct Job {
  GatherRequest req;
  core::Tensor output;
  absl::Status got = absl::UnknownError("done was never called");
  std::atomic<int> calls{0};
};

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
  const int64_t launches_before = fake::Launches();
  ExpectCorrect(RunBatch(*executor, 10));  // the CPU answers the batch the error hit
  EXPECT_EQ(fake::Launches(), launches_before);
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  EXPECT_EQ(executor->slots(), 0);

  const int64_t launches = fake::Launches();
  for (int b = 0; b < 3; ++b) ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches) << "a batch went to the lost device";
  EXPECT_EQ(lost.load(), 1);
}

TEST_F(CudaExecutorFaultTest, OutOfMemoryIsRetriedOnceAfterTrimmingThenRunsOnTheFallback) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  int64_t launches = fake::Launches();
  int64_t trims = fake::PoolTrims();
  fake::FailNextAllocations(1);  // the retry after the trim succeeds: the device computes
  ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches + 1);
  EXPECT_GE(fake::PoolTrims(), trims + 2) << "the batch pool and the tables' pool";

  launches = fake::Launches();
  fake::FailNextAllocations(2);  // the retry fails too: the CPU computes
  ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches);
  EXPECT_TRUE(executor->healthy());

  ExpectCorrect(RunBatch(*executor, 10));  // the device serves the next batch
  EXPECT_EQ(fake::Launches(), launches + 1);
}

TEST_F(CudaExecutorFaultTest, AHungDeviceIsTakenOutTheCpuAnswersAndShutdownDoesNotWait) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.streams_per_device = 2;
  options.device_timeout = absl::Milliseconds(200);
  options.on_device_lost = [&lost](int device, const absl::Status& error) {
    EXPECT_EQ(device, 0);
    EXPECT_THAT(error,
                StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("the GPU did not finish")));
    lost.fetch_add(1);
  };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  ExpectCorrect(RunBatch(*executor, 10));

  fake::HangDevice();
  ExpectCorrect(RunBatch(*executor, 10));  // waited 200 ms for the device, then the CPU
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  const int64_t launches = fake::Launches();
  ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches) << "a batch went to the hung device";
  EXPECT_THAT(executor->UploadTable(0, PatternTable(8)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("out of service")));

  const absl::Time start = absl::Now();
  executor.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "shutdown waited for the hung device";
  fake::Reset();  // the device's queued work (frees included) runs now
}

TEST_F(CudaExecutorFaultTest, AnErrorLeftByATimingQueryFailsNoLaunch) {
  std::atomic<int> reported{0};
  CudaExecutorOptions options;
  options.streams_per_device = 1;
  options.on_batch_stages = [&reported](int, const GpuBatchStages&) { reported.fetch_add(1); };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  const int64_t launches = fake::Launches();
  fake::FailNextElapsedTime();  // the first batch's stages cannot be timed
  ExpectCorrect(RunBatch(*executor, 10));
  ExpectCorrect(RunBatch(*executor, 10));
  EXPECT_EQ(fake::Launches(), launches + 2) << "a launch failed on an earlier call's error";
  EXPECT_EQ(reported.load(), 1);
  EXPECT_TRUE(executor->healthy());
}

TEST_F(CudaExecutorFaultTest, KernelsTheDeviceCannotRunMakeCreateFail) {
  fake::FailKernelProbes();
  CudaExecutorOptions options;
  options.fallback = &fallback_;
  EXPECT_THAT(CudaExecutor::Create(options),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("CUDA device 0 (Fake CUDA device, sm_90) cannot run this "
                                       "build's kernels"),
                             HasSubstr("cudaErrorNoKernelImageForDevice"))));
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
  fake::FailNextAllocations(2);  // and again after the trim
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
  ASSERT_THAT(c->got, IsOk()) << "the CPU answers what the lost device did not";
  const absl::StatusOr<core::Tensor> cpu = c->req.Expected();
  ASSERT_THAT(cpu, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(c->output.view(), cpu->view()));
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
}

// One lookup of `bags` bags of `bag_size` indices each (offsets), on a float32 [16, 8] table.
std::unique_ptr<batching::test_support::BagCase> LookupWithBags(int64_t bags, int64_t bag_size,
                                                                Rng& rng) {
  testing::EmbeddingBagCase c;
  c.params = testing::RandomTensor(core::DataType::kFloat32, {16, 8}, rng);
  c.indices = testing::RandomIndices(core::DataType::kInt64, {bags * bag_size}, {16}, rng);
  std::vector<int64_t> offsets;
  for (int64_t b = 0; b < bags; ++b) offsets.push_back(b * bag_size);
  c.offsets = testing::MakeIndices(core::DataType::kInt64, {bags}, offsets);
  return batching::test_support::MakeBagCase(std::move(c));
}

TEST_F(CudaExecutorFaultTest, ALookupWithABagLongerThanMaxBagLengthRunsOnTheCpu) {
  CudaExecutorOptions options;
  options.max_bag_length = 8;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  for (const int64_t bag_size : {8, 9}) {
    std::unique_ptr<batching::test_support::BagCase> c = LookupWithBags(5, bag_size, rng_);
    ASSERT_NE(c, nullptr);
    batching::Batch batch;
    batch.push_back(batching::test_support::MakeBagTask(*c));
    const int64_t launches = fake::Launches();
    absl::Notification finished;
    executor->Run(std::move(batch), [&finished] { finished.Notify(); });
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(120)));
    ASSERT_THAT(c->got, IsOk());
    const absl::StatusOr<core::Tensor> cpu = c->req.Expected();
    ASSERT_THAT(cpu, IsOk());
    EXPECT_TRUE(core::IdenticalTensors(c->output.view(), cpu->view()));
    EXPECT_EQ(fake::Launches(), launches + (bag_size <= 8 ? 1 : 0)) << "bags of " << bag_size;
  }
}

// Slow copies: the host would overwrite a staging buffer before its chunk left, were it not
// waiting for the buffer's event. The two staging buffers are made by the first table large
// enough to be staged and kept for the next (no pinned allocation or free per upload), and
// freed with the executor.
TEST_F(CudaExecutorFaultTest, UploadsStageLargeTablesThroughTwoPinnedBuffersKeptForTheNext) {
  fake::DelayAsyncCopies(100'000);
  const int64_t held = fake::PinnedBuffersHeld();
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const int64_t slots_pinned = fake::PinnedBuffersHeld() - held;
  struct Size {
    int64_t bytes;
    int64_t pinned;  // staging buffers the upload allocates
  };
  for (const Size size : {Size{int64_t{4} << 20, 0}, Size{(int64_t{4} << 20) + 1, 2},
                          Size{(int64_t{150} << 20) + 3072, 0}, Size{int64_t{1} << 20, 0}}) {
    const core::Tensor t = PatternTable(size.bytes);
    const int64_t allocations = fake::PinnedAllocations();
    absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, t);
    ASSERT_THAT(copy, IsOk()) << size.bytes << " bytes";
    EXPECT_TRUE(DeviceCopyHolds(*copy, t)) << size.bytes << " bytes";
    EXPECT_EQ(fake::PinnedAllocations() - allocations, size.pinned) << size.bytes << " bytes";
  }
  EXPECT_EQ(fake::PinnedBuffersHeld(), held + slots_pinned + 2);
  executor.reset();
  EXPECT_EQ(fake::PinnedBuffersHeld(), held);
}

TEST_F(CudaExecutorFaultTest, UploadCopiesFromPageableMemoryWhenPinnedMemoryRunsOut) {
  const core::Tensor t = PatternTable((int64_t{130} << 20) + 5);
  for (int had : {0, 1}) {  // the first buffer fails, or the second after the first was had
    fake::Reset();
    std::unique_ptr<CudaExecutor> executor = MakeExecutor();
    ASSERT_NE(executor, nullptr);
    fake::FailPinnedAllocationsAfter(had);
    const int64_t allocations = fake::PinnedAllocations();
    absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, t);
    ASSERT_THAT(copy, IsOk());
    EXPECT_TRUE(DeviceCopyHolds(*copy, t));
    EXPECT_EQ(fake::PinnedAllocations() - allocations, had);
    fake::Reset();  // pinned memory again: the next upload makes the missing buffer
    copy = executor->UploadTable(0, t);
    ASSERT_THAT(copy, IsOk());
    EXPECT_TRUE(DeviceCopyHolds(*copy, t));
    EXPECT_EQ(fake::PinnedAllocations() - allocations, 2);
  }
}

TEST_F(CudaExecutorFaultTest, AFailedStagedCopyIsInternalAndTheNextUploadWorks) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const core::Tensor t = PatternTable((int64_t{150} << 20) + 3072);
  fake::DelayAsyncCopies(100'000);  // the first two chunks are still in flight...
  fake::FailAsyncCopyAfter(2);      // ...when the third chunk's copy fails
  EXPECT_THAT(executor->UploadTable(0, t),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cudaErrorInvalidValue: injected by the fake CUDA runtime "
                                 "(copying a table to device 0)")));
  absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, t);  // not sticky
  ASSERT_THAT(copy, IsOk());
  EXPECT_TRUE(DeviceCopyHolds(*copy, t));
  EXPECT_TRUE(executor->healthy());
}

TEST_F(CudaExecutorFaultTest, AnUploadToAFullDeviceIsRetriedOnceAfterTrimming) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const core::Tensor t = PatternTable(int64_t{1} << 20);
  const int64_t trims = fake::PoolTrims();
  fake::FailNextAllocations(1);
  absl::StatusOr<core::DeviceCopy> copy = executor->UploadTable(0, t);
  ASSERT_THAT(copy, IsOk());
  EXPECT_TRUE(DeviceCopyHolds(*copy, t));
  EXPECT_GE(fake::PoolTrims(), trims + 2) << "the tables' pool and the batch pool";
  fake::FailNextAllocations(2);
  EXPECT_THAT(executor->UploadTable(0, t),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("has no room")));
  EXPECT_TRUE(executor->healthy());
}

TEST_F(CudaExecutorFaultTest, AnUploadThatNeverFinishesTakesTheDeviceOut) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.device_timeout = absl::Milliseconds(200);
  options.on_device_lost = [&lost](int, const absl::Status&) { lost.fetch_add(1); };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  fake::HangDevice();
  EXPECT_THAT(
      executor->UploadTable(0, PatternTable(int64_t{20} << 20)),
      StatusIs(absl::StatusCode::kUnavailable, AllOf(HasSubstr("GPU 0 is out of service"),
                                                     HasSubstr("did not finish copying a table"))));
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  ExpectCorrect(RunBatch(*executor, 5));  // the CPU answers
  const absl::Time start = absl::Now();
  executor.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  fake::Reset();
}

// A uint32 [rows, 64] table (256-byte rows) on the fake device, and what it should hold.
struct UpdatedTable {
  core::Tensor expected;
  core::DeviceCopy copy;
};

UpdatedTable UploadRows(CudaExecutor& executor, int64_t rows) {
  UpdatedTable t;
  t.expected = *core::Tensor::Allocate(core::DataType::kUint32, {rows, 64});
  const core::Tensor pattern = PatternTable(rows * 256);
  std::memcpy(t.expected.mutable_bytes().data(), pattern.bytes().data(), rows * 256);
  absl::StatusOr<core::DeviceCopy> copy = executor.UploadTable(0, t.expected);
  EXPECT_THAT(copy, IsOk());
  if (copy.ok()) t.copy = *std::move(copy);
  return t;
}

// UpdateRows of rows [first, first + count) in reverse order with bytes from `seed`; the
// mirror `t.expected` takes them only when the update succeeds.
absl::Status UpdateRange(CudaExecutor& executor, UpdatedTable& t, int64_t first, int64_t count,
                         uint8_t seed) {
  std::vector<int64_t> rows(count);
  std::iota(rows.rbegin(), rows.rend(), first);
  std::vector<uint8_t> packed(count * 256);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(seed + i * 7);
  absl::Status status = executor.UpdateRows(t.copy, rows, 256, packed);
  if (status.ok()) {
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(t.expected.mutable_bytes().data() + rows[i] * 256, packed.data() + i * 256, 256);
    }
  }
  return status;
}

// Slow copies: the host would overwrite a staging buffer with the third window before the
// first window's copy left it, were it not waiting for the buffer's event. Updates go through
// the uploader's two pinned buffers (made by the first update of a small table, kept for the
// next upload and updates) and make one launch per window: 63,550 rows of 256 bytes fill one.
TEST_F(CudaExecutorFaultTest, AnUpdateMakesOneLaunchPerWindowThroughTheKeptPinnedBuffers) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  UpdatedTable small = UploadRows(*executor, 100);  // copied directly: no staging yet
  int64_t allocations = fake::PinnedAllocations();
  int64_t launches = fake::Launches();
  ASSERT_THAT(UpdateRange(*executor, small, 3, 10, 1), IsOk());
  EXPECT_TRUE(DeviceCopyHolds(small.copy, small.expected));
  EXPECT_EQ(fake::PinnedAllocations() - allocations, 2);
  EXPECT_EQ(fake::Launches() - launches, 1);

  UpdatedTable t = UploadRows(*executor, 200000);
  fake::DelayAsyncCopies(50'000);
  struct Update {
    int64_t rows;
    int64_t launches;
  };
  allocations = fake::PinnedAllocations();
  for (const Update u :
       {Update{150000, 3}, Update{1, 1}, Update{63550, 1}, Update{63551, 2}, Update{200000, 4}}) {
    launches = fake::Launches();
    ASSERT_THAT(UpdateRange(*executor, t, 0, u.rows, static_cast<uint8_t>(u.rows)), IsOk());
    EXPECT_TRUE(DeviceCopyHolds(t.copy, t.expected)) << u.rows << " rows";
    EXPECT_EQ(fake::Launches() - launches, u.launches) << u.rows << " rows";
  }
  EXPECT_EQ(fake::PinnedAllocations(), allocations) << "an update allocated pinned memory";
  EXPECT_TRUE(DeviceCopyHolds(small.copy, small.expected)) << "another table was written";
}

TEST_F(CudaExecutorFaultTest, AnUpdateStagesThroughHostMemoryWhenPinnedMemoryRunsOut) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  fake::FailPinnedAllocationsAfter(0);  // the upload, then the update, have none
  UpdatedTable t = UploadRows(*executor, 150000);
  fake::DelayAsyncCopies(50'000);
  const int64_t allocations = fake::PinnedAllocations();
  ASSERT_THAT(UpdateRange(*executor, t, 10, 140000, 3), IsOk());
  EXPECT_TRUE(DeviceCopyHolds(t.copy, t.expected));
  EXPECT_EQ(fake::PinnedAllocations(), allocations);
}

TEST_F(CudaExecutorFaultTest, AFailedUpdateCopyIsInternalTheDeviceStaysAndARetryApplies) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  UpdatedTable t = UploadRows(*executor, 150000);
  fake::FailAsyncCopyAfter(1);  // the second window's copy
  EXPECT_THAT(UpdateRange(*executor, t, 0, 150000, 9),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cudaErrorInvalidValue: injected by the fake CUDA runtime "
                                 "(updating rows of a table on device 0)")));
  EXPECT_TRUE(executor->healthy());
  ASSERT_THAT(UpdateRange(*executor, t, 0, 150000, 9), IsOk());  // values are absolute
  EXPECT_TRUE(DeviceCopyHolds(t.copy, t.expected));
  ExpectCorrect(RunBatch(*executor, 5));  // the device still computes
}

TEST_F(CudaExecutorFaultTest, AnUpdateOnAFullDeviceIsRetriedOnceAfterTrimming) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  UpdatedTable t = UploadRows(*executor, 1000);
  const int64_t trims = fake::PoolTrims();
  fake::FailNextAllocations(1);
  ASSERT_THAT(UpdateRange(*executor, t, 5, 100, 1), IsOk());
  EXPECT_TRUE(DeviceCopyHolds(t.copy, t.expected));
  EXPECT_GE(fake::PoolTrims(), trims + 2) << "the tables' pool and the batch pool";
  fake::FailNextAllocations(2);
  EXPECT_THAT(UpdateRange(*executor, t, 5, 100, 2),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("CUDA device 0 has no room to stage an update")));
  EXPECT_TRUE(DeviceCopyHolds(t.copy, t.expected)) << "a refused update wrote rows";
  EXPECT_TRUE(executor->healthy());
}

TEST_F(CudaExecutorFaultTest, AStickyErrorInAnUpdateTakesTheDeviceOut) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.on_device_lost = [&lost](int device, const absl::Status& error) {
    EXPECT_EQ(device, 0);
    EXPECT_THAT(error, StatusIs(absl::StatusCode::kInternal, HasSubstr("row scatter kernel")));
    lost.fetch_add(1);
  };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  UpdatedTable t = UploadRows(*executor, 1000);
  fake::FailLaunchAfter(0);
  EXPECT_THAT(UpdateRange(*executor, t, 0, 10, 1),
              StatusIs(absl::StatusCode::kUnavailable, AllOf(HasSubstr("GPU 0 is out of service"),
                                                             HasSubstr("cudaErrorLaunchFailure"))));
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  fake::Reset();  // even with the fault gone, the device stays out of service
  EXPECT_THAT(UpdateRange(*executor, t, 0, 10, 1),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("GPU 0 is out of service")));
  const int64_t launches = fake::Launches();
  ExpectCorrect(RunBatch(*executor, 5));  // the CPU answers
  EXPECT_EQ(fake::Launches(), launches);
  EXPECT_EQ(lost.load(), 1);
}

TEST_F(CudaExecutorFaultTest, AnUpdateThatNeverFinishesTakesTheDeviceOut) {
  std::atomic<int> lost{0};
  CudaExecutorOptions options;
  options.device_timeout = absl::Milliseconds(200);
  options.on_device_lost = [&lost](int, const absl::Status&) { lost.fetch_add(1); };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  UpdatedTable t = UploadRows(*executor, 150000);
  fake::HangDevice();
  EXPECT_THAT(UpdateRange(*executor, t, 0, 150000, 4),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("GPU 0 is out of service"),
                             HasSubstr("did not finish updating rows of a table on device 0"))));
  EXPECT_EQ(lost.load(), 1);
  EXPECT_FALSE(executor->healthy());
  ExpectCorrect(RunBatch(*executor, 5));  // the CPU answers
  const absl::Time start = absl::Now();
  executor.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "shutdown waited for the hung device";
  fake::Reset();  // the hung work runs now, into the table's memory, which `t` still holds
}

}  // namespace
}  // namespace tensorcompute::cuda
