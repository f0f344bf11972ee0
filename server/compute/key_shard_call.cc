// ShardRouter's lookups on a keyed table sharded by key (shard_router.h, core/key_split.h): the
// keys split by owner, each shard's distinct keys fetched with their found flags, and the
// request's own policy, found mask and pooling applied here with the request's positions.

#include <cstring>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/key_index.h"
#include "core/key_split.h"
#include "core/shard_split.h"
#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"
#include "server/compute/keyed_lookup.h"
#include "server/compute/shard_fan_out.h"
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
// callbacks hold `Part&`: parts_ is filled once, in Plan, before any part is sent, and never
// reallocates.
class ShardRouter::KeyCall : public ShardRouter::FanOut {
 public:
  KeyCall(ShardRouter* router, ComputeRequest request, ComputeEntry::Done done,
          std::vector<int64_t> keys)
      : FanOut(router, std::move(request), std::move(done)), keys_(std::move(keys)) {}

  // Splits, charges and sends the parts; on a failure before any is sent, answers.
  void Start(ByteBudget::Reservation* reservation);

 private:
  struct Part : PartState {
    std::vector<int64_t> keys;  // distinct, all the shard's
    // Local: the lookup of its keys, its rows and found flags.
    KeyedLookup lookup;
    core::Tensor local_output;
    std::vector<uint8_t> local_found;
    // Remote.
    v1::GatherRequest gather;
    v1::GatherResponse answer;
    // Once it is done: its rows and found flags, one per key.
    absl::Span<const uint8_t> rows;
    const uint8_t* found = nullptr;
  };

  void Plan();
  void SendLocal(PartState& state) override;
  void SendRemote(PartState& state) override;
  absl::Status CheckAnswer(Part& part);
  void Finish() override;

  const std::vector<int64_t> keys_;                            // the request's, in its order
  core::MissingKeys policy_ = core::MissingKeys::kError;       // the request's, in force
  core::MissingKeys fetch_policy_ = core::MissingKeys::kZero;  // the parts'
  core::KeySplit split_;
  std::vector<Part> parts_;  // by shard, only those with keys
};

void ShardRouter::KeyCall::Plan() {
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
}

void ShardRouter::KeyCall::Start(ByteBudget::Reservation* reservation) {
  Plan();
  // Held until the answer is sent: the output, the fetched rows and their flags, and a pooled
  // lookup's fetched table (one more row: SKIP's padding row).
  int64_t bytes = batching::OutputBytes(request_.plan) + split_.fetched_rows * (row_bytes_ + 1);
  if (pooled_) bytes += (split_.fetched_rows + 1) * row_bytes_;
  ChargeAndSend(reservation, bytes, parts_);
}

void ShardRouter::KeyCall::SendLocal(PartState& state) {
  Part& part = static_cast<Part&>(state);
  const core::PlanOptions options = BeginLocal(part);
  const int64_t n = static_cast<int64_t>(part.keys.size());
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
  sub.plan = *std::move(plan);
  part.local_found.assign(static_cast<size_t>(n), 0);
  sub.resolve = [&part] { return part.lookup.Resolve(part.local_found.data()); };
  SubmitLocal(part, std::move(sub), n, &part.local_output, [&part] {
    part.rows = part.local_output.bytes();
    part.found = part.local_found.data();
  });
}

void ShardRouter::KeyCall::SendRemote(PartState& state) {
  Part& part = static_cast<Part&>(state);
  if (!BeginRemote(part)) return;
  Peer& peer = *router_.peers_[static_cast<size_t>(part.shard)];
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
                             [self = shared_from_this(), this, &part](grpc::Status status) {
                               absl::Status done = proto::FromGrpcStatus(status);
                               if (done.ok()) done = CheckAnswer(part);
                               PartDone(part, std::move(done));
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

void ShardRouter::KeyCall::Finish() {
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
  PoolFetched(fetched_rows, keys_shape, [&](uint8_t* dst) {
    if (row == 0) return;
    for (const uint8_t* src : rows) {
      std::memcpy(dst, src, row);
      dst += row;
    }
    if (skip) std::memset(dst, 0, row);
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
