// File: server/compute/shard_fan_out.h
//
// What every routed lookup shares, whatever splits it (ShardRouter::Call by row range,
// shard_router.cc; ShardRouter::KeyCall by key, key_shard_call.cc): the parts sent, remote ones
// first so that their round trips overlap this server's compute; this server's own part
// computed by its executors into a buffer of its own; each part's end metered and counted, the
// first error kept (named after its shard and target unless it is this server's) and the other
// parts then cancelled, also when the cancel comes while they are being sent; and a pooled
// lookup's fetched rows pooled here with the request's own plan.
//
// A derived call owns its parts (each derives from PartState, and stays where it is from
// ChargeAndSend until the call is freed), makes and checks each part's sub-request, and assembles
// the answer in Finish.
//
// Thread-safety: parts end on any thread; NoticeCancel may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_SHARD_FAN_OUT_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_SHARD_FAN_OUT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

#include "core/shard_split.h"
#include "core/tensor.h"
#include "server/compute/shard_router.h"

namespace tensorcompute::server {

class ShardRouter::FanOut : public ShardRouter::Routed,
                            public std::enable_shared_from_this<ShardRouter::FanOut> {
 public:
  void NoticeCancel() final;

 protected:
  // One part: the rows of one shard.
  struct PartState {
    int32_t shard = 0;
    absl::Time start;
    std::unique_ptr<grpc::ClientContext> context;  // a remote part's, once sent
  };

  FanOut(ShardRouter* router, ComputeRequest request, ComputeEntry::Done done);

  const core::ResidentTensor& table() const { return *request_.table; }
  const core::ShardSpec& spec() const { return *request_.table->shard; }
  bool local(const PartState& part) const { return part.shard == spec().index; }

  // Charges `bytes` to the request's reservation, held until the answer is sent (refused:
  // that is the answer), then sends every part, the remote ones first; with none, finishes at
  // once. Called once. Every part sent ends in PartDone exactly once.
  template <typename Part>
  void ChargeAndSend(ByteBudget::Reservation* reservation, int64_t bytes,
                     std::vector<Part>& parts) {
    std::vector<PartState*> states;
    for (Part& part : parts) states.push_back(&part);
    ChargeAndSend(reservation, bytes, std::move(states));
  }
  void ChargeAndSend(ByteBudget::Reservation* reservation, int64_t bytes,
                     std::vector<PartState*> parts);
  virtual void SendRemote(PartState& part) = 0;
  virtual void SendLocal(PartState& part) = 0;
  // Every part has ended without an error: the answer is assembled and given (Answer, or
  // PoolFetched).
  virtual void Finish() = 0;

  // For SendRemote: the part's start, and its sub-call's context (the request's deadline, the
  // hop mark and this server's token). False when the request is already cancelled: the part
  // has then ended (CANCELLED) and nothing is to be sent.
  bool BeginRemote(PartState& part);
  // For SendLocal: the part's start, and the plan options of its sub-request (its output was
  // charged with the call's).
  core::PlanOptions BeginLocal(PartState& part) const;
  // For SendLocal: `sub` (params, indices, plan and perhaps resolve set) runs on this server's
  // executors with the request's table, deadline and cancellation, marked a router's sub-call,
  // writing its rows of dtype_ and row_bytes_ to `*output` (allocated here, flat); then
  // `answered` runs and the part ends.
  void SubmitLocal(PartState& part, ComputeRequest sub, int64_t rows, core::Tensor* output,
                   absl::AnyInvocable<void()> answered);
  // A part has ended: its status, then (when all have) Finish or the first error's answer.
  void PartDone(PartState& part, absl::Status status);
  // A pooled lookup's end: the fetched rows as one table of split.fetched_rows rows of
  // row_bytes_, written by `fill`, pooled by the request's own plan renumbered onto them
  // (split.indices, of `indices_shape`), into the request's output; then the answer.
  void PoolFetched(const core::BagRowSplit& split, const core::Shape& indices_shape,
                   absl::FunctionRef<void(uint8_t* rows)> fill);
  void Answer(absl::Status status);

  ShardRouter& router_;
  ComputeRequest request_;
  bool pooled_ = false;    // a pooled lookup: rows fetched, then pooled here
  int64_t row_bytes_ = 0;  // bytes of one fetched row
  core::DataType dtype_ = core::DataType::kUnspecified;  // the fetched rows' dtype

 private:
  void CancelRemote();

  ComputeEntry::Done done_;
  std::vector<PartState*> parts_;  // set once by ChargeAndSend, before any part is sent
  core::Tensor fetched_;           // PoolFetched's table and indices, alive while it pools
  core::Tensor fetched_indices_;

  absl::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool sent_ ABSL_GUARDED_BY(mu_) = false;          // every part has been sent
  bool cancel_asked_ ABSL_GUARDED_BY(mu_) = false;  // CancelRemote came before that
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_SHARD_FAN_OUT_H_
