// File: server/admission/upload_budget.h
//
// The memory share of uploads in progress (ServerOptions::max_upload_bytes): PutTensor streams,
// apart from max_inflight_bytes, so that uploads cannot starve lookups of that budget and
// lookups cannot starve uploads of this one.
//
// What it counts is what no other limit sees: the messages an upload reads. While an upload
// waits for its next message, gRPC may take in a whole message for it (up to
// max_message_bytes), and parsing it makes a copy; the tensor the chunks are written into is
// max_resident_bytes' (core::TensorRegistry::Reserve), not this share's. So:
//
//   Admit           an upload is admitted only with a *slot* reserved for its whole life: room
//                   for the largest message and its parsed copy (2 x max_message_bytes, capped
//                   to the limit). No room: UNAVAILABLE at once, before any message is read
//                   ("server overloaded: U of the max_upload_bytes budget of B bytes are held
//                   by uploads in progress, and an upload needs S (twice max_message_bytes);
//                   retry with backoff"), counted in refused(). It is refused, not queued: an
//                   upload holds its slot for as long as its client sends, and a line of uploads
//                   behind slow ones would only wait.
//   HoldMessage     a message read, which costs `bytes` once decoded (proto/decoded_cost.h),
//                   before it is parsed: RESOURCE_EXHAUSTED when `bytes` exceeds the whole limit
//                   (it never fits: "... more than the whole max_upload_bytes budget of B bytes
//                   (--max_upload_bytes); send less in one message"); what exceeds the slot (a
//                   chunk of many small strings costs up to ~30x its size parsed) is added to
//                   the upload's share if the budget has room or the upload is alone, else
//                   UNAVAILABLE ("server overloaded: this PutTensor message needs N bytes but U
//                   of the max_upload_bytes budget of B are in use; retry with backoff"),
//                   counted in refused().
//   ReleaseMessage  the message is consumed (copied into the tensor): the share is its slot
//                   again.
//
// The total never passes the limit, except that an upload alone is always admitted and its
// message held (ByteBudget's rule: a request alone always runs).
//
// Thread-safety: every method may be called from any thread. A share (ByteBudget::Reservation)
// is used by one thread at a time.

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_UPLOAD_BUDGET_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_UPLOAD_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "server/admission/byte_budget.h"

namespace tensorcompute::server {

class UploadBudget {
 public:
  // `limit`: max_upload_bytes (>= 1). `slot`: what one upload holds while it may be reading a
  // message (the server: twice max_message_bytes), capped to `limit`.
  UploadBudget(int64_t limit, int64_t slot);

  UploadBudget(const UploadBudget&) = delete;
  UploadBudget& operator=(const UploadBudget&) = delete;

  // A new upload's share: a Reservation of slot() bytes, to hold until the upload ends.
  // UNAVAILABLE when the budget has no room for it (and it is not alone).
  absl::StatusOr<ByteBudget::Reservation> Admit();

  // A message read into an upload whose share is `share` will cost `bytes` decoded (`what`
  // describes it, for the error): OK with `share` grown to cover it; RESOURCE_EXHAUSTED when
  // `bytes` > limit(); UNAVAILABLE when what exceeds the slot does not fit now. On an error
  // `share` is unchanged. REQUIRES: `share` came from Admit() and holds slot() bytes.
  absl::Status HoldMessage(int64_t bytes, absl::string_view what, ByteBudget::Reservation* share);

  // The message held by HoldMessage is consumed: `share` holds slot() bytes again.
  void ReleaseMessage(ByteBudget::Reservation* share);

  int64_t used() const { return budget_.used(); }
  int64_t limit() const { return budget_.limit(); }
  int64_t slot() const { return slot_; }
  // Uploads and messages refused for want of room (UNAVAILABLE), since start.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  ByteBudget budget_;
  const int64_t slot_;
  std::atomic<int64_t> refused_{0};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_UPLOAD_BUDGET_H_
