// File: server/admission/byte_budget.h
//
// The memory budget for work in flight (ServerOptions::max_inflight_bytes). It bounds the
// bytes of every request the server holds, from the moment its message is *read* until its
// answer has been sent, so that many clients sending large messages at once cannot push the
// server past max_inflight_bytes plus a small fixed overhead.
//
// gRPC would read a unary call's whole message before any handler runs, and the size of a
// message is not known until it has been read. So the gRPC front ends read each request
// themselves (server/native/unary_reactor.h), and a call may start reading only with a *receive
// credit* reserved: room for the largest message the server accepts and its parsed copy (2 x
// max_message_bytes, capped to the limit):
//
//   AcquireReceive  kGranted: the credit is held; read the message now.
//                   kQueued:  the budget has room for work, but credits of calls still reading
//                             fill it; the waiter's OnGranted() is called (from the thread that
//                             gives bytes back) when its turn comes, in arrival order. A call
//                             cancelled meanwhile (its deadline, or its client) leaves with
//                             CancelWait.
//                   kRefused: the bytes of accepted work alone leave no room for a message
//                             (or the waiting line is full): answer UNAVAILABLE at once
//                             (ReceiveRefusedError), without reading the message.
//   ReceiveDone     the message arrived: its credit becomes a Reservation of its real size.
//   TryReceiveDone  the same for a message that will cost `bytes` once decoded
//                   (proto/decoded_cost.h), which may exceed the credit (a message of many
//                   small strings costs up to ~30x its size parsed): what the credit does not
//                   cover must fit the budget's room (or the call be alone), else the credit is
//                   given back and the call answered UNAVAILABLE (NeedsError) at once, as a
//                   request whose output does not fit. It is refused, not queued: its message
//                   is already in memory, and the waiting line is for calls not yet read. (A
//                   message whose decoded cost exceeds the whole budget never fits; the caller
//                   answers it RESOURCE_EXHAUSTED, DecodedTooLargeError, before parsing it.)
//   TryReserve      a Reservation for a request read outside the budget's credits (HTTP).
//   Reservation     what one request holds, given back when it is destroyed (the answer was
//                   sent); TryGrow (Grow) adds its output's bytes before the output is
//                   allocated, and a refusal is answered UNAVAILABLE (NeedsError, ShareError).
//
// The fair share (client_shares.h, --max_inflight_share): a call of the front ends belongs to a
// client (client_identity.h), named when it arrives (Open: an empty Reservation of that client,
// which the call then fills). While other clients use the budget, one client's work may not
// pass its share: AcquireReceive refuses a new call of a client holding it (kOverShare), and
// ReserveDecoded, Reserve and Grow refuse what would take it past (ShareError), unless that
// call is all the client holds. Refusals are counted (share_refusals). Reservations of no client
// (Open never called: uploads, tests) are not in any share.
//
// The total reserved (work plus credits) never passes the limit, except that a request is
// always admitted when nothing else is reserved, so one larger than the budget still runs,
// alone. The cost of the bound: a new call is refused once accepted work leaves less than one
// credit of room, even if its own message is small; keep max_inflight_bytes a good multiple of
// max_message_bytes (the defaults: 16x, so 8 maximum-size messages may be read at once).
//
// Thread-safety: every method may be called from any thread (one mutex, held for a few
// instructions; OnGranted is called without it). A Reservation is used by one thread at a time.

#ifndef TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
#define TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

