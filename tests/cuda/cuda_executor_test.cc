// CudaExecutor (core/cuda/cuda_executor.h). Without a device (CI, this build machine) only the
// first tests run: CudaDeviceCount() is 0 without crashing and Create() fails cleanly. Every
// other test needs a GPU and is skipped, visibly, without one: random batches of every dtype
// byte-identical to the reference and to the CPU, doc examples, the CPU's bad-index message,
// strings and empty outputs on the fallback, 32 small tasks in one batch, tasks larger than
// the staging buffer (chunked copies both ways), cancelled and expired tasks, make_output,
// concurrent Run calls, a destructor that finishes what it was given, and resident tables:
// UploadTable's errors, tasks on uploaded tables reading the device copy in place, and
// large tables uploaded through pinned staging chunks arriving byte for byte.

#include "core/cuda/cuda_executor.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/cpu_executor.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/thread_pool.h"
#include "tests/batching/task_case.h"
#include "tests/cuda/executor_fixture.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using ::tensorcompute::batching::test_support::Case;
using ::tensorcompute::batching::test_support::kSentinel;
using ::tensorcompute::batching::test_support::MakeCase;
using ::tensorcompute::batching::test_support::MakeTask;
using ::tensorcompute::batching::test_support::SentinelIntact;
using ::tensorcompute::batching::test_support::SharedPool;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeStrings;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomRequestOptions;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::TensorDebugString;
using ::tensorcompute::testing::UniformInt;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using ::tensorcompute::cuda::test_support::kBatchTimeout;

// ---- tests that run everywhere ----

TEST(CudaDeviceCount, NeverCrashesAndSaysWhyWhenZero) {
  const int count = CudaDeviceCount();
  EXPECT_GE(count, 0);
  const absl::StatusOr<std::string> description = CudaDeviceDescription(0);
  if (count == 0) {
    EXPECT_THAT(description.status().code(),
                AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kUnimplemented));
    std::cout << "no CUDA device: " << description.status() << std::endl;
  } else {
    EXPECT_THAT(description, IsOk());
    std::cout << "CUDA device 0: " << description.value_or("?") << std::endl;
  }
}

TEST(CudaExecutorCreate, FailsCleanlyWithoutADevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  batching::CpuExecutor fallback(&SharedPool());
  CudaExecutorOptions options;
  options.fallback = &fallback;
  EXPECT_THAT(CudaExecutor::Create(options).status().code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kUnimplemented));
}

#if defined(TC_HAVE_CUDA)
TEST(CudaExecutorCreate, RejectsBadOptionsBeforeLookingForADevice) {
  batching::CpuExecutor fallback(&SharedPool());
  CudaExecutorOptions no_fallback;
  EXPECT_THAT(CudaExecutor::Create(no_fallback), StatusIs(absl::StatusCode::kInvalidArgument));
  CudaExecutorOptions no_streams;
  no_streams.fallback = &fallback;
  no_streams.streams_per_device = 0;
  EXPECT_THAT(CudaExecutor::Create(no_streams), StatusIs(absl::StatusCode::kInvalidArgument));
  CudaExecutorOptions tiny_staging;
  tiny_staging.fallback = &fallback;
  tiny_staging.staging_bytes = 1024;
  EXPECT_THAT(CudaExecutor::Create(tiny_staging), StatusIs(absl::StatusCode::kInvalidArgument));
}
#else
TEST(CudaExecutorCreate, IsUnimplementedWithoutCuda) {
  batching::CpuExecutor fallback(&SharedPool());
  CudaExecutorOptions options;
  options.fallback = &fallback;
  EXPECT_THAT(CudaExecutor::Create(options),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("built without nvcc")));
  EXPECT_EQ(CudaDeviceCount(), 0);
}
#endif

// ---- tests that need a device ----

// core's CPU answer to the same request, for byte-for-byte comparison.
absl::StatusOr<core::Tensor> RunOnCpu(const GatherRequest& r) {
  return r.nd ? core::GatherNd(r.params.view(), r.indices.view(), r.batch_dims)
              : core::Gather(r.params.view(), r.indices.view(), r.axis, r.batch_dims);
}

