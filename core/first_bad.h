// File: core/first_bad.h
//
// The lowest bad index position reported by the chunks of a request split across a thread
// pool. Each chunk reports the first bad position in its own range (in order), so the minimum
// is the lowest bad position overall, whatever the split: the one a single thread would find.
//
// Thread-safety: Report may be called from any thread; read found() and position() after the
// chunks have finished.

#ifndef TENSORCOMPUTE_CORE_FIRST_BAD_H_
#define TENSORCOMPUTE_CORE_FIRST_BAD_H_

#include <atomic>
#include <cstdint>
#include <limits>

namespace tensorcompute::core {

class FirstBad {
 public:
  // Records `position` (a negative one means "none" and is ignored).
  void Report(int64_t position) {
    if (position < 0) return;
    int64_t cur = min_.load(std::memory_order_relaxed);
    while (position < cur &&
           !min_.compare_exchange_weak(cur, position, std::memory_order_relaxed)) {
    }
  }
  bool found() const { return min_.load() != kNone; }
  int64_t position() const { return min_.load(); }

 private:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> min_{kNone};
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_FIRST_BAD_H_
