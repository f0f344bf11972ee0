// How long lookups wait for a keyed table that grows (issue 42, core/table_growth.h), against
// how long they wait for a plain update of one row, in the same run: readers look keys up as
// the server does (Find, a read lease, Resolve, read the rows) on two threads while the writer
// applies one message that adds a key to a full table of --rows rows of 256 bytes (it grows to
// twice that), then one that overwrites a row (no growth), then copies the same bytes as the
// growth by the same threads outside any gate (the machine's own delays: the ceiling). Prints, as
// medians over --repeats: the messages' times and the longest a reader waited for its lease during
// each window (docs/performance.md, "Keyed tables that grow").
//
//   keyed_growth_bench [--rows 1048576] [--repeats 5]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/keyed_rows.h"
#include "core/live_rows.h"
#include "core/table_growth.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"

namespace tc = tensorcompute::core;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kDim = 64;  // 256-byte rows

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A full float32 keyed table of `rows` keys 0..rows-1 in `registry`.
void PutFull(tc::TensorRegistry& registry, int64_t rows, tc::ThreadPool* pool) {
  absl::StatusOr<tc::Tensor> t =
      tc::Tensor::Allocate(tc::DataType::kFloat32, {rows + tc::kKeyedHiddenRows, kDim});
  std::memset(t->mutable_bytes().data(), 1, t->mutable_bytes().size());
  std::vector<int64_t> keys(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) keys[i] = i;
  auto keyed = tc::KeyedRows::Build("grow", keys, rows, tc::MissingKeys::kZero, false, pool);
  auto reservation = registry.Reserve("grow", *tc::KeyedTableBytes(rows, kDim * 4));
  auto put = registry.Put("grow", *std::move(t), tc::DeviceCopy{}, true, *std::move(reservation),
                          tc::TableStorage::kAsIs, std::nullopt, *keyed);
  if (!keyed.ok() || !reservation.ok() || !put.ok()) {
    std::fprintf(stderr, "put failed\n");
    std::exit(1);
  }
}

// Applies a one-row message by keys (`key`) and returns its time; the readers' longest lease
// wait meanwhile goes to `max_wait_us`.
double Apply(tc::TensorRegistry& registry, const tc::TableGrowth& growth, int64_t key,
             std::atomic<int64_t>& max_wait_ns, double* max_wait_us) {
  const std::vector<int64_t> keys = {key};
  const std::vector<float> values(kDim, 2.0f);
  tc::TensorView k, v;
  k.dtype = tc::DataType::kInt64;
  k.shape = {1};
  k.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(keys.data()), 8);
  v.dtype = tc::DataType::kFloat32;
  v.shape = {1, kDim};
  v.data =
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4);
  const std::shared_ptr<const tc::ResidentTensor> table = registry.Find("grow");
  auto update = tc::PrepareKeyedRowUpdate(*table, k, v, tc::TensorView{});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // readers settle
  max_wait_ns.store(0);
  const Clock::time_point start = Clock::now();
  const absl::StatusOr<int64_t> applied = tc::ApplyRowUpdate(*table, *update, nullptr, &growth);
  const double took = Micros(Clock::now() - start);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // readers that waited report
  *max_wait_us = static_cast<double>(max_wait_ns.load()) / 1000.0;
  if (!update.ok() || !applied.ok()) {
    std::fprintf(stderr, "update failed\n");
    std::exit(1);
  }
  return took;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = int64_t{1} << 20;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--rows") rows = std::atoll(argv[i + 1]);
    if (std::string(argv[i]) == "--repeats") repeats = std::atoi(argv[i + 1]);
  }
  tc::ThreadPool pool(2);
  tc::TensorRegistry registry(int64_t{64} << 30);
  tc::TableGrowth growth;
  growth.registry = &registry;
  growth.pool = &pool;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> max_wait_ns{0}, lookups{0};
  PutFull(registry, rows, &pool);
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      std::vector<int64_t> keys(64), slots(64);
      float sum = 0;
      while (!stop.load()) {
        const std::shared_ptr<const tc::ResidentTensor> table = registry.Find("grow");
        const int64_t n = table->keyed->size();
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        const Clock::time_point asked = Clock::now();
        table->live->AcquireRead();
        const int64_t waited = std::chrono::nanoseconds(Clock::now() - asked).count();
        int64_t seen = max_wait_ns.load();
        while (waited > seen && !max_wait_ns.compare_exchange_weak(seen, waited)) {
        }
        (void)table->keyed->Resolve(keys, {64}, tc::MissingKeys::kZero, slots.data(), nullptr);
        const float* data = reinterpret_cast<const float*>(table->keyed_view().data.data());
        for (int64_t s : slots) sum += data[s * kDim];
        table->live->ReleaseRead();
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
      if (sum == -1.0f) std::printf(" ");
    });
  }
  std::vector<double> grow_us, grow_wait_us, write_us, write_wait_us, idle_wait_us;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    PutFull(registry, rows, &pool);
    double wait = 0;
    grow_us.push_back(Apply(registry, growth, rows + 1, max_wait_ns, &wait));  // a new key
    grow_wait_us.push_back(wait);
    write_us.push_back(Apply(registry, growth, 5, max_wait_ns, &wait));  // a key held
    write_wait_us.push_back(wait);
    // No message: the same bytes copied into a new buffer by the same threads, outside any
    // gate (what the growth costs the machine, without publishing anything): the ceiling.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    max_wait_ns.store(0);
    {
      const tc::TensorView old = registry.Find("grow")->keyed_view();
      std::unique_ptr<uint8_t[]> copy(new uint8_t[2 * old.data.size()]);
      pool.ParallelFor(static_cast<int64_t>(2 * old.data.size()), int64_t{16} << 20,
                       [&](int64_t begin, int64_t end) {
                         const int64_t n = static_cast<int64_t>(old.data.size());
                         if (begin < n) {
                           std::memcpy(copy.get() + begin, old.data.data() + begin,
                                       static_cast<size_t>(std::min(end, n) - begin));
                         }
                         if (end > n) {
                           const int64_t from = std::max(begin, n);
                           std::memset(copy.get() + from, 0, static_cast<size_t>(end - from));
                         }
                       });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    idle_wait_us.push_back(static_cast<double>(max_wait_ns.load()) / 1000.0);
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  std::printf(
      "rows %lld x 256 B (%.0f MiB), %d repeats (medians), %lld lookups of 64 keys\n"
      "growth message (to %lld slots): %8.0f us; longest lease wait meanwhile: %6.0f us\n"
      "one-row update (no growth):     %8.0f us; longest lease wait meanwhile: %6.0f us\n"
      "the same copy, no growth:                    longest lease wait meanwhile: %6.0f us\n",
      static_cast<long long>(rows), static_cast<double>(rows) * 256 / (1 << 20), repeats,
      static_cast<long long>(lookups.load()), static_cast<long long>(2 * rows), Median(grow_us),
      Median(grow_wait_us), Median(write_us), Median(write_wait_us), Median(idle_wait_us));
  return 0;
}