::testing::AssertionResult AgreesWithCpuAndReference(const Case& c) {
  if (c.calls.load() != 1) {
    return ::testing::AssertionFailure()
           << "done called " << c.calls.load() << " times for " << c.req.DebugString();
  }
  const absl::StatusOr<core::Tensor> got = c.Result();
  const absl::StatusOr<core::Tensor> cpu = RunOnCpu(c.req);
  if (got.ok() != cpu.ok() || (!got.ok() && got.status() != cpu.status()) ||
      (got.ok() && !core::IdenticalTensors(got->view(), cpu->view()))) {
    return ::testing::AssertionFailure()
           << "GPU and CPU differ for " << c.req.DebugString()
           << "\nGPU: " << (got.ok() ? TensorDebugString(got->view()) : got.status().ToString())
           << "\nCPU: " << (cpu.ok() ? TensorDebugString(cpu->view()) : cpu.status().ToString());
  }
  ::testing::AssertionResult r = AgreesWithReference(got, RunReference(c.req));
  if (!r) r << "\nrequest: " << c.req.DebugString();
  return r;
}

// Every test below starts here: skipped, with the reason, when there is no device.
class CudaExecutorTest : public ::tensorcompute::cuda::test_support::CudaExecutorFixture {
 protected:
  // Runs `cases` as one batch and waits for batch_done.
  static void RunBatch(CudaExecutor& executor, std::vector<std::unique_ptr<Case>>& cases) {
    batching::Batch batch;
    for (std::unique_ptr<Case>& c : cases) batch.push_back(MakeTask(*c));
    Run(executor, std::move(batch));
  }
};

// `n` random requests over every dtype (strings included), int32 and int64 indices, Gather and
// GatherNd alternating.
std::vector<std::unique_ptr<Case>> RandomCases(int n, Rng& rng,
                                               const RandomRequestOptions& options = {}) {
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < n; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype =
        (i / 16) % 2 ? core::DataType::kInt64 : core::DataType::kInt32;
    cases.push_back(MakeCase(i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng, options)
                                   : RandomGatherRequest(dtype, index_dtype, rng, options)));
  }
  return cases;
}

TEST_F(CudaExecutorTest, NameSlotsAndHealth) {
  CudaExecutorOptions options;
  options.streams_per_device = 3;
  options.devices = {0};
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->name(), "cuda:0");
  EXPECT_EQ(executor->slots(), 3);
  EXPECT_TRUE(executor->healthy());
}

TEST_F(CudaExecutorTest, RejectsADeviceThatDoesNotExist) {
  CudaExecutorOptions options;
  options.fallback = &fallback_;
  options.devices = {CudaDeviceCount()};
  EXPECT_THAT(CudaExecutor::Create(options),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("does not exist")));
}

TEST_F(CudaExecutorTest, RandomBatchesMatchTheCpuAndTheReference) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xc0da);
  int checked = 0;
  for (int round = 0; round < 40; ++round) {
    RandomRequestOptions options;
    if (round % 3 == 2) {  // low ranks, larger dimensions
      options.max_params_rank = 3;
      options.max_indices_rank = 2;
      options.max_dim = 12;
    }
    std::vector<std::unique_ptr<Case>> cases =
        RandomCases(static_cast<int>(UniformInt(rng, 1, 64)), rng, options);
    for (const std::unique_ptr<Case>& c : cases) ASSERT_NE(c, nullptr);
    RunBatch(*executor, cases);
    for (const std::unique_ptr<Case>& c : cases) {
      ASSERT_TRUE(AgreesWithCpuAndReference(*c)) << "round " << round;
      ++checked;
    }
  }
  std::cout << "random requests checked on the GPU: " << checked << std::endl;
}

TEST_F(CudaExecutorTest, BadIndicesGiveTheCpuMessage) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xbad);
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < 64; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype = i % 3 ? core::DataType::kInt64 : core::DataType::kInt32;
    GatherRequest req = i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng)
                              : RandomGatherRequest(dtype, index_dtype, rng);
    if (req.indices.num_elements() > 0) InjectOutOfRangeIndices(req, 1 + i % 3, rng);
    cases.push_back(MakeCase(std::move(req)));
  }
  RunBatch(*executor, cases);
  int bad = 0;
  for (const std::unique_ptr<Case>& c : cases) {
    ASSERT_TRUE(AgreesWithCpuAndReference(*c));
    bad += absl::IsInvalidArgument(c->got);
  }
  EXPECT_GT(bad, 40);
}

