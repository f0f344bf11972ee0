// File: core/row_space.h
//
// The rows of a group's members laid end to end, so that one parallel loop covers them all:
// ExecuteGatherGroup's output rows (core/gather.h) and ExecuteEmbeddingBagGroup's bags
// (core/embedding_bag.h). Group row g is row g - start of the member whose
// [start, start + rows) holds it.
//
// Thread-safety: built by one thread, then read by many (ForEachPiece is const).

#ifndef TENSORCOMPUTE_CORE_ROW_SPACE_H_
#define TENSORCOMPUTE_CORE_ROW_SPACE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tensorcompute::core {

class RowSpace {
 public:
  // Appends member `job` with `rows` rows.
  void Add(size_t job, int64_t rows) {
    jobs_.push_back(job);
    starts_.push_back(total_);
    total_ += rows;
  }
  int64_t total() const { return total_; }
  bool empty() const { return jobs_.empty(); }

  // Calls fn(job, begin, end) for each member's share of group rows [begin, end), in order,
  // with begin and end counted in that member's own rows.
  template <typename Fn>
  void ForEachPiece(int64_t begin, int64_t end, Fn&& fn) const {
    size_t m = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    for (; m < jobs_.size() && starts_[m] < end; ++m) {
      const int64_t member_end = m + 1 < starts_.size() ? starts_[m + 1] : total_;
      const int64_t from = std::max(begin, starts_[m]);
      const int64_t to = std::min(end, member_end);
      if (to > from) fn(jobs_[m], from - starts_[m], to - starts_[m]);
    }
  }

 private:
  std::vector<size_t> jobs_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

// Rows per parallel chunk so that a chunk of `rows` rows costing `bytes` in all gets about
// `min_chunk_bytes` of the work on average (at least 1; all of them when bytes <= 0).
inline int64_t GroupMinChunk(int64_t rows, int64_t bytes, int64_t min_chunk_bytes) {
  if (bytes <= 0) return std::max<int64_t>(1, rows);
  return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(rows) * min_chunk_bytes /
                                                   static_cast<double>(bytes)));
}

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_ROW_SPACE_H_
