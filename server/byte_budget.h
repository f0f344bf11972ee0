// File: server/byte_budget.h
//
// The memory budget for work in flight (ServerOptions::max_inflight_bytes). It bounds the
// bytes of every request the server holds, from the moment its message is *read* until its
// answer has been sent, so that many clients sending large messages at once cannot push the
// server past max_inflight_bytes plus a small fixed overhead.
//
// gRPC would read a unary call's whole message before any handler runs, and the size of a
// message is not known until it has been read. So the service reads each request itself (its
// RPCs are registered as streamed, compute_service.h), and a call may start reading only with a
// *receive credit* reserved: room for the largest message the server accepts and its parsed
// copy (2 x max_message_bytes, capped to the limit):
//
//   AcquireReceive  kGranted: the credit is held; read the message now.
//                   kQueued:  the budget has room for work, but credits of calls still reading
//                             fill it; the waiter's OnGranted() is called (from the thread that
//                             gives bytes back) when its turn comes, in arrival order. A call
//                             cancelled meanwhile (its deadline, or its client) leaves with
//                             CancelWait.
//                   kRefused: the bytes of accepted work alone leave no room for a message
//                             (or the waiting line is full): answer UNAVAILABLE at once, without
//                             reading the message.
//   ReceiveDone     the message arrived: its credit becomes a reservation of its real size.
//   TryGrow         the request's output: refused (UNAVAILABLE) if the total would pass the
//                   limit, before the output is allocated.
//   Release         the answer was sent.
//
// The total reserved (work plus credits) never passes the limit, except that a request is
// always admitted when nothing else is reserved, so one larger than the budget still runs,
// alone. The cost of the bound: a new call is refused once accepted work leaves less than one
// credit of room, even if its own message is small; keep max_inflight_bytes a good multiple of
// max_message_bytes (the defaults: 16x, so 8 maximum-size messages may be read at once).
//
// Thread-safety: every method may be called from any thread (one mutex, held for a few
// instructions; OnGranted is called without it).

#ifndef TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
#define TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tensorcompute::server {

class ByteBudget {
 public:
  // A call waiting for a receive credit.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // The credit is now held by this waiter: start reading. Called once, without locks held.
    virtual void OnGranted() = 0;
  };

  enum class Admission { kGranted, kQueued, kRefused };

  // `limit`: max_inflight_bytes. `receive_credit`: what reading one message may take at most
  // (the server: twice max_message_bytes, the message and its parsed copy), capped to `limit`.
  // `max_waiting`: the longest waiting line.
  explicit ByteBudget(int64_t limit, int64_t receive_credit = 0, int64_t max_waiting = 1024)
      : limit_(limit),
        credit_(std::min(std::max<int64_t>(receive_credit, 0), limit)),
        max_waiting_(max_waiting) {}

  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  Admission AcquireReceive(Waiter* waiter) {
    absl::MutexLock lock(&mu_);
    if (work_ > 0 && work_ + credit_ > limit_) return Admission::kRefused;
    if (waiting_.empty() && CanGrantLocked()) {
      receiving_ += credit_;
      return Admission::kGranted;
    }
    if (static_cast<int64_t>(waiting_.size()) >= max_waiting_) return Admission::kRefused;
    waiting_.push_back(waiter);
    return Admission::kQueued;
  }

  // True if `waiter` was still waiting and has left the line (no OnGranted will come); false if
  // it was never queued or has already been granted its credit.
  bool CancelWait(Waiter* waiter) {
    std::vector<Waiter*> granted;
    bool removed = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = std::find(waiting_.begin(), waiting_.end(), waiter);
      if (it != waiting_.end()) {
        waiting_.erase(it);
        removed = true;
        GrantLocked(&granted);  // the line may have been held up behind it
      }
    }
    Notify(granted);
    return removed;
  }

  // The message of a granted call arrived with `bytes`: its credit becomes a reservation of
  // `bytes` (of work, until Release). `bytes` = 0 gives the credit back with nothing kept.
  void ReceiveDone(int64_t bytes) {
    std::vector<Waiter*> granted;
    {
      absl::MutexLock lock(&mu_);
      receiving_ -= credit_;
      work_ += bytes;
      GrantLocked(&granted);
    }
    Notify(granted);
  }

  // Grows a reservation of `own` bytes the caller already holds by `bytes` (>= 0), if the total
  // stays within the limit or the caller's is the only reservation.
  bool TryGrow(int64_t own, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    const int64_t total = work_ + receiving_;
    if (total != own && total + bytes > limit_) return false;
    work_ += bytes;
    return true;
  }
  bool TryReserve(int64_t bytes) { return TryGrow(0, bytes); }

  void Release(int64_t bytes) {
    std::vector<Waiter*> granted;
    {
      absl::MutexLock lock(&mu_);
      work_ -= bytes;
      GrantLocked(&granted);
    }
    Notify(granted);
  }

  // Work and receive credits together.
  int64_t used() const {
    absl::MutexLock lock(&mu_);
    return work_ + receiving_;
  }
  int64_t waiting() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(waiting_.size());
  }
  int64_t limit() const { return limit_; }
  int64_t receive_credit() const { return credit_; }

 private:
  bool CanGrantLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t total = work_ + receiving_;
    return total == 0 || total + credit_ <= limit_;
  }
  void GrantLocked(std::vector<Waiter*>* granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!waiting_.empty() && CanGrantLocked()) {
      receiving_ += credit_;
      granted->push_back(waiting_.front());
      waiting_.pop_front();
    }
  }
  static void Notify(const std::vector<Waiter*>& granted) {
    for (Waiter* waiter : granted) waiter->OnGranted();
  }

  const int64_t limit_;
  const int64_t credit_;
  const int64_t max_waiting_;
  mutable absl::Mutex mu_;
  int64_t work_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t receiving_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Waiter*> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