TEST_F(CudaExecutorTest, DocExamples) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<core::Tensor> expected;
  {  // ONNX Gather-13 example 1: axis 0.
    GatherRequest r;
    r.params = MakeTensor<float>({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
    r.indices = MakeIndices(core::DataType::kInt64, {2, 2}, {0, 1, 1, 2});
    r.axis = 0;
    cases.push_back(MakeCase(std::move(r)));
    expected.push_back(
        MakeTensor<float>({2, 2, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f}));
  }
  {  // ONNX Gather-13 example 2: axis 1.
    GatherRequest r;
    r.params = MakeTensor<float>({3, 3}, {1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f});
    r.indices = MakeIndices(core::DataType::kInt32, {1, 2}, {0, 2});
    r.axis = 1;
    cases.push_back(MakeCase(std::move(r)));
    expected.push_back(MakeTensor<float>({3, 1, 2}, {1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f}));
  }
  {  // tf.gather with batch_dims=1 and negative indices.
    GatherRequest r;
    r.params = MakeTensor<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
    r.indices = MakeIndices(core::DataType::kInt64, {2, 2}, {-1, 0, 2, -3});
    r.batch_dims = 1;
    cases.push_back(MakeCase(std::move(r)));
    expected.push_back(MakeTensor<int32_t>({2, 2}, {3, 1, 6, 4}));
  }
  {  // ONNX GatherND-13 example 2: indices [[0,0],[1,1]] of a 2x2.
    GatherRequest r;
    r.nd = true;
    r.params = MakeTensor<int32_t>({2, 2}, {0, 1, 2, 3});
    r.indices = MakeIndices(core::DataType::kInt64, {2, 2}, {0, 0, 1, 1});
    cases.push_back(MakeCase(std::move(r)));
    expected.push_back(MakeTensor<int32_t>({2}, {0, 3}));
  }
  {  // ONNX GatherND-13 example 5: batch_dims=1.
    GatherRequest r;
    r.nd = true;
    r.params = MakeTensor<int32_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
    r.indices = MakeIndices(core::DataType::kInt32, {2, 1}, {1, 0});
    r.batch_dims = 1;
    cases.push_back(MakeCase(std::move(r)));
    expected.push_back(MakeTensor<int32_t>({2, 2}, {2, 3, 4, 5}));
  }
  RunBatch(*executor, cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_THAT(cases[i]->got, IsOk()) << cases[i]->req.DebugString();
    EXPECT_TRUE(core::IdenticalTensors(cases[i]->output.view(), expected[i].view()))
        << "case " << i << ": " << TensorDebugString(cases[i]->output.view());
  }
}

TEST_F(CudaExecutorTest, StringsAndEmptyOutputsGoToTheFallbackInTheSameBatch) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(5);
  std::vector<std::unique_ptr<Case>> cases;
  GatherRequest strings;
  strings.params = MakeStrings({3}, {"a", "bc", ""});
  strings.indices = MakeIndices(core::DataType::kInt32, {4}, {2, 0, -2, 1});
  strings.axis = 0;
  cases.push_back(MakeCase(std::move(strings)));
  GatherRequest no_indices;  // output [0, 4]
  no_indices.params = RandomTensor(core::DataType::kFloat32, {5, 4}, rng);
  no_indices.indices = MakeIndices(core::DataType::kInt64, {0}, {});
  no_indices.axis = 0;
  cases.push_back(MakeCase(std::move(no_indices)));
  GatherRequest empty_slice;  // output [2, 0]
  empty_slice.params = RandomTensor(core::DataType::kInt16, {3, 0}, rng);
  empty_slice.indices = MakeIndices(core::DataType::kInt32, {2}, {0, 2});
  empty_slice.axis = 0;
  cases.push_back(MakeCase(std::move(empty_slice)));
  GatherRequest empty_slice_bad;  // an empty slice still checks its indices
  empty_slice_bad.params = RandomTensor(core::DataType::kInt16, {3, 0}, rng);
  empty_slice_bad.indices = MakeIndices(core::DataType::kInt32, {2}, {0, 3});
  empty_slice_bad.axis = 0;
  cases.push_back(MakeCase(std::move(empty_slice_bad)));
  for (std::unique_ptr<Case>& c : RandomCases(8, rng)) cases.push_back(std::move(c));
  RunBatch(*executor, cases);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
  EXPECT_THAT(cases[3]->got, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices[1]")));
}

TEST_F(CudaExecutorTest, ThirtyTwoSmallTasksInOneBatch) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(32);
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < 32; ++i) {
    GatherRequest r;
    r.params = RandomTensor(core::DataType::kFloat32, {16, 8}, rng);
    r.indices = RandomIndices(core::DataType::kInt32, {4}, {16}, rng);
    r.axis = 0;
    cases.push_back(MakeCase(std::move(r)));
  }
  RunBatch(*executor, cases);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
}

