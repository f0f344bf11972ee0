// Hit rates of core/row_cache_policy.h (set-associative, TinyLFU admission) against a plain
// LRU of the same capacity, the same policy without admission, and the best any cache of that
// size can do on the trace's distribution (the most popular rows held, none other), on
// power-law traces (tests/testing/cache_traces.h), and in the accesses right after a scan of
// the whole table (issue 43; docs/performance.md, "Row cache policy").
//
// Run: build/tests/bench/row_cache_policy_bench [rows] [exponent]

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/row_cache_policy.h"
#include "tests/testing/cache_traces.h"

namespace tc = tensorcompute;

namespace {

// The share of accesses to the `cache` most popular of `rows` rows under the power law.
double BestHitRate(int64_t rows, double exponent, int64_t cache) {
  double top = 0, all = 0;
  for (int64_t r = 1; r <= rows; ++r) {
    const double p = 1.0 / std::pow(static_cast<double>(r), exponent);
    all += p;
    if (r <= cache) top += p;
  }
  return top / all;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const double exponent = argc > 2 ? std::atof(argv[2]) : 1.2;
  const int64_t warm_length = 10 * rows, after_length = 100000;
  std::mt19937_64 rng(43);
  const std::vector<int64_t> trace =
      tc::testing::PowerLawTrace(rows, exponent, warm_length + after_length, rng);
  const absl::Span<const int64_t> warm = absl::MakeConstSpan(trace).first(warm_length);
  const absl::Span<const int64_t> after = absl::MakeConstSpan(trace).subspan(warm_length);
  const std::vector<int64_t> scan = tc::testing::ScanTrace(rows);
  std::printf(
      "%lld rows, power law %.2f; hit rates over %lld accesses, then over the %lld after "
      "a scan of every row\n",
      static_cast<long long>(rows), exponent, static_cast<long long>(warm_length),
      static_cast<long long>(after_length));
  std::printf("%-8s %-6s %-9s %-9s %-9s %-9s %-11s %-11s %-11s %s\n", "cache", "best", "tinylfu",
              "set-lru", "lru", "vs lru", "tinylfu:scan", "set-lru:scan", "lru:scan", "ns/access");
  for (double fraction : {0.01, 0.05, 0.2}) {
    const int64_t cache = static_cast<int64_t>(fraction * static_cast<double>(rows));
    tc::core::RowCachePolicy tinylfu(cache, {true});
    tc::core::RowCachePolicy set_lru(cache, {false});
    tc::testing::LruCache lru(cache);
    const auto start = std::chrono::steady_clock::now();
    const double ours = tc::testing::HitRate(tinylfu, warm);
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(warm.size());
    const double set_only = tc::testing::HitRate(set_lru, warm);
    const double plain = tc::testing::HitRate(lru, warm);
    tc::testing::HitRate(tinylfu, scan);
    tc::testing::HitRate(set_lru, scan);
    tc::testing::HitRate(lru, scan);
    std::printf("%-8.2f %-6.3f %-9.3f %-9.3f %-9.3f %-9.2f %-12.3f %-12.3f %-11.3f %.0f\n",
                fraction, BestHitRate(rows, exponent, cache), ours, set_only, plain, ours / plain,
                tc::testing::HitRate(tinylfu, after), tc::testing::HitRate(set_lru, after),
                tc::testing::HitRate(lru, after), ns);
  }
  return 0;
}
