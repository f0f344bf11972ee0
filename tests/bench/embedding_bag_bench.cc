// Pooled lookups (core/embedding_bag.h) beside the plain gather of the same rows, measured in
// the same process (docs/performance.md, "Pooled lookups").
//
// The table is the one of the peer measurements (../shared/reference/peers.md is not part of
// the repository; the shapes are): 1 GiB of float32 in rows of 256 B (4,194,304 x 64), advised
// to use transparent huge pages as resident tables are, and 262,144 random int64 lookups per
// call in bags of 1, 8, 32 and 128 (offsets n apart). Each case reports rows read per second
// (items_per_second) on one thread and split over a ThreadPool with one worker per core beyond
// the caller; outputs are reused. The gather case copies the same 262,144 rows out (64 MiB):
// pooling writes 1/n of that, so it should read rows at least as fast.
// tools/bench/embedding_bag_peers.py measures NumPy on the same shapes.
//
// BM_LookupByKeys: the same lookups by sparse int64 keys on the table keyed (issue 42), keys
// turned into rows in each iteration, beside BM_GatherSameRows and BM_EmbeddingBagSum.
//
// BM_CompactLookup: the same table stored as float16 and 8-bit row-wise (issue 24), Gather
// and bags of 32, beside the float32 table.
//
// Run: build/tests/bench/embedding_bag_bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include <sys/mman.h>

#include "core/embedding_bag.h"
#include "core/embedding_bag_kernels.h"
#include "core/embedding_bag_simd.h"
#include "core/gather.h"
#include "core/key_index.h"
#include "core/keyed_rows.h"
#include "core/table_storage.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kRows = int64_t{4} << 20;
constexpr int64_t kDim = 64;
constexpr int64_t kTableBytes = kRows * kDim * 4;
constexpr int64_t kLookups = int64_t{256} << 10;

ThreadPool& Pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return pool;
}

const uint8_t* Table() {
  static const uint8_t* table = [] {
    void* p = nullptr;
    if (posix_memalign(&p, 2 << 20, kTableBytes) != 0) std::abort();
    madvise(p, kTableBytes, MADV_HUGEPAGE);
    auto* values = static_cast<float*>(p);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (int64_t i = 0; i < kRows * kDim; ++i) values[i] = uniform(rng);
    return static_cast<const uint8_t*>(p);
  }();
  return table;
}

TensorView TableView() {
  return TensorView{
      DataType::kFloat32, {kRows, kDim}, absl::MakeConstSpan(Table(), kTableBytes), {}};
}

const std::vector<int64_t>& Indices() {
  static const std::vector<int64_t> indices = [] {
    std::vector<int64_t> v(kLookups);
    std::mt19937_64 rng(42);
    for (int64_t& i : v) i = static_cast<int64_t>(rng() % kRows);
    return v;
  }();
  return indices;
}

TensorView Int64View(const std::vector<int64_t>& v) {
  return TensorView{DataType::kInt64,
                    {static_cast<int64_t>(v.size())},
                    absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 8),
                    {}};
}