TEST_F(CudaExecutorTest, TasksLargerThanTheStagingBufferAreChunked) {
  CudaExecutorOptions options;
  options.staging_bytes = int64_t{64} << 10;  // halves of 32 KiB
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(64);
  std::vector<std::unique_ptr<Case>> cases = RandomCases(6, rng);
  GatherRequest large;  // 1 MiB of params, 1.5 MiB of output, odd 12-byte rows
  large.params = RandomTensor(core::DataType::kUint32, {87381, 3}, rng);
  large.indices = RandomIndices(core::DataType::kInt64, {131072}, {87381}, rng);
  large.axis = 0;
  cases.insert(cases.begin() + 3, MakeCase(std::move(large)));
  GatherRequest wide;  // rows of 40000 bytes: each output row spans two windows
  wide.params = RandomTensor(core::DataType::kComplex128, {7, 2500}, rng);
  wide.indices = RandomIndices(core::DataType::kInt32, {9}, {7}, rng);
  wide.axis = 0;
  cases.push_back(MakeCase(std::move(wide)));
  for (std::unique_ptr<Case>& c : RandomCases(6, rng)) cases.push_back(std::move(c));
  RunBatch(*executor, cases);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
}

TEST_F(CudaExecutorTest, EveryBatchReportsItsStagesWithinItsTime) {
  absl::Mutex mu;
  std::vector<std::pair<int, GpuBatchStages>> reported;
  CudaExecutorOptions options;
  options.streams_per_device = 1;
  options.staging_bytes = int64_t{64} << 10;  // several windows each way
  options.on_batch_stages = [&](int device, const GpuBatchStages& stages) {
    absl::MutexLock lock(&mu);
    reported.emplace_back(device, stages);
  };
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(11);
  for (int b = 0; b < 3; ++b) {
    std::vector<std::unique_ptr<Case>> cases;
    GatherRequest r;
    r.params = RandomTensor(core::DataType::kFloat32, {4096, 16}, rng);
    r.indices = RandomIndices(core::DataType::kInt32, {2048}, {4096}, rng);
    r.axis = 0;
    cases.push_back(MakeCase(std::move(r)));
    const absl::Time start = absl::Now();
    RunBatch(*executor, cases);
    const absl::Duration wall = absl::Now() - start;
    ASSERT_TRUE(AgreesWithCpuAndReference(*cases[0]));
    absl::MutexLock lock(&mu);
    ASSERT_EQ(reported.size(), static_cast<size_t>(b + 1));
    const auto& [device, stages] = reported.back();
    EXPECT_EQ(device, 0);
    // 256 KiB of params in and 128 KiB out through 32 KiB halves: both copies take time, and
    // the three stages lie within the batch's own time.
    EXPECT_GT(stages.copy_in, absl::ZeroDuration());
    EXPECT_GT(stages.copy_out, absl::ZeroDuration());
    EXPECT_GE(stages.kernel, absl::ZeroDuration());
    EXPECT_LE(stages.copy_in + stages.kernel + stages.copy_out, wall);
  }
}

