// ShardRouter's lookups on a keyed table sharded by key (shard_router.h, core/key_split.h): the
// keys split by owner, each shard's distinct keys fetched with their found flags, and the
// request's own policy, found mask and pooling applied here with the request's positions.

#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/key_index.h"
#include "core/key_split.h"
#include "core/shard_split.h"
#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"
#include "server/compute/keyed_lookup.h"
#include "server/compute/shard_router.h"
#include "server/compute/table_plans.h"

namespace tensorcompute::server {
namespace {

// A request's keys as int64 values (its bytes need not be aligned).
std::vector<int64_t> KeysOf(const core::TensorView& keys) {
  std::vector<int64_t> values(keys.data.size() / sizeof(int64_t));
  if (!values.empty()) std::memcpy(values.data(), keys.data.data(), values.size() * 8);
  return values;
}

core::TensorView KeysView(const std::vector<int64_t>& keys) {
  core::TensorView view;
  view.dtype = core::DataType::kInt64;
  view.shape = {static_cast<int64_t>(keys.size())};
  view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(keys.data()),
                                        keys.size() * sizeof(int64_t));
  return view;
}

}  // namespace

// One routed lookup by keys. Shared by its parts' callbacks; the last reference frees it. The
// callbacks hold `Part&`: parts_ is filled once, in Start, before any part is sent, and never
// reallocates.
class ShardRouter::KeyCall : public ShardRouter::Routed,
                             public std::enable_shared_from_this<ShardRouter::KeyCall> {
 public:
  KeyCall(ShardRouter* router, ComputeRequest request, ComputeEntry::Done done,
          std::vector<int64_t> keys)
      : router_(*router),
        request_(std::move(request)),
        done_(std::move(done)),
        keys_(std::move(keys)) {}

  // Splits, charges and sends the parts; on a failure before any is sent, answers.
  void Start(ByteBudget::Reservation* reservation);

  void NoticeCancel() override {
    if (request_.cancel != nullptr && request_.cancel->IsCancelled()) CancelRemote();
  }

 private:
  struct Part {
    int32_t shard = 0;
    std::vector<int64_t> keys;  // distinct, all the shard's
    absl::Time start;
    // Local: the lookup of its keys, its rows and found flags.
    KeyedLookup lookup;
    core::Tensor local_output;
    std::vector<uint8_t> local_found;
    // Remote.
    std::unique_ptr<grpc::ClientContext> context;
    v1::GatherRequest gather;
    v1::GatherResponse answer;
    // Once it is done: its rows and found flags, one per key.
    absl::Span<const uint8_t> rows;
    const uint8_t* found = nullptr;
  };

  const core::ResidentTensor& table() const { return *request_.table; }
  const core::ShardSpec& spec() const { return *request_.table->shard; }
  absl::Status Plan();
  void SendLocal(Part& part);
  void SendRemote(Part& part);
  absl::Status CheckAnswer(Part& part);
  void PartDone(Part& part, absl::Status status);
  void CancelRemote();
  void Finish();
  void Answer(absl::Status status) {
    router_.Forget(this);
    std::move(done_)(std::move(status));
  }

  ShardRouter& router_;
  ComputeRequest request_;
  ComputeEntry::Done done_;
  const std::vector<int64_t> keys_;                            // the request's, in its order
  core::MissingKeys policy_ = core::MissingKeys::kError;       // the request's, in force
  core::MissingKeys fetch_policy_ = core::MissingKeys::kZero;  // the parts'
  bool pooled_ = false;    // a pooled lookup: rows fetched, then pooled here
  int64_t row_bytes_ = 0;  // bytes of one fetched row
  core::DataType dtype_ = core::DataType::kUnspecified;  // the fetched rows' dtype
  core::KeySplit split_;
  std::vector<Part> parts_;  // by shard, only those with keys
  core::Tensor fetched_;     // pooled_: the fetched rows as one table
  core::Tensor fetched_indices_;

  absl::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_asked_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status ShardRouter::KeyCall::Plan() {
  policy_ = request_.keyed->policy();
  // The parts never fail for a missing key: the request's policy is applied here.
  fetch_policy_ = policy_ == core::MissingKeys::kDefaultRow ? core::MissingKeys::kDefaultRow
                                                            : core::MissingKeys::kZero;
  if (const auto* gather = std::get_if<core::GatherPlan>(&request_.plan)) {
    row_bytes_ = gather->slice_bytes();
    dtype_ = gather->dtype;
  } else {
    const auto& bag = std::get<core::EmbeddingBagPlan>(request_.plan);
    row_bytes_ = bag.dim * bag.element_size;
    dtype_ = bag.dtype;
    pooled_ = !bag.unpooled;
  }
  split_ = core::SplitKeys(keys_, spec().count);
  parts_.reserve(static_cast<size_t>(spec().count));
  for (int32_t s = 0; s < spec().count; ++s) {
    std::vector<int64_t>& keys = split_.keys[static_cast<size_t>(s)];
    if (keys.empty()) continue;
    Part& part = parts_.emplace_back();
    part.shard = s;
    part.keys = std::move(keys);
  }
  return absl::OkStatus();
}

void ShardRouter::KeyCall::Start(ByteBudget::Reservation* reservation) {
  if (absl::Status planned = Plan(); !planned.ok()) return Answer(planned);
  // Held until the answer is sent: the output, the fetched rows and their flags, and a pooled
  // lookup's fetched table (one more row: SKIP's padding row).
  int64_t bytes = batching::OutputBytes(request_.plan) + split_.fetched_rows * (row_bytes_ + 1);
  if (pooled_) bytes += (split_.fetched_rows + 1) * row_bytes_;
  if (absl::Status grown = reservation->Grow(bytes); !grown.ok()) return Answer(grown);
  {
    absl::MutexLock lock(&mu_);
    pending_ = parts_.size();
  }
  // Remote parts first: their round trips overlap the local part's compute.
  for (Part& part : parts_) {
    if (part.shard != spec().index) SendRemote(part);
  }
  for (Part& part : parts_) {
    if (part.shard == spec().index) SendLocal(part);
  }
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    sent_ = true;
    cancel = cancel_asked_;
  }
  if (cancel) CancelRemote();
}

