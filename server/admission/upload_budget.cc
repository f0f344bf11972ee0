#include "server/admission/upload_budget.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/batching/batcher.h"

namespace tensorcompute::server {

UploadBudget::UploadBudget(int64_t limit, int64_t slot)
    // No waiting line: an upload is admitted at once or refused (upload_budget.h).
    : budget_(limit, /*receive_credit=*/0, /*max_waiting=*/0),
      slot_(std::min(std::max<int64_t>(slot, 0), limit)) {}

absl::StatusOr<ByteBudget::Reservation> UploadBudget::Admit() {
  std::optional<ByteBudget::Reservation> share = budget_.TryReserve(slot_);
  if (share.has_value()) return *std::move(share);
  refused_.fetch_add(1, std::memory_order_relaxed);
  return batching::OverloadedError(
      absl::StrCat(used(), " of the max_upload_bytes budget of ", limit(),
                   " bytes are held by uploads in progress, and an upload needs ", slot_,
                   " (twice max_message_bytes)"));
}

absl::Status UploadBudget::HoldMessage(int64_t bytes, absl::string_view what,
                                       ByteBudget::Reservation* share) {
  if (bytes > limit()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the PutTensor message would take ", bytes, " bytes once decoded (", what,
                     "), more than the whole max_upload_bytes budget of ", limit(),
                     " bytes (--max_upload_bytes); send less in one message"));
  }
  // Within the slot it fits by construction: the slot is already held.
  if (bytes <= slot_ || share->TryGrow(bytes - slot_)) return absl::OkStatus();
  refused_.fetch_add(1, std::memory_order_relaxed);
  return batching::OverloadedError(
      absl::StrCat("this PutTensor message needs ", bytes, " bytes but ", used(),
                   " of the max_upload_bytes budget of ", limit(), " are in use"));
}

void UploadBudget::ReleaseMessage(ByteBudget::Reservation* share) {
  if (share->bytes() > slot_) share->Shrink(share->bytes() - slot_);
}

}  // namespace tensorcompute::server
