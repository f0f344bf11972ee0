// Tests of CpuExecutor and RunTaskOnCpu (core/batching/cpu_executor.h) on a real ThreadPool:
// random batches byte-identical to the reference gather (small tasks packed, split, and one
// per job), a large task among small ones, a bad index failing only its own task, cancelled
// and expired tasks left uncomputed, batch_done exactly once after every done, and the
// Batcher and CpuExecutor end to end under concurrent scheduling.

#include "core/batching/cpu_executor.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "core/gather_plan.h"
#include "core/thread_pool.h"
#include "tests/batching/task_case.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::batching {
namespace {

using ::tensorcompute::batching::test_support::Case;
using ::tensorcompute::batching::test_support::kSentinel;
using ::tensorcompute::batching::test_support::MakeCase;
using ::tensorcompute::batching::test_support::MakeTask;
using ::tensorcompute::batching::test_support::RunAndWait;
using ::tensorcompute::batching::test_support::SentinelIntact;
using ::tensorcompute::batching::test_support::SharedPool;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomRequestOptions;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::StatusIs;

const absl::Duration kLong = absl::Seconds(60);

// `n` random small requests over every dtype, Gather and GatherNd alternating.
std::vector<std::unique_ptr<Case>> RandomCases(int n, Rng& rng,
                                               const RandomRequestOptions& options = {}) {
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < n; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype = i % 3 ? core::DataType::kInt64 : core::DataType::kInt32;
    cases.push_back(MakeCase(i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng, options)
                                   : RandomGatherRequest(dtype, index_dtype, rng, options)));
  }
  return cases;
}

void ExpectAllAgreeWithReference(const std::vector<std::unique_ptr<Case>>& cases) {
  for (const std::unique_ptr<Case>& c : cases) {
    ASSERT_EQ(c->calls.load(), 1) << c->req.DebugString();
    ASSERT_TRUE(AgreesWithReference(c->Result(), RunReference(c->req))) << c->req.DebugString();
  }
}

TEST(CpuExecutor, RandomBatchesMatchTheReference) {
  struct Variant {
    const char* name;
    int64_t small_job_bytes;
    int64_t min_parallel_bytes;
  };
  const Variant variants[] = {
      {"defaults", CpuExecutorOptions{}.small_job_bytes, core::ExecuteOptions{}.min_parallel_bytes},
      {"one task per job", 1, core::ExecuteOptions{}.min_parallel_bytes},
      {"every task split", CpuExecutorOptions{}.small_job_bytes, 1},
  };
  Rng rng(11);
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    CpuExecutorOptions options;
    options.small_job_bytes = v.small_job_bytes;
    options.execute.min_parallel_bytes = v.min_parallel_bytes;
    CpuExecutor executor(&SharedPool(), options);
    std::vector<std::unique_ptr<Case>> cases = RandomCases(160, rng);
    Batch batch;
    for (std::unique_ptr<Case>& c : cases) {
      ASSERT_NE(c, nullptr);
      batch.push_back(MakeTask(*c));
    }
    RunAndWait(executor, std::move(batch));
    ExpectAllAgreeWithReference(cases);
  }
}

TEST(CpuExecutor, ALargeTaskAmongSmallOnesIsCorrect) {
  Rng rng(12);
  GatherRequest large;  // complex128 [128, 256] rows gathered 1024 times: 4 MiB of output
  large.params = RandomTensor(core::DataType::kComplex128, {128, 256}, rng);
  large.indices = RandomIndices(core::DataType::kInt64, {1024}, {128}, rng);
  large.axis = 0;
  std::vector<std::unique_ptr<Case>> cases = RandomCases(24, rng);
  cases.insert(cases.begin() + 10, MakeCase(std::move(large)));
  ASSERT_GE(cases[10]->plan.output_bytes, 4 << 20);
  ASSERT_GE(cases[10]->plan.output_bytes, core::ExecuteOptions{}.min_parallel_bytes);

  CpuExecutor executor(&SharedPool());
  Batch batch;
  for (std::unique_ptr<Case>& c : cases) batch.push_back(MakeTask(*c));
  RunAndWait(executor, std::move(batch));
  ExpectAllAgreeWithReference(cases);
}