void ShardRouter::KeyCall::SendLocal(Part& part) {
  part.start = absl::Now();
  const int64_t n = static_cast<int64_t>(part.keys.size());
  core::PlanOptions options = router_.compute_->plan_options();
  options.max_output_bytes = std::numeric_limits<int64_t>::max();  // charged in Start
  if (absl::Status prepared =
          part.lookup.Prepare(&table(), KeysView(part.keys), fetch_policy_, /*pooled=*/false,
                              options.max_rank, router_.compute_->key_pool());
      !prepared.ok()) {
    return PartDone(part, prepared);
  }
  ComputeRequest sub;
  sub.params = table().keyed_view();
  sub.indices = part.lookup.slots();
  absl::StatusOr<batching::TaskPlan> plan =
      PlanGatherOn(&table(), sub.params, sub.indices, 0, 0, options);
  if (!plan.ok()) return PartDone(part, plan.status());
  absl::StatusOr<core::Tensor> output = core::Tensor::Allocate(
      dtype_, core::Shape{n * row_bytes_ / static_cast<int64_t>(core::ElementSize(dtype_))});
  if (!output.ok()) return PartDone(part, output.status());
  part.local_output = *std::move(output);
  part.local_found.assign(static_cast<size_t>(n), 0);
  sub.plan = *std::move(plan);
  sub.table = request_.table;
  sub.deadline = request_.deadline;
  sub.cancel = request_.cancel;
  sub.from_router = true;
  sub.resolve = [&part] { return part.lookup.Resolve(part.local_found.data()); };
  const core::Shape out_shape = batching::OutputShape(sub.plan);
  sub.make_output = [&part, out_shape] {
    core::MutableTensorView view;
    view.dtype = part.local_output.dtype();
    view.shape = out_shape;
    view.data = part.local_output.mutable_bytes();
    return view;
  };
  router_.compute_->SubmitCharged(std::move(sub),
                                  [self = shared_from_this(), &part](absl::Status status) {
                                    part.rows = part.local_output.bytes();
                                    part.found = part.local_found.data();
                                    self->PartDone(part, std::move(status));
                                  });
}

