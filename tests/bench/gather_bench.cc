// Gather kernels against memcpy, measured in the same process.
//
// Every case reports `vs_memcpy`: its output bytes/s divided by the bytes/s of a memcpy of the
// same number of bytes into a reused buffer, measured at start-up (median of 15) in this run.
// 1.00 means the gather moved its output as fast as memcpy moves the same bytes.
// The shapes are those of docs/performance.md's peer comparison: params 256 MiB float32,
// output 64 MiB, random int64 indices. Each case runs on one thread ("/threads:1") and split
// over a ThreadPool with one worker per core ("/threads:pool"), with the output reused
// ("reuse") or allocated per call ("alloc", which pays for faulting fresh pages, as a library
// that allocates would).
//
// Run: build/tests/bench/gather_bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true   (tools/bench/bench_table.py formats the result)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include <sys/mman.h>

#include "core/gather.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kParamsBytes = int64_t{256} << 20;
constexpr int64_t kOutputBytes = int64_t{64} << 20;

double g_memcpy_bytes_per_second = 0;

ThreadPool& Pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return pool;
}

// Params are shared by every case (allocated and filled once), in two copies: one on
// ordinary 4 KiB pages, as a parsed request's bytes are, and one advised to use transparent
// huge pages, as NumPy does for large arrays and as resident tables will. Random reads of a
// 256 MiB table on 4 KiB pages miss the TLB on almost every access.
const uint8_t* Params(bool huge) {
  auto make = [](bool advise) {
    void* p = nullptr;
    if (posix_memalign(&p, 2 << 20, kParamsBytes) != 0) std::abort();
    if (advise) madvise(p, kParamsBytes, MADV_HUGEPAGE);
    auto* bytes = static_cast<uint8_t*>(p);
    std::mt19937_64 rng(1);
    for (int64_t i = 0; i < kParamsBytes; i += 8) {
      const uint64_t x = rng();
      std::memcpy(bytes + i, &x, 8);
    }
    return bytes;
  };
  static const uint8_t* small_pages = make(false);
  static const uint8_t* huge_pages = make(true);
  return huge ? huge_pages : small_pages;
}

double MeasureMemcpy(int64_t bytes) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 2);
  std::vector<double> secs;
  for (int i = 0; i < 15; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return bytes / secs[secs.size() / 2];
}

void SetCounters(benchmark::State& state, int64_t bytes_per_iter, int64_t elements_per_iter) {
  const int64_t bytes = bytes_per_iter * state.iterations();
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(elements_per_iter * state.iterations());
  // Seconds memcpy would take for the same bytes; as a rate this reads "fraction of memcpy".
  state.counters["vs_memcpy"] = benchmark::Counter(
      static_cast<double>(bytes) / g_memcpy_bytes_per_second, benchmark::Counter::kIsRate);
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> src(kOutputBytes, 1), dst(kOutputBytes, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kOutputBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, kOutputBytes, kOutputBytes);
}

// A gather case: params viewed as `params_shape` (float32) from the shared 256 MiB buffer.
struct Case {
  Shape params_shape;
  Shape indices_shape;
  bool nd = false;
  int64_t batch_dims = 0;
  int64_t axis = 0;
  std::vector<int64_t> index_limits;  // per index component
};

// Args: pool (0 = one thread, 1 = split over the pool), alloc (1 = new output per call),
// hugepages (1 = params advised to use transparent huge pages).
void BM_Gather(benchmark::State& state, Case c) {
  const bool pooled = state.range(0) != 0;
  const bool alloc = state.range(1) != 0;
  const bool huge = state.range(2) != 0;
  TensorView params{
      DataType::kFloat32, c.params_shape, absl::MakeConstSpan(Params(huge), kParamsBytes), {}};
  int64_t num_index_values = 1;
  for (int64_t d : c.indices_shape) num_index_values *= d;
  std::vector<int64_t> idx(num_index_values);
  std::mt19937_64 rng(42);
  const int64_t depth = static_cast<int64_t>(c.index_limits.size());
  for (int64_t i = 0; i < num_index_values; ++i) {
    idx[i] = static_cast<int64_t>(rng() % c.index_limits[i % depth]);
  }
  TensorView indices{
      DataType::kInt64,
      c.indices_shape,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(idx.data()), idx.size() * 8),
      {}};
  auto plan = c.nd ? PlanGatherNd(params, indices, c.batch_dims)
                   : PlanGather(params, indices, c.axis, c.batch_dims);
  if (!plan.ok()) {
    state.SkipWithError(std::string(plan.status().message()).c_str());
    return;
  }
  ExecuteOptions options;
  options.pool = pooled ? &Pool() : nullptr;
  Tensor out = *Tensor::Allocate(plan->dtype, plan->output_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  for (auto _ : state) {
    if (alloc) out = *Tensor::Allocate(plan->dtype, plan->output_shape);
    absl::Status s = ExecuteGather(*plan, params, indices, out.mutable_view(), options);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, plan->output_bytes, plan->output_elements);
}

Case RowsCase(int64_t row_bytes) {
  const int64_t row_elems = row_bytes / 4;
  const int64_t rows = kParamsBytes / row_bytes;
  const int64_t n = kOutputBytes / row_bytes;
  return Case{{rows, row_elems}, {n}, false, 0, 0, {rows}};
}

Case ScalarCase() {
  const int64_t rows = kParamsBytes / 4;
  return Case{{rows}, {kOutputBytes / 4}, false, 0, 0, {rows}};
}

Case GatherNdDepth2Case() {  // rows of 256 B, indexed by a (i, j) pair
  const int64_t rows = kParamsBytes / 256;
  return Case{{1024, rows / 1024, 64}, {kOutputBytes / 256, 2}, true, 0, 0, {1024, rows / 1024}};
}

Case BatchDims1Case() {  // 16 batches, rows of 1 KiB
  const int64_t rows = kParamsBytes / 16 / 1024;
  const int64_t n = kOutputBytes / 16 / 1024;
  return Case{{16, rows, 256}, {16, n}, false, 1, 1, {rows}};
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"pool", "alloc", "hugepages"});
  for (int huge : {0, 1}) {
    for (int pool : {0, 1}) {
      for (int alloc : {0, 1}) b->Args({pool, alloc, huge});
    }
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
BENCHMARK_CAPTURE(BM_Gather, rows_8B, RowsCase(8))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, rows_64B, RowsCase(64))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, rows_128B, RowsCase(128))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, rows_256B, RowsCase(256))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, rows_1KiB, RowsCase(1024))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, rows_64KiB, RowsCase(64 << 10))->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, scalar_f32, ScalarCase())->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, gather_nd_depth2_256B, GatherNdDepth2Case())->Apply(Args);
BENCHMARK_CAPTURE(BM_Gather, batch_dims1_1KiB, BatchDims1Case())->Apply(Args);

}  // namespace
}  // namespace tensorcompute::core

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tensorcompute::core::Params(false);
  tensorcompute::core::Params(true);
  tensorcompute::core::g_memcpy_bytes_per_second =
      tensorcompute::core::MeasureMemcpy(tensorcompute::core::kOutputBytes);
  std::printf("memcpy ceiling (64 MiB, reused buffer, median of 15): %.2f GB/s\n",
              tensorcompute::core::g_memcpy_bytes_per_second / 1e9);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
