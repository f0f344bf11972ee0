// core/key_index.h against absl::flat_hash_map<int64_t, int32_t>, measured in the same process.
//
//   - Find: 4 M random present keys, or a mix with 20% absent keys, looked up on one thread in
//     an index of 1 M keys (mostly cache-resident) and of 32 M keys (DRAM-bound). KeyIndex's
//     batched Find reports `vs_flat_hash_map`: flat_hash_map::find's time for the same keys
//     over its own, timed back to back in each iteration (median over iterations). The map's
//     own cases are listed too, and KeyIndex's one-key Find for scale.
//   - Build: the index of 1 M and 32 M keys from a key column, on this thread alone
//     ("threads:1") and with a ThreadPool of one worker per core ("threads:pool"), with
//     `bytes_per_key` (memory_bytes() / size()), the load factor, and `process_cpu_s` (every
//     thread's CPU time per build).
//   - With --key_index_100m (opt-in: about 3 GB and a minute), the build of 100 M keys too.
// Keys are KeyShardHash(i + 1) for i < n: unique (the finalizer is a bijection) and spread over
// all of int64; absent keys are KeyShardHash(n + 1 + i).
//
// Run: build/tests/bench/key_index_bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true [--key_index_100m]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "benchmark/benchmark.h"
#include <sys/resource.h>

#include "core/key_index.h"
#include "core/thread_pool.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kQueries = int64_t{4} << 20;

// CPU seconds used by every thread of this process so far.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

ThreadPool& Pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return pool;
}

std::vector<int64_t> Keys(int64_t n, int64_t first) {
  std::vector<int64_t> keys(n);
  for (int64_t i = 0; i < n; ++i) keys[i] = static_cast<int64_t>(KeyShardHash(first + i));
  return keys;
}

// One table size: its keys, the index and the map of them, and the two query sets.
struct Table {
  std::vector<int64_t> keys;
  KeyIndex index;
  absl::flat_hash_map<int64_t, int32_t> map;
  std::vector<int64_t> queries[2];  // [0]: all present; [1]: 20% absent
};

int64_t MapFind(const absl::flat_hash_map<int64_t, int32_t>& map,
                const std::vector<int64_t>& queries, int64_t* rows) {
  int64_t found = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    const auto it = map.find(queries[i]);
    rows[i] = it == map.end() ? -1 : it->second;
    found += rows[i] >= 0;
  }
  return found;
}

Table& GetTable(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Table>> tables;
  std::unique_ptr<Table>& table = tables[n];
  if (table) return *table;
  table = std::make_unique<Table>();
  table->keys = Keys(n, 1);
  auto index = KeyIndex::Build(table->keys, &Pool());
  if (!index.ok()) std::abort();
  table->index = *std::move(index);
  table->map.reserve(n);
  for (int64_t i = 0; i < n; ++i) table->map.emplace(table->keys[i], static_cast<int32_t>(i));
  std::mt19937_64 rng(n);
  const std::vector<int64_t> absent = Keys(kQueries, n + 1);
  for (int mix = 0; mix < 2; ++mix) {
    std::vector<int64_t>& q = table->queries[mix];
    q.resize(kQueries);
    for (int64_t i = 0; i < kQueries; ++i) {
      q[i] = mix == 1 && rng() % 5 == 0 ? absent[i] : table->keys[rng() % n];
    }
  }
  return *table;
}