// inline_task_bytes: a lone tiny task is computed and answered on the calling thread before
// Run returns; a larger one (or one among others) goes to the pool.
TEST(CpuExecutor, ALoneTinyTaskRunsOnTheCallingThread) {
  Rng rng(21);
  auto make = [&](int64_t rows) {
    GatherRequest req;
    req.params = RandomTensor(core::DataType::kFloat32, {64, 16}, rng);
    req.indices = RandomIndices(core::DataType::kInt32, {rows}, {64}, rng);
    req.axis = 0;
    return MakeCase(std::move(req));
  };
  CpuExecutorOptions options;
  options.inline_task_bytes = 1024;  // 16 rows of 64 bytes
  CpuExecutor executor(&SharedPool(), options);
  for (int64_t rows : {16, 17}) {
    std::unique_ptr<Case> c = make(rows);
    std::unique_ptr<Task> task = MakeTask(*c);
    std::thread::id answered_on;
    auto done = std::move(task->done);
    task->done = [&answered_on, done = std::move(done)](absl::Status status) mutable {
      answered_on = std::this_thread::get_id();
      std::move(done)(std::move(status));
    };
    Batch batch;
    batch.push_back(std::move(task));
    RunAndWait(executor, std::move(batch));
    EXPECT_EQ(answered_on == std::this_thread::get_id(), rows == 16) << rows << " rows";
    std::vector<std::unique_ptr<Case>> one;
    one.push_back(std::move(c));
    ExpectAllAgreeWithReference(one);
  }
}

TEST(CpuExecutor, AnOutOfRangeIndexFailsOnlyItsOwnTask) {
  Rng rng(13);
  GatherRequest bad;
  bad.params = RandomTensor(core::DataType::kInt32, {5, 3}, rng);
  bad.indices = MakeIndices(core::DataType::kInt64, {2, 2}, {0, 1, 7, 2});
  bad.axis = 0;
  std::vector<std::unique_ptr<Case>> cases = RandomCases(12, rng);
  cases.insert(cases.begin() + 5, MakeCase(std::move(bad)));

  CpuExecutor executor(&SharedPool());
  Batch batch;
  for (std::unique_ptr<Case>& c : cases) batch.push_back(MakeTask(*c));
  RunAndWait(executor, std::move(batch));
  EXPECT_THAT(cases[5]->got,
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,0] = 7 is not in [-5, 5)"));
  ExpectAllAgreeWithReference(cases);  // the others are intact, and so is the message
}

TEST(CpuExecutor, CancelledAndExpiredTasksAreNotComputed) {
  Rng rng(14);
  auto request = [&rng] {
    GatherRequest req;
    req.params = RandomTensor(core::DataType::kFloat32, {16, 8}, rng);
    req.indices = RandomIndices(core::DataType::kInt32, {10}, {16}, rng);
    req.axis = 0;
    return req;
  };
  std::unique_ptr<Case> cancelled = MakeCase(request());
  std::unique_ptr<Case> expired = MakeCase(request());
  std::unique_ptr<Case> live = MakeCase(request());

  Batch batch;
  batch.push_back(MakeTask(*cancelled));
  batch.back()->cancel->Cancel();
  batch.push_back(MakeTask(*expired));
  batch.back()->deadline = absl::Now() - absl::Milliseconds(1);
  batch.push_back(MakeTask(*live));
  batch.back()->deadline = absl::Now() + absl::Hours(1);
  CpuExecutor executor(&SharedPool());
  RunAndWait(executor, std::move(batch));

  EXPECT_THAT(cancelled->got,
              StatusIs(absl::StatusCode::kCancelled, "request cancelled by the client"));
  EXPECT_TRUE(SentinelIntact(cancelled->output));
  EXPECT_THAT(expired->got, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                     "deadline exceeded before compute started"));
  EXPECT_TRUE(SentinelIntact(expired->output));
  EXPECT_TRUE(AgreesWithReference(live->Result(), RunReference(live->req)));
}

TEST(CpuExecutor, BatchDoneRunsOnceAfterEveryDoneAndTaskIsGone) {
  constexpr int kTasks = 50;
  Rng rng(15);
  std::vector<std::unique_ptr<Case>> cases = RandomCases(kTasks, rng);
  std::atomic<int> answered{0};
  std::atomic<int> batch_dones{0};
  std::atomic<int> answered_at_batch_done{-1};
  std::atomic<int> alive_at_batch_done{-1};
  // Each task's cancel flag, which only the task holds: expired once the task is destroyed.
  std::vector<std::weak_ptr<CancelFlag>> flags;
  {
    core::ThreadPool pool(2);
    CpuExecutorOptions options;
    options.small_job_bytes = 256;  // several jobs, so the last done races across threads
    CpuExecutor executor(&pool, options);
    Batch batch;
    for (std::unique_ptr<Case>& c : cases) {
      batch.push_back(MakeTask(*c, [&answered] { answered.fetch_add(1); }));
      flags.push_back(batch.back()->cancel);
    }
    executor.Run(std::move(batch), [&] {
      answered_at_batch_done.store(answered.load());
      int alive = 0;
      for (const std::weak_ptr<CancelFlag>& flag : flags) alive += flag.expired() ? 0 : 1;
      alive_at_batch_done.store(alive);
      batch_dones.fetch_add(1);
    });
  }  // the pool's destructor finishes every job
  EXPECT_EQ(batch_dones.load(), 1);
  EXPECT_EQ(answered_at_batch_done.load(), kTasks);
  EXPECT_EQ(alive_at_batch_done.load(), 0);
  ExpectAllAgreeWithReference(cases);
}