TEST_F(CudaExecutorTest, CancelledAndExpiredTasksAreNotComputed) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(7);
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < 3; ++i) {
    GatherRequest r;
    r.params = RandomTensor(core::DataType::kInt64, {8, 2}, rng);
    r.indices = RandomIndices(core::DataType::kInt32, {5}, {8}, rng);
    r.axis = 0;
    cases.push_back(MakeCase(std::move(r)));
  }
  batching::Batch batch;
  for (std::unique_ptr<Case>& c : cases) batch.push_back(MakeTask(*c));
  batch[0]->cancel->Cancel();
  batch[1]->deadline = absl::Now() - absl::Seconds(1);
  absl::Notification finished;
  executor->Run(std::move(batch), [&finished] { finished.Notify(); });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kBatchTimeout));
  EXPECT_THAT(cases[0]->got, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(cases[1]->got, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(SentinelIntact(cases[0]->output));
  EXPECT_TRUE(SentinelIntact(cases[1]->output));
  EXPECT_TRUE(AgreesWithCpuAndReference(*cases[2]));
}

TEST_F(CudaExecutorTest, MakeOutputIsCalledOnceBeforeTheCopy) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(8);
  std::vector<std::unique_ptr<Case>> cases = RandomCases(16, rng);
  std::vector<int> made(cases.size(), 0);
  batching::Batch batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::unique_ptr<batching::Task> task = MakeTask(*cases[i]);
    task->output = core::MutableTensorView();
    task->make_output = [&c = *cases[i], &n = made[i]] {
      ++n;
      return c.output.mutable_view();
    };
    batch.push_back(std::move(task));
  }
  absl::Notification finished;
  executor->Run(std::move(batch), [&finished] { finished.Notify(); });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kBatchTimeout));
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(AgreesWithCpuAndReference(*cases[i]));
    if (cases[i]->got.ok()) {
      EXPECT_EQ(made[i], 1) << cases[i]->req.DebugString();
    }
  }
}

TEST_F(CudaExecutorTest, TasksOverMaxTaskBytesRunOnTheFallback) {
  CudaExecutorOptions options;
  options.max_task_bytes = 1;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(9);
  std::vector<std::unique_ptr<Case>> cases = RandomCases(20, rng);
  RunBatch(*executor, cases);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
}