#include "server/admission/client_shares.h"

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

  // Bytes one request holds of the budget; destroying (or Reset) gives them back. Movable, not
  // copyable; a default-constructed one holds nothing and belongs to no budget.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Reset(); }

    int64_t bytes() const { return bytes_; }

    // Adds `more` (>= 0) bytes if the budget's total stays within its limit or this is the only
    // reservation (a request alone always runs), and its client's share allows it: true. False
    // leaves it unchanged. REQUIRES: this reservation belongs to a budget.
    bool TryGrow(int64_t more);
    // The same, with the answer to a refusal: OK; UNAVAILABLE NeedsError(bytes() + more) when
    // the budget has no room, ShareError when its client's share does not allow it.
    absl::Status Grow(int64_t more);
    // Gives back `fewer` of its bytes. REQUIRES: 0 <= fewer <= bytes().
    void Shrink(int64_t fewer);
    // Gives back everything; it then holds nothing and belongs to no client (what it grows by
    // afterwards is in no share).
    void Reset();

   private:
    friend class ByteBudget;
    Reservation(ByteBudget* budget, ClientShares::Client* client, int64_t bytes)
        : budget_(budget), client_(client), bytes_(bytes) {}

    ByteBudget* budget_ = nullptr;
    ClientShares::Client* client_ = nullptr;  // a reference to its entry; null: no client
    int64_t bytes_ = 0;
  };

  // kOverShare: the call's client holds its share while others use the budget (ShareError).
  enum class Admission { kGranted, kQueued, kRefused, kOverShare };

  // `limit`: max_inflight_bytes. `receive_credit`: what reading one message may take at most
  // (the server: twice max_message_bytes, the message and its parsed copy), capped to `limit`.
  // `max_waiting`: the longest waiting line. `max_share`: --max_inflight_share, the fraction
  // of `limit` one client may hold while others use the budget (1: no share).
  explicit ByteBudget(int64_t limit, int64_t receive_credit = 0, int64_t max_waiting = 1024,
                      double max_share = 1.0);

  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  Admission AcquireReceive(Waiter* waiter);

  // A call of client `client` (ClientIdentity::Of) arrived: an empty Reservation of that
  // client, which the call keeps until it ends; the client counts as using the budget until then.
  [[nodiscard]] Reservation Open(absl::string_view client);
  // AcquireReceive for the call whose Reservation (from Open) is `call`: kOverShare, at once,
  // when its client holds its share or more while the budget is contended for it.
  Admission AcquireReceive(Waiter* waiter, const Reservation& call);
  // ReserveDecoded for that call: `bytes` are added to `call`. The same errors, and ShareError
  // when they would take its client past its share (`call` is then unchanged).
  absl::Status ReserveDecoded(int64_t bytes, absl::string_view what, Reservation* call);
  // TryReserve for a request of client `client` read outside the credits (HTTP): the
  // Reservation, or UNAVAILABLE: NeedsError(bytes), or ShareError.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::string_view client);

  // True if `waiter` was still waiting and has left the line (no OnGranted will come); false if
  // it was never queued or has already been granted its credit.
  bool CancelWait(Waiter* waiter);

  // The message of a granted call arrived with `bytes`: its credit becomes a Reservation of
  // `bytes`. `bytes` = 0 gives the credit back with nothing kept.
  [[nodiscard]] Reservation ReceiveDone(int64_t bytes);

  // The message of a granted call arrived and will hold `bytes` once decoded: its credit becomes
  // a Reservation of `bytes` if `bytes` is within the credit, or the budget has room for the
  // rest, or nothing else is reserved. Otherwise the credit is given back (calls waiting for one
  // may be granted) and nullopt is returned: answer NeedsError(bytes).
  [[nodiscard]] std::optional<Reservation> TryReceiveDone(int64_t bytes);

  // A Reservation of `bytes`, if the total stays within the limit or nothing else is reserved;
  // nullopt otherwise.
  [[nodiscard]] std::optional<Reservation> TryReserve(int64_t bytes);

  // The rule for a message that will cost `bytes` decoded (proto/decoded_cost.h), in one place
  // for every RPC that reads one. CheckDecoded: OK, or RESOURCE_EXHAUSTED (DecodedTooLargeError,
  // naming `what`) when `bytes` exceeds the whole limit. ReserveDecoded, for a call holding a
  // receive credit: that check, then TryReceiveDone(bytes); UNAVAILABLE (NeedsError) when it
  // does not fit now. The credit is given back on every refusal.
  absl::Status CheckDecoded(int64_t bytes, absl::string_view what) const;
  absl::StatusOr<Reservation> ReserveDecoded(int64_t bytes, absl::string_view what);

  // Work and receive credits together.
  int64_t used() const;
  int64_t waiting() const;
  int64_t limit() const { return limit_; }
  int64_t receive_credit() const { return credit_; }
  // What one client may hold while the budget is contended for it (limit x max_share).
  int64_t share_bytes() const { return share_bytes_; }
  // Calls refused, or outputs not allocated, by the share.
  int64_t share_refusals() const;

  // The answers to a refusal, written here once. UNAVAILABLE:
  //   ReceiveRefusedError  "server overloaded: M of the max_inflight_bytes budget of B bytes are
  //                        in use, and reading a request needs C bytes free (twice
  //                        max_message_bytes); retry with backoff"
  //   NeedsError(n)        "server overloaded: this request needs N bytes but M of the
  //                        max_inflight_bytes budget of B are in use; retry with backoff"
  // RESOURCE_EXHAUSTED (it never fits, retrying does not help):
  //   DecodedTooLargeError(n, what)  "the request would take N bytes once decoded (WHAT), more
  //                        than the whole max_inflight_bytes budget of B bytes
  //                        (--max_inflight_bytes); send less in one request"
  absl::Status ReceiveRefusedError() const;
  absl::Status NeedsError(int64_t bytes) const;
  absl::Status DecodedTooLargeError(int64_t bytes, absl::string_view what) const;
  //   ShareError(call)     "server overloaded: this client (NAME) holds H bytes of the
  //                        max_inflight_bytes budget of B, and may hold S (--max_inflight_share)
  //                        while other clients use it; retry with backoff"
  // REQUIRES: `call` belongs to a client. Call without holding anything of the budget's lock.
  absl::Status ShareError(const Reservation& call) const;

 private:
  enum class Fit { kFits, kNoRoom, kOverShare };
  // Grows a reservation of `own` bytes of `client` (may be null) by `bytes` under the rule of
  // Reservation::TryGrow.
  Fit Grow(ClientShares::Client* client, int64_t own, int64_t bytes);
  // Gives back `bytes` of `client`'s (may be null), and with `leave` its reference.
  void Release(ClientShares::Client* client, int64_t bytes, bool leave);
  bool ShareAllowsLocked(const ClientShares::Client* client, int64_t own, int64_t more,
                         absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanGrantLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrantLocked(std::vector<Waiter*>* granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Notify(const std::vector<Waiter*>& granted);

  const int64_t limit_;
  const int64_t credit_;
  const int64_t max_waiting_;
  const int64_t share_bytes_;
  mutable absl::Mutex mu_;
  int64_t work_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t receiving_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Waiter*> waiting_ ABSL_GUARDED_BY(mu_);
  ClientShares shares_ ABSL_GUARDED_BY(mu_);
  int64_t share_refusals_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_BYTE_BUDGET_H_
