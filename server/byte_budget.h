// File: server/byte_budget.h
//
// The memory budget for work in flight (ServerOptions::max_inflight_bytes): each accepted
// request reserves its request message's bytes plus its output's bytes until its answer has
// been sent, and a request that would take the total past the limit is refused at once
// (UNAVAILABLE, "server overloaded"), before its output is allocated. A request is always
// admitted when nothing else is reserved, so a single request larger than the budget (but
// within max_message_bytes and max_output_bytes) still runs, alone.
//
// Thread-safety: every method may be called from any thread (one atomic).

#ifndef TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
#define TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace tensorcompute::server {

class ByteBudget {
 public:
  explicit ByteBudget(int64_t limit) : limit_(limit) {}

  // Reserves `bytes` (>= 0) if the total stays within the limit, or if nothing is reserved.
  bool TryReserve(int64_t bytes) {
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used > 0 && used + bytes > limit_) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