// Args: bag size, pool (0 = one thread, 1 = split over the pool).
void BM_EmbeddingBagSum(benchmark::State& state) {
  const int64_t bag = state.range(0);
  const bool pooled = state.range(1) != 0;
  std::vector<int64_t> offsets(kLookups / bag);
  for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b) * bag;
  const TensorView params = TableView();
  const TensorView indices = Int64View(Indices());
  const TensorView offsets_view = Int64View(offsets);
  absl::StatusOr<EmbeddingBagPlan> plan =
      PlanEmbeddingBag(params, indices, &offsets_view, nullptr, EmbeddingBagOptions{});
  if (!plan.ok()) {
    state.SkipWithError(std::string(plan.status().message()).c_str());
    return;
  }
  Tensor out = *Tensor::Allocate(plan->dtype, plan->output_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  for (auto _ : state) {
    const absl::Status s = ExecuteEmbeddingBag(*plan, params, indices, &offsets_view, nullptr,
                                               out.mutable_view(), pooled ? &Pool() : nullptr);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
}

// The same rows gathered (copied out, not pooled). Args: pool.
void BM_GatherSameRows(benchmark::State& state) {
  const bool pooled = state.range(0) != 0;
  const TensorView params = TableView();
  const TensorView indices = Int64View(Indices());
  absl::StatusOr<GatherPlan> plan = PlanGather(params, indices, 0, 0);
  if (!plan.ok()) {
    state.SkipWithError(std::string(plan.status().message()).c_str());
    return;
  }
  Tensor out = *Tensor::Allocate(plan->dtype, plan->output_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  ExecuteOptions options;
  options.pool = pooled ? &Pool() : nullptr;
  for (auto _ : state) {
    const absl::Status s = ExecuteGather(*plan, params, indices, out.mutable_view(), options);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
}

// Keyed tables (issue 42): the same table keyed by sparse int64 keys (row i's key is
// KeyShardHash(i + 1)), and the same lookups sent as keys: each iteration turns the keys into
// rows (KeyedRows::Resolve, split over the pool when pooled) and then gathers or pools them, so
// items_per_second compares with BM_GatherSameRows and BM_EmbeddingBagSum directly.
const KeyedRows& KeyedTable() {
  static const std::shared_ptr<KeyedRows> keyed = [] {
    std::vector<int64_t> keys(kRows);
    for (int64_t i = 0; i < kRows; ++i) keys[i] = static_cast<int64_t>(KeyShardHash(i + 1));
    return *KeyedRows::Build("bench", keys, kRows, MissingKeys::kError, false, &Pool());
  }();
  return *keyed;
}

const std::vector<int64_t>& LookupKeys() {
  static const std::vector<int64_t> keys = [] {
    std::vector<int64_t> v(Indices().size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<int64_t>(KeyShardHash(Indices()[i] + 1));
    return v;
  }();
  return keys;
}

// Args: bag (0: a Gather of the rows; else EmbeddingBag SUM over bags of that many; -1: the
// keys turned into rows only, the part of the others' time that is the key index's), pool.
void BM_LookupByKeys(benchmark::State& state) {
  const int64_t bag = state.range(0);
  const bool pooled = state.range(1) != 0;
  ThreadPool* pool = pooled ? &Pool() : nullptr;
  const KeyedRows& keyed = KeyedTable();
  const std::vector<int64_t>& keys = LookupKeys();
  std::vector<int64_t> slots(keys.size());
  const TensorView params = TableView();
  const TensorView indices = Int64View(slots);
  std::vector<int64_t> offsets(bag > 0 ? kLookups / bag : 0);
  for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b) * bag;
  const TensorView offsets_view = Int64View(offsets);
  absl::StatusOr<GatherPlan> gather = PlanGather(params, indices, 0, 0);
  absl::StatusOr<EmbeddingBagPlan> pooled_plan =
      PlanEmbeddingBag(params, indices, &offsets_view, nullptr, EmbeddingBagOptions{});
  if (!gather.ok() || (bag > 0 && !pooled_plan.ok())) {
    state.SkipWithError("plan");
    return;
  }
  const Shape out_shape = bag > 0 ? pooled_plan->output_shape : gather->output_shape;
  Tensor out = *Tensor::Allocate(DataType::kFloat32, out_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  ExecuteOptions options;
  options.pool = pool;
  for (auto _ : state) {
    absl::Status s =
        keyed.Resolve(keys, {kLookups}, MissingKeys::kError, slots.data(), nullptr, pool);
    if (s.ok() && bag >= 0) {
      s = bag > 0 ? ExecuteEmbeddingBag(*pooled_plan, params, indices, &offsets_view, nullptr,
                                        out.mutable_view(), pool)
                  : ExecuteGather(*gather, params, indices, out.mutable_view(), options);
    }
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
}

// The two kernels (core/embedding_bag_kernels.h) on the same 1 GiB seen as rows of `dim`
// floats, bags of 32, one thread: where the vector kernel's register passes stop paying
// (kMaxVectorAccumulatorBytes). Args: dim, vector (0: the generic kernel).
void BM_EmbeddingBagKernel(benchmark::State& state) {
  const int64_t dim = state.range(0);
  const BagKernel kernel = state.range(1) != 0 ? BagKernel::kBest : BagKernel::kGeneric;
  const int64_t rows = kTableBytes / (dim * 4);
  std::vector<int64_t> indices(Indices());
  for (int64_t& i : indices) i %= rows;
  std::vector<int64_t> offsets(kLookups / 32);
  for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b) * 32;
  const TensorView params{
      DataType::kFloat32, {rows, dim}, absl::MakeConstSpan(Table(), rows * dim * 4), {}};
  const TensorView indices_view = Int64View(indices), offsets_view = Int64View(offsets);
  absl::StatusOr<EmbeddingBagPlan> plan =
      PlanEmbeddingBag(params, indices_view, &offsets_view, nullptr, EmbeddingBagOptions{});
  if (!plan.ok()) {
    state.SkipWithError(std::string(plan.status().message()).c_str());
    return;
  }
  if (kernel == BagKernel::kBest && !BagVectorKernelServes(*plan)) {
    state.SkipWithError("the vector kernel does not serve this width on this CPU");
    return;
  }
  Tensor out = *Tensor::Allocate(plan->dtype, plan->output_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  BagViews views;
  views.params = params.data.data();
  views.indices = indices_view.data.data();
  views.offsets = offsets_view.data.data();
  views.num_offsets = offsets_view.shape[0];
  views.output = out.mutable_bytes().data();
  for (auto _ : state) {
    if (ReduceBags(*plan, views, 0, plan->bags, false, kernel) != -1) {
      state.SkipWithError("bad index");
    }
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
  state.SetBytesProcessed(kLookups * dim * 4 * state.iterations());
}

// The same 1 GiB table stored compactly (core/table_storage.h), encoded once, as a server
// stores it on upload: float16 (512 MiB) and 8-bit row-wise (288 MiB).
const Tensor& CompactTable(TableStorage storage) {
  static Tensor tables[4];
  Tensor& t = tables[static_cast<int>(storage)];
  if (t.view().data.empty()) {
    const TableLayout layout =
        *PlanTableLayout("bench", storage, DataType::kFloat32, {kRows, kDim});
    t = *Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
    madvise(t.mutable_bytes().data(), t.mutable_bytes().size(), MADV_HUGEPAGE);
    TableEncoder encoder("bench", layout, t.mutable_bytes().data());
    if (!encoder.Append(absl::MakeConstSpan(Table(), kTableBytes)).ok()) std::abort();
  }
  return t;
}

// Lookups on the table stored three ways, the way the server runs them on a resident table
// (a compact table's Gather is an unpooled lookup, core::PlanUnpooledGather). Reports
// lookups/s (items) and the bytes the table holds. Args: storage (0 as-is, 1 float16, 2
// int8-rowwise), op (0 Gather, 1 EmbeddingBag SUM over bags of 32), pool.
void BM_CompactLookup(benchmark::State& state) {
  const auto storage = static_cast<TableStorage>(state.range(0));
  const bool bags = state.range(1) != 0;
  ThreadPool* pool = state.range(2) != 0 ? &Pool() : nullptr;
  const TensorView params =
      storage == TableStorage::kAsIs ? TableView() : CompactTable(storage).view();
  const TensorView indices = Int64View(Indices());
  std::vector<int64_t> offsets(kLookups / 32);
  for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b) * 32;
  const TensorView offsets_view = Int64View(offsets);
  EmbeddingBagOptions options;
  options.params_encoding = EncodingOf(storage);
  absl::StatusOr<EmbeddingBagPlan> bag_plan =
      bags ? PlanEmbeddingBag(params, indices, &offsets_view, nullptr, options)
           : PlanUnpooledGather(params, EncodingOf(storage), indices, 0, 0);
  absl::StatusOr<GatherPlan> gather_plan = PlanGather(params, indices, 0, 0);
  const bool gather = !bags && storage == TableStorage::kAsIs;
  if (!bag_plan.ok() || !gather_plan.ok()) {
    state.SkipWithError("plan failed");
    return;
  }
  Tensor out = *Tensor::Allocate(DataType::kFloat32,
                                 gather ? gather_plan->output_shape : bag_plan->output_shape);
  std::memset(out.mutable_bytes().data(), 0, out.mutable_bytes().size());  // pre-touch
  ExecuteOptions gather_options;
  gather_options.pool = pool;
  for (auto _ : state) {
    const absl::Status s =
        gather ? ExecuteGather(*gather_plan, params, indices, out.mutable_view(), gather_options)
               : ExecuteEmbeddingBag(*bag_plan, params, indices, bags ? &offsets_view : nullptr,
                                     nullptr, out.mutable_view(), pool);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(out.mutable_bytes().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
  state.counters["held_MiB"] = static_cast<double>(params.data.size()) / (1 << 20);
}

// The ceiling: the same bytes as the gather's output (262,144 rows of 256 B) copied with one
// memcpy from the start of the table, sequential; items are rows.
void BM_MemcpySameBytes(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(kLookups) * kDim * 4;
  std::vector<uint8_t> out(bytes, 1);  // pre-touched
  for (auto _ : state) {
    std::memcpy(out.data(), Table(), bytes);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(kLookups * state.iterations());
}

BENCHMARK(BM_MemcpySameBytes)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_GatherSameRows)
    ->ArgName("pool")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
BENCHMARK(BM_EmbeddingBagSum)
    ->ArgNames({"bag", "pool"})
    ->ArgsProduct({{1, 8, 32, 128}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
BENCHMARK(BM_LookupByKeys)
    ->ArgNames({"bag", "pool"})
    ->ArgsProduct({{-1, 0, 32}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
BENCHMARK(BM_CompactLookup)
    ->ArgNames({"storage", "bags", "pool"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
BENCHMARK(BM_EmbeddingBagKernel)
    ->ArgNames({"dim", "vector"})
    ->ArgsProduct({{16, 64, 128, 256, 512, 1024, 2048}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);

}  // namespace
}  // namespace tensorcompute::core

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tensorcompute::core::Table();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
