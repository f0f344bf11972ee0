#include "server/compute/shard_fan_out.h"

#include <limits>
#include <utility>
#include <variant>

#include "absl/time/clock.h"

namespace tensorcompute::server {

ShardRouter::FanOut::FanOut(ShardRouter* router, ComputeRequest request, ComputeEntry::Done done)
    : router_(*router), request_(std::move(request)), done_(std::move(done)) {}

void ShardRouter::FanOut::NoticeCancel() {
  if (request_.cancel != nullptr && request_.cancel->IsCancelled()) CancelRemote();
}

void ShardRouter::FanOut::ChargeAndSend(ByteBudget::Reservation* reservation, int64_t bytes,
                                        std::vector<PartState*> parts) {
  if (absl::Status grown = reservation->Grow(bytes); !grown.ok()) return Answer(grown);
  parts_ = std::move(parts);
  if (parts_.empty()) return Finish();
  // The full count before the first send: a part may end (even on this thread) before the
  // next is sent, and must not find pending_ at zero.
  {
    absl::MutexLock lock(&mu_);
    pending_ = parts_.size();
  }
  for (PartState* part : parts_) {
    if (!local(*part)) SendRemote(*part);
  }
  for (PartState* part : parts_) {
    if (local(*part)) SendLocal(*part);
  }
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    sent_ = true;
    cancel = cancel_asked_;
  }
  if (cancel) CancelRemote();  // asked while the parts were being sent
}

bool ShardRouter::FanOut::BeginRemote(PartState& part) {
  part.start = absl::Now();
  if (request_.cancel != nullptr && request_.cancel->IsCancelled()) {
    PartDone(part, absl::CancelledError("request cancelled by the client"));
    return false;
  }
  part.context = router_.SubCallContext(request_);
  return true;
}

core::PlanOptions ShardRouter::FanOut::BeginLocal(PartState& part) const {
  part.start = absl::Now();
  core::PlanOptions options = router_.compute_->plan_options();
  options.max_output_bytes = std::numeric_limits<int64_t>::max();  // charged with the call
  return options;
}

void ShardRouter::FanOut::SubmitLocal(PartState& part, ComputeRequest sub, int64_t rows,
                                      core::Tensor* output, absl::AnyInvocable<void()> answered) {
  // Its own buffer, not the request's output: Finish puts the parts' rows in the request's
  // order. Allocated flat, as the bytes are all that is read back.
  absl::StatusOr<core::Tensor> allocated = core::Tensor::Allocate(
      dtype_, core::Shape{rows * row_bytes_ / static_cast<int64_t>(core::ElementSize(dtype_))});
  if (!allocated.ok()) return PartDone(part, allocated.status());
  *output = *std::move(allocated);
  sub.table = request_.table;
  sub.deadline = request_.deadline;
  sub.cancel = request_.cancel;
  sub.from_router = true;
  const core::Shape out_shape = batching::OutputShape(sub.plan);
  sub.make_output = [output, out_shape] {
    core::MutableTensorView view;
    view.dtype = output->dtype();
    view.shape = out_shape;
    view.data = output->mutable_bytes();
    return view;
  };
  router_.compute_->SubmitCharged(std::move(sub),
                                  [self = shared_from_this(), &part,
                                   answered = std::move(answered)](absl::Status status) mutable {
                                    std::move(answered)();
                                    self->PartDone(part, std::move(status));
                                  });
}

void ShardRouter::FanOut::PartDone(PartState& part, absl::Status status) {
  router_.metrics_->CountShardCall(part.shard, status.code(), absl::Now() - part.start);
  // Only the first error is kept: the ones after it are mostly the CANCELLED that its
  // CancelRemote causes, and would hide the cause.
  bool last = false, first_error = false;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok() && error_.ok()) {
      error_ = local(part) ? status : router_.Named(table(), part.shard, status);
      first_error = true;
    }
    last = --pending_ == 0;
  }
  if (first_error) CancelRemote();  // the others' answers are no longer needed
  if (!last) return;
  // Every part has ended: this runs on the thread of the last one.
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    error = error_;
  }
  if (!error.ok()) return Answer(error);
  Finish();
}

void ShardRouter::FanOut::CancelRemote() {
  {
    absl::MutexLock lock(&mu_);
    if (!sent_) {  // ChargeAndSend is still sending: it cancels them once they are all sent
      cancel_asked_ = true;
      return;
    }
  }
  // Once sent, parts_ and their contexts no longer change; TryCancel is thread-safe, and is
  // called without the lock because a cancelled call may complete on this thread.
  for (PartState* part : parts_) {
    if (part->context != nullptr) part->context->TryCancel();
  }
}

void ShardRouter::FanOut::PoolFetched(const core::BagRowSplit& split,
                                      const core::Shape& indices_shape,
                                      absl::FunctionRef<void(uint8_t* rows)> fill) {
  const auto& bag = std::get<core::EmbeddingBagPlan>(request_.plan);
  absl::StatusOr<core::Tensor> fetched =
      core::Tensor::Allocate(bag.dtype, core::Shape{split.fetched_rows, bag.dim});
  if (!fetched.ok()) return Answer(fetched.status());
  fetched_ = *std::move(fetched);
  fill(fetched_.mutable_bytes().data());
  fetched_indices_ = core::Tensor::FromValues<int64_t>(core::DataType::kInt64, indices_shape,
                                                       absl::MakeConstSpan(split.indices));
  // fetched_ and fetched_indices_ are members, kept alive by `self` in the pooling task's done,
  // so the task's views stay valid until it finishes.
  ComputeRequest pool;
  pool.plan = core::PlanOnFetchedRows(bag, split);
  pool.params = fetched_.view();
  pool.indices = fetched_indices_.view();
  pool.offsets = request_.offsets;
  pool.weights = request_.weights;
  pool.deadline = request_.deadline;
  pool.cancel = request_.cancel;
  pool.make_output = std::move(request_.make_output);
  router_.Forget(this);  // now an ordinary task, cancelled by the batcher
  // done_ directly, not Answer: the call was forgotten above.
  router_.compute_->SubmitCharged(std::move(pool),
                                  [self = shared_from_this()](absl::Status status) {
                                    std::move(self->done_)(std::move(status));
                                  });
}

void ShardRouter::FanOut::Answer(absl::Status status) {
  router_.Forget(this);
  std::move(done_)(std::move(status));
}

}  // namespace tensorcompute::server