TEST(RunTaskOnCpu, ComputesALiveTaskAndAnswersTheRestWithoutComputing) {
  Rng rng(16);
  GatherRequest req;
  req.params = RandomTensor(core::DataType::kUint8, {7, 3}, rng);
  req.indices = RandomIndices(core::DataType::kInt32, {4}, {7}, rng);
  req.axis = 0;
  std::unique_ptr<Case> c = MakeCase(req.Clone());
  const absl::Time now = absl::Now();

  std::unique_ptr<Task> task = MakeTask(*c);
  task->deadline = now;  // at its deadline: too late
  RunTaskOnCpu(*task, {}, now);
  EXPECT_THAT(c->got, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(SentinelIntact(c->output));

  task = MakeTask(*c);
  task->cancel->Cancel();
  RunTaskOnCpu(*task, {}, now);
  EXPECT_THAT(c->got, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_TRUE(SentinelIntact(c->output));

  task = MakeTask(*c);
  task->deadline = now + absl::Seconds(1);
  RunTaskOnCpu(*task, {}, now);
  EXPECT_THAT(c->got, IsOk());
  EXPECT_TRUE(AgreesWithReference(c->Result(), RunReference(c->req)));
  EXPECT_EQ(c->calls.load(), 3);
}

TEST(BatcherWithCpuExecutor, ConcurrentSchedulersAllGetCorrectAnswers) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 250;
  Rng rng(17);
  RandomRequestOptions small;
  small.max_params_rank = 4;
  small.max_indices_rank = 3;
  small.max_elements = 256;
  std::vector<std::unique_ptr<Case>> cases = RandomCases(kThreads * kPerThread, rng, small);
  for (const std::unique_ptr<Case>& c : cases) ASSERT_NE(c, nullptr);

  core::ThreadPool pool(4);
  CpuExecutor executor(&pool);
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> largest{0};
  BatcherOptions options;
  options.queue_capacity = 2 * kThreads * kPerThread;
  options.on_batch = [&](int64_t size) {
    batches.fetch_add(1);
    int64_t seen = largest.load();
    while (size > seen && !largest.compare_exchange_weak(seen, size)) {
    }
  };
  Batcher batcher(options, &executor);
  absl::BlockingCounter remaining(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t * kPerThread; i < (t + 1) * kPerThread; ++i) {
        std::unique_ptr<Task> task =
            MakeTask(*cases[i], [&remaining] { remaining.DecrementCount(); });
        const absl::Status status = batcher.Schedule(task);
        if (!status.ok()) {
          ADD_FAILURE() << status;
          remaining.DecrementCount();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  remaining.Wait();
  EXPECT_TRUE(batcher.WaitIdle(kLong));
  EXPECT_LE(largest.load(), options.max_batch_size);
  EXPECT_LE(batches.load(), kThreads * kPerThread);
  ExpectAllAgreeWithReference(cases);
}

}  // namespace
}  // namespace tensorcompute::batching

namespace tensorcompute::batching {
namespace {

// A task whose output is made by make_output: it is called once, just before compute, and the
// result lands in the buffer it returned; a cancelled task never calls it.
TEST(RunTaskOnCpu, MakeOutputIsCalledOnceJustBeforeComputeAndNeverForDroppedTasks) {
  const core::Tensor params = testing::MakeTensor<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  const core::Tensor indices = MakeIndices(core::DataType::kInt64, {2}, {2, -3});
  for (bool cancelled : {false, true}) {
    SCOPED_TRACE(cancelled ? "cancelled" : "live");
    absl::StatusOr<core::GatherPlan> plan = core::PlanGather(params.view(), indices.view(), 0, 0);
    ASSERT_THAT(plan, IsOk());
    std::optional<core::Tensor> made;
    int calls = 0;
    Task task;
    task.plan = *plan;
    task.params = params.view();
    task.indices = indices.view();
    task.make_output = [&] {
      ++calls;
      made = *core::Tensor::Allocate(plan->dtype, plan->output_shape);
      return made->mutable_view();
    };
    if (cancelled) task.cancel->Cancel();
    absl::Status result;
    task.done = [&](absl::Status s) { result = s; };
    RunTaskOnCpu(task, core::ExecuteOptions(), absl::Now());
    if (cancelled) {
      EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled));
      EXPECT_EQ(calls, 0);
    } else {
      ASSERT_THAT(result, IsOk());
      ASSERT_EQ(calls, 1);
      EXPECT_THAT(made->values<float>(), ::testing::ElementsAre(5, 6, 1, 2));
    }
  }
}

}  // namespace
}  // namespace tensorcompute::batching