void ShardRouter::KeyCall::SendRemote(Part& part) {
  Peer& peer = *router_.peers_[static_cast<size_t>(part.shard)];
  part.start = absl::Now();
  if (request_.cancel != nullptr && request_.cancel->IsCancelled()) {
    return PartDone(part, absl::CancelledError("request cancelled by the client"));
  }
  part.context = router_.SubCallContext(request_);
  part.gather.set_params_name(table().name);
  part.gather.set_min_sequence(request_.min_sequence);
  v1::Tensor* keys = part.gather.mutable_keys();
  keys->set_dtype(v1::DT_INT64);
  keys->add_shape(static_cast<int64_t>(part.keys.size()));
  keys->mutable_data()->assign(reinterpret_cast<const char*>(part.keys.data()),
                               part.keys.size() * sizeof(int64_t));
  // The wire's MissingKeys numbers are core's.
  part.gather.set_missing(static_cast<v1::MissingKeys>(fetch_policy_));
  part.gather.set_return_found(true);
  // `self` keeps the call, and so the part's context, request and answer, alive until gRPC has
  // called back.
  peer.stub->async()->Gather(part.context.get(), &part.gather, &part.answer,
                             [self = shared_from_this(), &part](grpc::Status status) {
                               absl::Status done = proto::FromGrpcStatus(status);
                               if (done.ok()) done = self->CheckAnswer(part);
                               self->PartDone(part, std::move(done));
                             });
}

absl::Status ShardRouter::KeyCall::CheckAnswer(Part& part) {
  // Checked to the byte: Finish copies rows and flags out of it by count alone.
  const v1::Tensor& output = part.answer.output();
  const v1::Tensor& found = part.answer.found();
  const int64_t n = static_cast<int64_t>(part.keys.size());
  if (proto::FromProtoDataType(output.dtype()) != dtype_ ||
      static_cast<int64_t>(output.data().size()) != n * row_bytes_ ||
      found.dtype() != v1::DT_BOOL || static_cast<int64_t>(found.data().size()) != n) {
    return absl::InternalError(absl::StrCat(
        "answered ", output.data().size(), " bytes of ", v1::DataType_Name(output.dtype()), " and ",
        found.data().size(), " found flags; expected ", n * row_bytes_, " of ",
        core::DataTypeName(dtype_), " and ", n));
  }
  part.rows = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(output.data().data()),
                                        output.data().size());
  part.found = reinterpret_cast<const uint8_t*>(found.data().data());
  return absl::OkStatus();
}

void ShardRouter::KeyCall::PartDone(Part& part, absl::Status status) {
  router_.metrics_->CountShardCall(part.shard, status.code(), absl::Now() - part.start);
  bool last = false, first_error = false;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok() && error_.ok()) {
      error_ = part.shard == spec().index ? status : router_.Named(table(), part.shard, status);
      first_error = true;
    }
    last = --pending_ == 0;
  }
  if (first_error) CancelRemote();
  if (last) Finish();
}

void ShardRouter::KeyCall::CancelRemote() {
  {
    absl::MutexLock lock(&mu_);
    if (!sent_) {
      cancel_asked_ = true;
      return;
    }
  }
  for (Part& part : parts_) {
    if (part.context != nullptr) part.context->TryCancel();
  }
}

