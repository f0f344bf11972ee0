#include "server/admission/byte_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "core/batching/batcher.h"

namespace tensorcompute::server {

ByteBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      client_(std::exchange(other.client_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

ByteBudget::Reservation& ByteBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::exchange(other.budget_, nullptr);
    client_ = std::exchange(other.client_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool ByteBudget::Reservation::TryGrow(int64_t more) {
  // Its own bytes go along so that the budget can tell "alone" (nothing reserved but these).
  if (budget_->Grow(client_, bytes_, more) != Fit::kFits) return false;
  bytes_ += more;
  return true;
}

absl::Status ByteBudget::Reservation::Grow(int64_t more) {
  switch (budget_->Grow(client_, bytes_, more)) {
    case Fit::kFits:
      bytes_ += more;
      return absl::OkStatus();
    case Fit::kNoRoom:
      return budget_->NeedsError(bytes_ + more);
    case Fit::kOverShare:
      return budget_->ShareError(*this);
  }
  return absl::InternalError("unreachable");
}

void ByteBudget::Reservation::Shrink(int64_t fewer) {
  if (fewer == 0) return;
  budget_->Release(client_, fewer, /*leave=*/false);
  bytes_ -= fewer;
}

void ByteBudget::Reservation::Reset() {
  if (budget_ != nullptr && (bytes_ > 0 || client_ != nullptr)) {
    budget_->Release(client_, bytes_, /*leave=*/true);
  }
  client_ = nullptr;
  bytes_ = 0;
}

ByteBudget::ByteBudget(int64_t limit, int64_t receive_credit, int64_t max_waiting, double max_share)
    // Capped to the limit, so that a credit alone fits the budget: on an idle server a call
    // reads within the limit, however large max_message_bytes is.
    : limit_(limit),
      credit_(std::min(std::max<int64_t>(receive_credit, 0), limit)),
      max_waiting_(max_waiting),
      // A share of 1 or more is the whole budget: no client is ever over it.
      share_bytes_(max_share >= 1.0 ? limit : static_cast<int64_t>(max_share * limit)),
      shares_(share_bytes_) {}

ByteBudget::Reservation ByteBudget::Open(absl::string_view client) {
  absl::MutexLock lock(&mu_);
  return Reservation(this, shares_.Enter(client, absl::Now()), 0);
}

ByteBudget::Admission ByteBudget::AcquireReceive(Waiter* waiter, const Reservation& call) {
  {
    absl::MutexLock lock(&mu_);
    if (call.client_ != nullptr && share_bytes_ < limit_ &&
        !shares_.AllowsArrival(*call.client_, absl::Now())) {
      ++share_refusals_;
      return Admission::kOverShare;
    }
  }
  return AcquireReceive(waiter);
}

absl::Status ByteBudget::ReserveDecoded(int64_t bytes, absl::string_view what, Reservation* call) {
  if (absl::Status fits = CheckDecoded(bytes, what); !fits.ok()) {
    (void)ReceiveDone(0);  // the credit back
    return fits;
  }
  std::vector<Waiter*> granted;
  Fit fit = Fit::kFits;
  {
    absl::MutexLock lock(&mu_);
    receiving_ -= credit_;
    // Within its own credit it fits by construction: the credit was already counted.
    const int64_t others = work_ + receiving_;
    if (!ShareAllowsLocked(call->client_, call->bytes_, bytes, absl::Now())) {
      fit = Fit::kOverShare;
    } else if (bytes > credit_ && others != 0 && others + bytes > limit_) {
      fit = Fit::kNoRoom;
    } else {
      work_ += bytes;
      if (call->client_ != nullptr) call->client_->held += bytes;
    }
    GrantLocked(&granted);
  }
  Notify(granted);
  if (fit == Fit::kNoRoom) return NeedsError(bytes);
  if (fit == Fit::kOverShare) return ShareError(*call);
  call->bytes_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<ByteBudget::Reservation> ByteBudget::Reserve(int64_t bytes,
                                                            absl::string_view client) {
  Reservation call = Open(client);
  switch (Grow(call.client_, 0, bytes)) {
    case Fit::kFits:
      call.bytes_ = bytes;
      return call;
    case Fit::kNoRoom:
      return NeedsError(bytes);
    case Fit::kOverShare:
      return ShareError(call);
  }
  return absl::InternalError("unreachable");
}

ByteBudget::Admission ByteBudget::AcquireReceive(Waiter* waiter) {
  absl::MutexLock lock(&mu_);
  if (work_ > 0 && work_ + credit_ > limit_) return Admission::kRefused;
  // Granted at once only when nobody waits: a newcomer never overtakes the line.
  if (waiting_.empty() && CanGrantLocked()) {
    receiving_ += credit_;
    return Admission::kGranted;
  }
  if (static_cast<int64_t>(waiting_.size()) >= max_waiting_) return Admission::kRefused;
  waiting_.push_back(waiter);
  return Admission::kQueued;
}

bool ByteBudget::CancelWait(Waiter* waiter) {
  // Waiters granted here are told after the lock is released, as everywhere in this file:
  // OnGranted runs the waiter's code (it starts a gRPC read), and no callback runs under mu_.
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

ByteBudget::Reservation ByteBudget::ReceiveDone(int64_t bytes) {
  std::vector<Waiter*> granted;
  {
    absl::MutexLock lock(&mu_);
    receiving_ -= credit_;
    work_ += bytes;
    GrantLocked(&granted);
  }
  Notify(granted);
  return Reservation(this, nullptr, bytes);
}

std::optional<ByteBudget::Reservation> ByteBudget::TryReceiveDone(int64_t bytes) {
  std::vector<Waiter*> granted;
  bool fits = false;
  {
    absl::MutexLock lock(&mu_);
    receiving_ -= credit_;
    // Within its own credit it fits by construction: the credit was already counted.
    const int64_t others = work_ + receiving_;
    fits = bytes <= credit_ || others == 0 || others + bytes <= limit_;
    if (fits) work_ += bytes;
    GrantLocked(&granted);
  }
  Notify(granted);
  if (!fits) return std::nullopt;
  return Reservation(this, nullptr, bytes);
}

std::optional<ByteBudget::Reservation> ByteBudget::TryReserve(int64_t bytes) {
  if (Grow(nullptr, 0, bytes) != Fit::kFits) return std::nullopt;
  return Reservation(this, nullptr, bytes);
}

absl::Status ByteBudget::CheckDecoded(int64_t bytes, absl::string_view what) const {
  return bytes > limit_ ? DecodedTooLargeError(bytes, what) : absl::OkStatus();
}

absl::StatusOr<ByteBudget::Reservation> ByteBudget::ReserveDecoded(int64_t bytes,
                                                                   absl::string_view what) {
  if (absl::Status fits = CheckDecoded(bytes, what); !fits.ok()) {
    // Gives the credit back; the empty Reservation it returns holds nothing to keep.
    (void)ReceiveDone(0);
    return fits;
  }
  std::optional<Reservation> reserved = TryReceiveDone(bytes);
  if (!reserved.has_value()) return NeedsError(bytes);
  return *std::move(reserved);
}

ByteBudget::Fit ByteBudget::Grow(ClientShares::Client* client, int64_t own, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (!ShareAllowsLocked(client, own, bytes, absl::Now())) return Fit::kOverShare;
  // total == own: the grower is alone (TryReserve passes 0: nothing reserved at all), and a
  // request alone always runs, whatever its size.
  const int64_t total = work_ + receiving_;
  if (total != own && total + bytes > limit_) return Fit::kNoRoom;
  work_ += bytes;
  if (client != nullptr) client->held += bytes;
  return Fit::kFits;
}

bool ByteBudget::ShareAllowsLocked(const ClientShares::Client* client, int64_t own, int64_t more,
                                   absl::Time now) {
  if (client == nullptr || share_bytes_ >= limit_ || shares_.Allows(*client, own, more, now)) {
    return true;
  }
  ++share_refusals_;
  return false;
}

void ByteBudget::Release(ClientShares::Client* client, int64_t bytes, bool leave) {
  std::vector<Waiter*> granted;
  {
    absl::MutexLock lock(&mu_);
    work_ -= bytes;
    if (client != nullptr) {
      client->held -= bytes;
      if (leave) shares_.Leave(client, absl::Now());
    }
    GrantLocked(&granted);
  }
  Notify(granted);
}

int64_t ByteBudget::share_refusals() const {
  absl::MutexLock lock(&mu_);
  return share_refusals_;
}

int64_t ByteBudget::used() const {
  absl::MutexLock lock(&mu_);
  return work_ + receiving_;
}

int64_t ByteBudget::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiting_.size());
}

// The errors read used(), which takes mu_: call them without it.
absl::Status ByteBudget::ReceiveRefusedError() const {
  return batching::OverloadedError(absl::StrCat(used(), " of the max_inflight_bytes budget of ",
                                                limit_,
                                                " bytes are in use, and reading a request needs ",
                                                credit_, " bytes free (twice max_message_bytes)"));
}

absl::Status ByteBudget::NeedsError(int64_t bytes) const {
  return batching::OverloadedError(absl::StrCat("this request needs ", bytes, " bytes but ", used(),
                                                " of the max_inflight_bytes budget of ", limit_,
                                                " are in use"));
}

absl::Status ByteBudget::DecodedTooLargeError(int64_t bytes, absl::string_view what) const {
  return absl::ResourceExhaustedError(
      absl::StrCat("the request would take ", bytes, " bytes once decoded (", what,
                   "), more than the whole max_inflight_bytes budget of ", limit_,
                   " bytes (--max_inflight_bytes); send less in one request"));
}

absl::Status ByteBudget::ShareError(const Reservation& call) const {
  std::string name;
  int64_t held = 0;
  {
    absl::MutexLock lock(&mu_);
    name = call.client_->name;
    held = call.client_->held;
  }
  return batching::OverloadedError(
      absl::StrCat("this client (", name, ") holds ", held,
                   " bytes of the max_inflight_bytes budget of ", limit_, ", and may hold ",
                   share_bytes_, " (--max_inflight_share) while other clients use it"));
}

bool ByteBudget::CanGrantLocked() const {
  const int64_t total = work_ + receiving_;
  return total == 0 || total + credit_ <= limit_;
}

// In arrival order, stopping at the first that does not fit: every credit is the same size, so
// none behind it would fit either.
void ByteBudget::GrantLocked(std::vector<Waiter*>* granted) {
  while (!waiting_.empty() && CanGrantLocked()) {
    receiving_ += credit_;
    granted->push_back(waiting_.front());
    waiting_.pop_front();
  }
}

void ByteBudget::Notify(const std::vector<Waiter*>& granted) {
  for (Waiter* waiter : granted) waiter->OnGranted();
}

}  // namespace tensorcompute::server
