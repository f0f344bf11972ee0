// One batch of small embedding lookups on one resident table through CpuExecutor: grouped
// (every task carries the table, so the executor runs them as one pass,
// core::ExecuteGatherGroup) against per task (the same tasks without a table: small tasks
// packed into jobs of small_job_bytes, each task one ExecuteGather call).
//
// The table is issue 9's: 1 GiB of float32 in rows of 256 B (4 Mi rows, advised to use
// transparent huge pages as resident tables are), random int64 indices. A batch is `tasks`
// tasks of `indices` indices each; an iteration builds the batch's Tasks (as the batcher
// hands them over), runs it and waits for batch_done. The pool has one worker per hardware
// thread. Reported: batches/s (items = lookups) and output bytes/s.
//
// Run: build/tests/bench/batch_group_bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include <sys/mman.h>

#include "core/batching/cpu_executor.h"
#include "core/gather_plan.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"

namespace tensorcompute::batching {
namespace {

constexpr int64_t kTableBytes = int64_t{1} << 30;
constexpr int64_t kRowBytes = 256;
constexpr int64_t kRows = kTableBytes / kRowBytes;

core::ThreadPool& Pool() {
  static core::ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

// The table's bytes, filled once; the ResidentTensor only names them (its Tensor is unused:
// tasks view these bytes, and grouping keys on the entry's address).
const uint8_t* TableBytes() {
  static const uint8_t* bytes = [] {
    void* p = nullptr;
    if (posix_memalign(&p, 2 << 20, kTableBytes) != 0) std::abort();
    madvise(p, kTableBytes, MADV_HUGEPAGE);
    auto* b = static_cast<uint8_t*>(p);
    std::mt19937_64 rng(1);
    for (int64_t i = 0; i < kTableBytes; i += 8) {
      const uint64_t x = rng();
      std::memcpy(b + i, &x, 8);
    }
    return b;
  }();
  return bytes;
}

// Args: tasks per batch, indices per task, grouped (1) or per task (0).
void BM_Batch(benchmark::State& state) {
  const int64_t num_tasks = state.range(0);
  const int64_t num_indices = state.range(1);
  const bool grouped = state.range(2) != 0;
  const core::TensorView params{core::DataType::kFloat32,
                                {kRows, kRowBytes / 4},
                                absl::MakeConstSpan(TableBytes(), kTableBytes),
                                {}};
  const auto table = std::make_shared<const core::ResidentTensor>();

  std::mt19937_64 rng(42);
  std::vector<std::vector<int64_t>> idx(num_tasks, std::vector<int64_t>(num_indices));
  std::vector<core::TensorView> indices(num_tasks);
  std::vector<core::GatherPlan> plans(num_tasks);
  std::vector<core::Tensor> outputs(num_tasks);
  for (int64_t t = 0; t < num_tasks; ++t) {
    for (int64_t& v : idx[t]) v = static_cast<int64_t>(rng() % kRows);
    indices[t] = core::TensorView{
        core::DataType::kInt64,
        {num_indices},
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(idx[t].data()), num_indices * 8),
        {}};
    absl::StatusOr<core::GatherPlan> plan = core::PlanGather(params, indices[t], 0, 0);
    if (!plan.ok()) {
      state.SkipWithError(std::string(plan.status().message()).c_str());
      return;
    }
    plans[t] = *std::move(plan);
    outputs[t] = *core::Tensor::Allocate(plans[t].dtype, plans[t].output_shape);
    std::memset(outputs[t].mutable_bytes().data(), 0, outputs[t].mutable_bytes().size());
  }

  CpuExecutor executor(&Pool());
  std::atomic<int64_t> failures{0};
  for (auto _ : state) {
    Batch batch;
    batch.reserve(num_tasks);
    for (int64_t t = 0; t < num_tasks; ++t) {
      auto task = std::make_unique<Task>();
      task->plan = plans[t];
      task->params = params;
      task->indices = indices[t];
      task->output = outputs[t].mutable_view();
      if (grouped) task->table = table;
      task->done = [&failures](absl::Status s) {
        if (!s.ok()) failures.fetch_add(1);
      };
      batch.push_back(std::move(task));
    }
    absl::Notification finished;
    executor.Run(std::move(batch), [&finished] { finished.Notify(); });
    finished.WaitForNotification();
  }
  if (failures > 0) state.SkipWithError("a task failed");
  state.SetItemsProcessed(state.iterations() * num_tasks * num_indices);
  state.SetBytesProcessed(state.iterations() * num_tasks * num_indices * kRowBytes);
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tasks", "indices", "grouped"});
  for (int64_t indices : {16, 256, 4096}) {
    for (int grouped : {0, 1}) b->Args({64, indices, grouped});
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.5);
}

BENCHMARK(BM_Batch)->Apply(Args);

}  // namespace
}  // namespace tensorcompute::batching

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tensorcompute::batching::TableBytes();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