// Each iteration times KeyIndex::Find over the queries, then (timing paused) flat_hash_map's
// finds of the same queries: `vs_flat_hash_map` is the median over iterations of map time /
// index time, so that both sides of a ratio see the same load on a shared machine.
void BM_KeyIndexFind(benchmark::State& state) {
  Table& table = GetTable(state.range(0));
  const std::vector<int64_t>& q = table.queries[state.range(1) ? 1 : 0];
  std::vector<int64_t> rows(q.size());
  std::vector<double> ratios;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    table.index.Find(q, rows.data());
    benchmark::DoNotOptimize(rows.data());
    benchmark::ClobberMemory();
    const auto t1 = std::chrono::steady_clock::now();
    state.PauseTiming();
    benchmark::DoNotOptimize(MapFind(table.map, q, rows.data()));
    const auto t2 = std::chrono::steady_clock::now();
    ratios.push_back(std::chrono::duration<double>(t2 - t1).count() /
                     std::chrono::duration<double>(t1 - t0).count());
    state.ResumeTiming();
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["keys_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kQueries), benchmark::Counter::kIsRate);
  state.counters["vs_flat_hash_map"] = ratios[ratios.size() / 2];
}

void BM_KeyIndexFindOneByOne(benchmark::State& state) {
  Table& table = GetTable(state.range(0));
  const std::vector<int64_t>& q = table.queries[state.range(1) ? 1 : 0];
  std::vector<int64_t> rows(q.size());
  for (auto _ : state) {
    for (size_t i = 0; i < q.size(); ++i) rows[i] = table.index.Find(q[i]);
    benchmark::DoNotOptimize(rows.data());
    benchmark::ClobberMemory();
  }
  state.counters["keys_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kQueries), benchmark::Counter::kIsRate);
}

void BM_FlatHashMapFind(benchmark::State& state) {
  Table& table = GetTable(state.range(0));
  const std::vector<int64_t>& q = table.queries[state.range(1) ? 1 : 0];
  std::vector<int64_t> rows(q.size());
  for (auto _ : state) benchmark::DoNotOptimize(MapFind(table.map, q, rows.data()));
  state.counters["keys_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kQueries), benchmark::Counter::kIsRate);
}

void BM_Build(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<int64_t> keys = Keys(n, 1);
  ThreadPool* pool = state.range(1) ? &Pool() : nullptr;
  double bytes_per_key = 0, load = 0, cpu = 0;
  for (auto _ : state) {
    const double cpu0 = ProcessCpuSeconds();
    auto index = KeyIndex::Build(keys, pool);
    cpu += ProcessCpuSeconds() - cpu0;
    if (!index.ok()) std::abort();
    bytes_per_key = static_cast<double>(index->memory_bytes()) / static_cast<double>(n);
    load = index->load_factor();
    state.PauseTiming();  // freeing 1.5 GB is not the build
    index = KeyIndex();
    state.ResumeTiming();
  }
  state.counters["keys_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n), benchmark::Counter::kIsRate);
  state.counters["bytes_per_key"] = bytes_per_key;
  state.counters["load_factor"] = load;
  state.counters["threads"] = pool == nullptr ? 1 : pool->size() + 1;
  // All threads' CPU time per build: about the same on one thread and on the pool when the
  // split costs nothing, whatever the machine's load does to the wall time.
  state.counters["process_cpu_s"] = cpu / static_cast<double>(state.iterations());
}

void Register(bool with_100m) {
  for (int64_t n : {int64_t{1} << 20, int64_t{32} << 20}) {
    const std::string size = n == (int64_t{1} << 20) ? "1M" : "32M";
    for (int absent : {0, 20}) {
      const std::string name = "/keys:" + size + "/absent:" + std::to_string(absent) + "%";
      benchmark::RegisterBenchmark(("KeyIndexFind" + name).c_str(), BM_KeyIndexFind)
          ->Args({n, absent})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("FlatHashMapFind" + name).c_str(), BM_FlatHashMapFind)
          ->Args({n, absent})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("KeyIndexFindOneByOne" + name).c_str(), BM_KeyIndexFindOneByOne)
          ->Args({n, absent})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  std::vector<std::pair<int64_t, std::string>> builds = {{int64_t{1} << 20, "1M"},
                                                         {int64_t{32} << 20, "32M"}};
  if (with_100m) builds.push_back({100'000'000, "100M"});
  for (const auto& [n, size] : builds) {
    for (int pool : {0, 1}) {
      auto* b = benchmark::RegisterBenchmark(
          ("Build/keys:" + size + (pool ? "/threads:pool" : "/threads:1")).c_str(), BM_Build);
      b->Args({n, pool})->Unit(benchmark::kMillisecond)->UseRealTime();
      if (n > (int64_t{1} << 20)) b->Iterations(1);
    }
  }
}

}  // namespace
}  // namespace tensorcompute::core

int main(int argc, char** argv) {
  bool with_100m = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--key_index_100m") == 0) {
      with_100m = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  tensorcompute::core::Register(with_100m);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