void ShardRouter::KeyCall::Finish() {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    error = error_;
  }
  if (!error.ok()) return Answer(error);
  // Each fetched row's bytes and flag, in fetched order (shard by shard).
  const size_t row = static_cast<size_t>(row_bytes_);
  std::vector<const uint8_t*> rows(static_cast<size_t>(split_.fetched_rows));
  std::vector<uint8_t> found(static_cast<size_t>(split_.fetched_rows));
  for (const Part& part : parts_) {
    const size_t first = static_cast<size_t>(split_.first_row[static_cast<size_t>(part.shard)]);
    for (size_t j = 0; j < part.keys.size(); ++j) {
      rows[first + j] = part.rows.data() + j * row;
      found[first + j] = part.found[j] != 0 ? 1 : 0;
    }
  }
  const core::Shape& keys_shape = request_.keyed->keys().shape;
  if (policy_ == core::MissingKeys::kError) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (found[static_cast<size_t>(split_.row_of[i])] == 0) {
        return Answer(
            core::MissingKeyError(table().name, keys_shape, static_cast<int64_t>(i), keys_[i]));
      }
    }
  }
  if (request_.found != nullptr) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      request_.found[i] = found[static_cast<size_t>(split_.row_of[i])];
    }
  }
  if (!pooled_) {
    if (!request_.make_output) return Answer(absl::OkStatus());  // an empty output
    const core::MutableTensorView out = std::move(request_.make_output)();
    if (row == 0) return Answer(absl::OkStatus());
    uint8_t* dst = out.data.data();
    for (int64_t fetched : split_.row_of) {
      std::memcpy(dst, rows[static_cast<size_t>(fetched)], row);
      dst += row;
    }
    return Answer(absl::OkStatus());
  }
  // A pooled lookup: the fetched rows as one table, then (SKIP) a zero row that the missing
  // keys name as the bag's padding row, pooled by the request's own plan renumbered onto them.
  const auto& bag = std::get<core::EmbeddingBagPlan>(request_.plan);
  const bool skip = policy_ == core::MissingKeys::kSkip;
  core::BagRowSplit fetched_rows;
  fetched_rows.fetched_rows = split_.fetched_rows + (skip ? 1 : 0);
  fetched_rows.padding_slot = skip ? split_.fetched_rows : -1;
  fetched_rows.indices.resize(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) {
    const int64_t fetched = split_.row_of[i];
    fetched_rows.indices[i] =
        skip && found[static_cast<size_t>(fetched)] == 0 ? fetched_rows.padding_slot : fetched;
  }
  absl::StatusOr<core::Tensor> fetched =
      core::Tensor::Allocate(bag.dtype, core::Shape{fetched_rows.fetched_rows, bag.dim});
  if (!fetched.ok()) return Answer(fetched.status());
  fetched_ = *std::move(fetched);
  uint8_t* dst = fetched_.mutable_bytes().data();
  if (row > 0) {
    for (const uint8_t* src : rows) {
      std::memcpy(dst, src, row);
      dst += row;
    }
    if (skip) std::memset(dst, 0, row);
  }
  fetched_indices_ = core::Tensor::FromValues<int64_t>(core::DataType::kInt64, keys_shape,
                                                       absl::MakeConstSpan(fetched_rows.indices));
  ComputeRequest pool;
  pool.plan = core::PlanOnFetchedRows(bag, fetched_rows);
  pool.params = fetched_.view();
  pool.indices = fetched_indices_.view();
  pool.offsets = request_.offsets;
  pool.weights = request_.weights;
  pool.deadline = request_.deadline;
  pool.cancel = request_.cancel;
  pool.make_output = std::move(request_.make_output);
  router_.Forget(this);  // now an ordinary task, cancelled by the batcher
  router_.compute_->SubmitCharged(std::move(pool),
                                  [self = shared_from_this()](absl::Status status) {
                                    std::move(self->done_)(std::move(status));
                                  });
}

void ShardRouter::RouteByKey(ComputeRequest request, ByteBudget::Reservation* reservation,
                             ComputeEntry::Done done) {
  const core::ResidentTensor& table = *request.table;
  const core::ShardSpec& spec = *table.shard;
  if (request.keyed == nullptr) {
    if (request.resolve) {
      return std::move(done)(absl::UnimplementedError(
          absl::StrCat("tensor '", table.name,
                       "' is sharded by key, and this front end does not route lookups by keys; "
                       "use the native Gather or EmbeddingBag")));
    }
    return std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "tensor '", table.name, "' is sharded by key (", spec.count,
        " shards): look it up by keys (Gather along axis 0, or EmbeddingBag), not by indices")));
  }
  std::vector<int64_t> keys = KeysOf(request.keyed->keys());
  const int64_t foreign = core::ForeignKey(keys, spec);
  if (foreign < 0) {
    // Every key is this shard's: served here as an unsharded table serves it.
    const int64_t output_bytes = batching::OutputBytes(request.plan);
    if (absl::Status grown = reservation->Grow(output_bytes); !grown.ok()) {
      return std::move(done)(std::move(grown));
    }
    return compute_->SubmitCharged(std::move(request), std::move(done));
  }
  const int64_t key = keys[static_cast<size_t>(foreign)];
  const std::string why =
      Unroutable(spec, request, static_cast<int32_t>(core::KeyShard(key, spec.count)));
  if (!why.empty()) {
    return std::move(done)(core::ForeignKeyError(table.name, spec, "keys",
                                                 request.keyed->keys().shape, foreign, key, why));
  }
  auto call = std::make_shared<KeyCall>(this, std::move(request), std::move(done), std::move(keys));
  Route(call);
  call->Start(reservation);
}

}  // namespace tensorcompute::server