TEST_F(CudaExecutorTest, ConcurrentRunsFromManyThreads) {
  CudaExecutorOptions options;
  options.streams_per_device = 2;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  constexpr int kThreads = 8;
  std::vector<std::vector<std::unique_ptr<Case>>> cases(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> batches_done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(100 + t);
      for (int b = 0; b < 10; ++b) {
        std::vector<std::unique_ptr<Case>> batch_cases = RandomCases(8, rng);
        batching::Batch batch;
        for (std::unique_ptr<Case>& c : batch_cases) batch.push_back(MakeTask(*c));
        executor->Run(std::move(batch), [&batches_done] { batches_done.fetch_add(1); });
        for (std::unique_ptr<Case>& c : batch_cases) cases[t].push_back(std::move(c));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const absl::Time deadline = absl::Now() + kBatchTimeout;
  while (batches_done.load() < kThreads * 10 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(batches_done.load(), kThreads * 10);
  for (const auto& per_thread : cases) {
    for (const std::unique_ptr<Case>& c : per_thread) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
  }
}

TEST_F(CudaExecutorTest, DestructorFinishesEverythingItWasGiven) {
  Rng rng(10);
  std::vector<std::unique_ptr<Case>> cases;
  std::atomic<int> batches_done{0};
  {
    CudaExecutorOptions options;
    options.streams_per_device = 1;
    std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
    ASSERT_NE(executor, nullptr);
    for (int b = 0; b < 6; ++b) {
      std::vector<std::unique_ptr<Case>> batch_cases = RandomCases(10, rng);
      batching::Batch batch;
      for (std::unique_ptr<Case>& c : batch_cases) batch.push_back(MakeTask(*c));
      executor->Run(std::move(batch), [&batches_done] { batches_done.fetch_add(1); });
      for (std::unique_ptr<Case>& c : batch_cases) cases.push_back(std::move(c));
    }
  }
  // The CPU fallback may still be finishing its part (strings) after the GPU slots joined.
  const absl::Time deadline = absl::Now() + kBatchTimeout;
  while (batches_done.load() < 6 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(batches_done.load(), 6);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_TRUE(AgreesWithCpuAndReference(*c));
}

}  // namespace
}  // namespace tensorcompute::cuda

namespace tensorcompute::cuda {
namespace {

// A resident table on device 0: the entry a server would publish after UploadTable.
std::shared_ptr<const core::ResidentTensor> UploadedTable(CudaExecutor& executor,
                                                          core::Tensor tensor) {
  absl::StatusOr<core::DeviceCopy> copy = executor.UploadTable(0, tensor);
  EXPECT_THAT(copy, IsOk());
  if (!copy.ok()) return nullptr;
  auto entry = std::make_shared<core::ResidentTensor>();
  entry->name = "table";
  entry->tensor = std::move(tensor);
  entry->device = "gpu:0";
  entry->device_copy = *std::move(copy);
  return entry;
}

TEST_F(CudaExecutorTest, UploadTableRefusesStringsAndOtherDevices) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  EXPECT_THAT(executor->UploadTable(0, MakeStrings({1}, {"a"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("string")));
  EXPECT_THAT(executor->UploadTable(CudaDeviceCount(), MakeTensor<float>({1}, {1})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not one of")));
  absl::StatusOr<core::DeviceCopy> empty = executor->UploadTable(0, MakeTensor<float>({0, 4}, {}));
  ASSERT_THAT(empty, IsOk());
  EXPECT_EQ(empty->gpu, 0);
  EXPECT_NE(empty->data, nullptr);
}

// Tasks on uploaded tables read the device copy: their params views point at zeroed host
// tensors of the same shape, and max_task_bytes is below the tables' size, so a task whose
// params travelled (or that ran on the CPU) would come back wrong. Inline tasks, a bad index
// and a cancelled task share the batch.
TEST_F(CudaExecutorTest, TasksOnAResidentTableGatherFromItsDeviceCopy) {
  CudaExecutorOptions options;
  options.max_task_bytes = 16 << 10;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(0x7ab1e);
  struct Resident {
    std::shared_ptr<const core::ResidentTensor> table;
    core::Tensor zeros;  // what the tasks' params views show on the host
  };
  std::vector<Resident> tables;
  for (core::DataType dtype :
       {core::DataType::kFloat32, core::DataType::kInt8, core::DataType::kComplex128}) {
    core::Tensor t = RandomTensor(dtype, {2048, 16}, rng);
    core::Tensor zeros = t.Clone();
    std::memset(zeros.mutable_bytes().data(), 0, zeros.mutable_bytes().size());
    ASSERT_GT(static_cast<int64_t>(t.bytes().size()), options.max_task_bytes);
    tables.push_back({UploadedTable(*executor, std::move(t)), std::move(zeros)});
    ASSERT_NE(tables.back().table, nullptr);
  }
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<int> table_of;  // -1: inline
  for (int i = 0; i < 48; ++i) {
    const int t = i % 4 == 3 ? -1 : i % 3;
    if (t < 0) {
      cases.push_back(
          MakeCase(RandomGatherRequest(core::DataType::kInt16, core::DataType::kInt64, rng)));
    } else {
      GatherRequest req;
      req.params = tables[t].table->tensor.Clone();
      const core::DataType index_dtype = i % 2 ? core::DataType::kInt32 : core::DataType::kInt64;
      if (i % 5 == 0) {
        req.nd = true;
        req.indices = RandomIndices(index_dtype, {8, 2}, {2048, 16}, rng);
      } else {
        req.axis = 0;
        req.indices = RandomIndices(index_dtype, {UniformInt(rng, 1, 16)}, {2048}, rng);
      }
      if (i == 4) InjectOutOfRangeIndices(req, 1, rng);
      cases.push_back(MakeCase(std::move(req)));
    }
    table_of.push_back(t);
  }
  batching::Batch batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::unique_ptr<batching::Task> task = MakeTask(*cases[i]);
    if (table_of[i] >= 0) {
      task->params = tables[table_of[i]].zeros.view();
      task->table = tables[table_of[i]].table;
    }
    if (i == 7) task->cancel->Cancel();
    batch.push_back(std::move(task));
  }
  absl::Notification finished;
  executor->Run(std::move(batch), [&finished] { finished.Notify(); });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kBatchTimeout));
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i == 7) {
      EXPECT_THAT(cases[i]->got, StatusIs(absl::StatusCode::kCancelled));
      EXPECT_TRUE(SentinelIntact(cases[i]->output));
      continue;
    }
    ASSERT_TRUE(AgreesWithCpuAndReference(*cases[i])) << "task " << i;
  }
  EXPECT_THAT(cases[4]->got, StatusIs(absl::StatusCode::kInvalidArgument));
}

// A uint32 [rows, 64] table (256-byte rows) of random-ish bytes.
core::Tensor RandomishTable(int64_t rows, uint64_t seed) {
  core::Tensor t = *core::Tensor::Allocate(core::DataType::kUint32, {rows, 64});
  absl::Span<uint8_t> bytes = t.mutable_bytes();
  uint64_t x = seed;
  for (size_t i = 0; i < bytes.size(); i += sizeof(uint64_t)) {
    x ^= x << 13;  // xorshift64
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + i, &x, std::min(sizeof(x), bytes.size() - i));
  }
  return t;
}

// Large tables are uploaded through pinned staging chunks (upload_chunks.h): every byte must
// arrive, in place. Each table is read back whole by a gather of all its rows in order on the
// device copy (the task's params view shows zeros on the host, so a gather that did not read
// the copy comes back wrong), compared byte for byte. Sizes: 150 MiB and 3 KiB (nine full
// 16 MiB chunks and a partial one, through alternating buffers), exactly 128 MiB (eight full
// chunks) and 5 MiB and 256 bytes (staged in a single chunk).
TEST_F(CudaExecutorTest, LargeTablesUploadThroughStagingChunksExactly) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  for (const int64_t rows : {int64_t{614412}, int64_t{524288}, int64_t{20481}}) {
    SCOPED_TRACE(::testing::Message() << "table of " << rows << " rows of 256 bytes");
    core::Tensor t = RandomishTable(rows, 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rows));
    const core::Tensor expected = t.Clone();
    core::Tensor zeros = *core::Tensor::Allocate(core::DataType::kUint32, {rows, 64});
    std::memset(zeros.mutable_bytes().data(), 0, zeros.mutable_bytes().size());
    std::shared_ptr<const core::ResidentTensor> table = UploadedTable(*executor, std::move(t));
    ASSERT_NE(table, nullptr);
    core::Tensor indices = *core::Tensor::Allocate(core::DataType::kInt64, {rows});
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(indices.mutable_bytes().data() + r * sizeof(r), &r, sizeof(r));
    }
    absl::StatusOr<core::GatherPlan> plan = core::PlanGather(zeros.view(), indices.view(), 0, 0);
    ASSERT_THAT(plan, IsOk());
    core::Tensor output = *core::Tensor::Allocate(plan->dtype, plan->output_shape);
    absl::Status got = absl::UnknownError("done was never called");
    auto task = std::make_unique<batching::Task>();
    task->plan = *plan;
    task->params = zeros.view();
    task->table = table;
    task->indices = indices.view();
    task->output = output.mutable_view();
    task->done = [&got](absl::Status status) { got = std::move(status); };
    batching::Batch batch;
    batch.push_back(std::move(task));
    absl::Notification finished;
    executor->Run(std::move(batch), [&finished] { finished.Notify(); });
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kBatchTimeout));
    ASSERT_THAT(got, IsOk());
    const absl::Span<const uint8_t> want = expected.bytes(), have = output.bytes();
    ASSERT_EQ(have.size(), want.size());
    const auto [at_want, at_have] = std::mismatch(want.begin(), want.end(), have.begin());
    EXPECT_EQ(at_want, want.end()) << "first difference at byte " << (at_want - want.begin());
  }
}

}  // namespace
}  // namespace tensorcompute::cuda
