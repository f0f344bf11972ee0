// File: tests/testing/cache_traces.h
//
// Access traces for row caches (issue 43), and the plain LRU a cache policy is measured
// against, shared by tests/core/row_cache_policy_test.cc and tests/bench/row_cache_policy_bench.cc.
//
//   PowerLawTrace  `length` rows of [0, rows) drawn with P(rank r) proportional to 1 / r^s
//                  (r = 1..rows), the ranks laid over the rows by a random permutation, so the
//                  hot rows are spread over the table (the profile NVIDIA's parameter server
//                  published its hit rates for: s = 1.2).
//   ScanTrace      every row once, in order (a one-off scan).
//   LruCache       a whole-cache least-recently-used set of `capacity` rows.
//   HitRate        the hits of a trace over its accesses, for a RowCachePolicy (Find, then
//                  Admit on a miss) or an LruCache.
// Header only: the bench links no test library. Thread-safety: none.

#ifndef TENSORCOMPUTE_TESTS_TESTING_CACHE_TRACES_H_
#define TENSORCOMPUTE_TESTS_TESTING_CACHE_TRACES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <numeric>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

#include "core/row_cache_policy.h"

namespace tensorcompute::testing {

inline std::vector<int64_t> PowerLawTrace(int64_t rows, double exponent, int64_t length,
                                          std::mt19937_64& rng) {
  std::vector<double> cdf(static_cast<size_t>(rows));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), exponent);
    cdf[static_cast<size_t>(r)] = sum;
  }
  std::vector<int64_t> row_of_rank(static_cast<size_t>(rows));
  std::iota(row_of_rank.begin(), row_of_rank.end(), int64_t{0});
  std::shuffle(row_of_rank.begin(), row_of_rank.end(), rng);
  std::uniform_real_distribution<double> uniform(0.0, sum);
  std::vector<int64_t> trace(static_cast<size_t>(length));
  for (int64_t& row : trace) {
    const auto rank = std::lower_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin();
    row = row_of_rank[static_cast<size_t>(std::min<int64_t>(rank, rows - 1))];
  }
  return trace;
}

inline std::vector<int64_t> ScanTrace(int64_t rows) {
  std::vector<int64_t> trace(static_cast<size_t>(rows));
  std::iota(trace.begin(), trace.end(), int64_t{0});
  return trace;
}

class LruCache {
 public:
  explicit LruCache(int64_t capacity) : capacity_(capacity) {}

  // True on a hit; a miss caches the row, evicting the least recently used when full.
  bool Access(int64_t row) {
    if (auto it = where_.find(row); it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return true;
    }
    if (static_cast<int64_t>(order_.size()) == capacity_) {
      where_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(row);
    where_[row] = order_.begin();
    return false;
  }

 private:
  const int64_t capacity_;
  std::list<int64_t> order_;  // most recent first
  absl::flat_hash_map<int64_t, std::list<int64_t>::iterator> where_;
};

inline double HitRate(core::RowCachePolicy& policy, absl::Span<const int64_t> trace) {
  int64_t hits = 0;
  for (int64_t row : trace) {
    if (policy.Find(row) >= 0) {
      ++hits;
    } else {
      policy.Admit(row);
    }
  }
  return trace.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(trace.size());
}

inline double HitRate(LruCache& lru, absl::Span<const int64_t> trace) {
  int64_t hits = 0;
  for (int64_t row : trace) hits += lru.Access(row) ? 1 : 0;
  return trace.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(trace.size());
}

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_CACHE_TRACES_H_
