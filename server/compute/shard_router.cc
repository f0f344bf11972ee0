#include "server/compute/shard_router.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/shard_split.h"
#include "core/status_macros.h"
#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"
#include "server/compute/peer_channel.h"
#include "server/compute/shard_fan_out.h"
#include "server/compute/table_plans.h"

namespace tensorcompute::server {
namespace {

// A sub-call's index values as an int64 tensor of `shape` on the wire.
void SetIndices(const std::vector<int64_t>& values, std::initializer_list<int64_t> shape,
                v1::Tensor* out) {
  out->set_dtype(v1::DT_INT64);
  for (int64_t d : shape) out->add_shape(d);
  out->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(int64_t));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseShardPeers(const std::string& flag) {
  std::vector<std::string> peers;
  if (flag.empty()) return peers;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shard_peers '", flag,
                       "': an empty target; expected one gRPC target per shard, "
                       "comma-separated"));
    }
    // ',' already separates shards in the flag, so '|' stands for the ',' of gRPC's
    // ipv4:/ipv6: address lists.
    peers.push_back(absl::StrReplaceAll(entry, {{"|", ","}}));
  }
  return peers;
}

// One routed request on a table sharded by row ranges. Shared by its parts' callbacks; the last
// reference frees it. The callbacks hold `Part&`: parts_ is filled once, in Split, before any
// part is sent, and never reallocates.
class ShardRouter::Call : public ShardRouter::FanOut {
 public:
  Call(ShardRouter* router, ComputeRequest request, ComputeEntry::Done done)
      : FanOut(router, std::move(request), std::move(done)) {}

  // Splits, charges and sends the parts; on a failure before any is sent, answers.
  void Start(ByteBudget::Reservation* reservation);

 private:
  struct Part : PartState {
    std::vector<int64_t> values;  // index values, first component global
    int64_t rows = 0;             // rows it answers
    // Local: its indices (rows relative to the shard) and output.
    core::Tensor local_indices;
    core::Tensor local_output;
    // Remote.
    v1::GatherRequest gather;
    v1::GatherNdRequest gather_nd;
    v1::GatherResponse gather_answer;
    v1::GatherNdResponse gather_nd_answer;
    // Its rows once it is done.
    absl::Span<const uint8_t> answer;
  };

  absl::Status Split();
  absl::Status CheckRoutable(const Part& part) const;
  void SendLocal(PartState& state) override;
  void SendRemote(PartState& state) override;
  absl::Status CheckAnswer(Part& part, const v1::Tensor& output);
  void Finish() override;

  bool nd_ = false;          // parts are GatherNd sub-calls
  int64_t depth_ = 1;        // index values per output row
  core::RowSplit rows_;      // !pooled_
  core::BagRowSplit bags_;   // pooled_
  std::vector<Part> parts_;  // by shard, only those with rows
};

absl::Status ShardRouter::Call::Split() {
  const int32_t count = spec().count;
  std::vector<std::vector<int64_t>>* values = nullptr;
  if (const auto* gather = std::get_if<core::GatherPlan>(&request_.plan)) {
    // (A string table is never sharded: PutTensor and --preload refuse it.)
    TC_RETURN_IF_ERROR(CheckSplitsByRows(&table(), *gather));
    nd_ = gather->op == core::GatherOp::kGatherNd;
    depth_ = gather->depth;
    row_bytes_ = gather->slice_bytes();
    dtype_ = gather->dtype;
    TC_ASSIGN_OR_RETURN(rows_, core::SplitRows(*gather, request_.indices, count));
    values = &rows_.values;
  } else {
    const auto& bag = std::get<core::EmbeddingBagPlan>(request_.plan);
    row_bytes_ = bag.dim * bag.element_size;
    dtype_ = bag.dtype;
    if (bag.unpooled) {
      TC_ASSIGN_OR_RETURN(rows_, core::SplitRows(bag, request_.indices, count));
      values = &rows_.values;
    } else {
      pooled_ = true;
      TC_ASSIGN_OR_RETURN(bags_, core::SplitBagRows(bag, request_.indices, count));
      values = &bags_.rows;
    }
  }
  for (int32_t s = 0; s < count; ++s) {
    std::vector<int64_t>& part_values = (*values)[static_cast<size_t>(s)];
    if (part_values.empty()) continue;
    Part& part = parts_.emplace_back();
    part.shard = s;
    // depth_ index values make one output row (a GatherNd tuple); 1 otherwise.
    part.rows = static_cast<int64_t>(part_values.size()) / depth_;
    part.values = std::move(part_values);
  }
  return absl::OkStatus();
}

absl::Status ShardRouter::Call::CheckRoutable(const Part& part) const {
  if (local(part)) return absl::OkStatus();
  const std::string why = router_.Unroutable(spec(), request_, part.shard);
  if (why.empty()) return absl::OkStatus();
  const core::RowRange own = core::ShardRows(spec());
  return absl::FailedPreconditionError(
      absl::StrCat("tensor '", table().name, "' here is shard ", spec().index, " of ", spec().count,
                   " (rows [", own.begin, ", ", own.end, ") of ", spec().total_rows, "); row ",
                   part.values[0], " is shard ", part.shard, "'s, and ", why));
}

void ShardRouter::Call::Start(ByteBudget::Reservation* reservation) {
  if (absl::Status split = Split(); !split.ok()) return Answer(split);
  // Every part is checked before any is charged or sent: a request goes out whole or not at all.
  for (const Part& part : parts_) {
    if (absl::Status routable = CheckRoutable(part); !routable.ok()) return Answer(routable);
  }
  // Held until the answer is sent: the output, the parts' rows and the fetched table.
  int64_t bytes = batching::OutputBytes(request_.plan);
  for (const Part& part : parts_) bytes += part.rows * row_bytes_;
  if (pooled_) bytes += bags_.fetched_rows * row_bytes_;
  ChargeAndSend(reservation, bytes, parts_);
}

void ShardRouter::Call::SendLocal(PartState& state) {
  Part& part = static_cast<Part&>(state);
  const core::PlanOptions options = BeginLocal(part);
  // The part's rows renumbered to the shard's own (only each tuple's first component is a row).
  const int64_t first = core::ShardRows(spec()).begin;
  std::vector<int64_t> local = part.values;
  for (size_t k = 0; k < local.size(); k += static_cast<size_t>(depth_)) local[k] -= first;
  const core::Shape shape = nd_ ? core::Shape{part.rows, depth_} : core::Shape{part.rows};
  part.local_indices =
      core::Tensor::FromValues<int64_t>(core::DataType::kInt64, shape, absl::MakeConstSpan(local));
  ComputeRequest sub;
  sub.params = table().local_view();
  sub.indices = part.local_indices.view();
  absl::StatusOr<batching::TaskPlan> plan =
      nd_ ? PlanGatherNdOn(&table(), sub.params, sub.indices, 0, options)
          : PlanGatherOn(&table(), sub.params, sub.indices, 0, 0, options);
  if (!plan.ok()) return PartDone(part, plan.status());
  sub.plan = *std::move(plan);
  SubmitLocal(part, std::move(sub), part.rows, &part.local_output,
              [&part] { part.answer = part.local_output.bytes(); });
}

void ShardRouter::Call::SendRemote(PartState& state) {
  Part& part = static_cast<Part&>(state);
  if (!BeginRemote(part)) return;
  Peer& peer = *router_.peers_[static_cast<size_t>(part.shard)];
  // `self` keeps the call, and so the part's context, request and answer, alive until gRPC has
  // called back.
  auto self = shared_from_this();
  if (nd_) {
    part.gather_nd.set_params_name(table().name);
    part.gather_nd.set_min_sequence(request_.min_sequence);
    SetIndices(part.values, {part.rows, depth_}, part.gather_nd.mutable_indices());
    peer.stub->async()->GatherNd(part.context.get(), &part.gather_nd, &part.gather_nd_answer,
                                 [self, this, &part](grpc::Status status) {
                                   absl::Status done = proto::FromGrpcStatus(status);
                                   if (done.ok())
                                     done = CheckAnswer(part, part.gather_nd_answer.output());
                                   PartDone(part, std::move(done));
                                 });
  } else {
    part.gather.set_params_name(table().name);
    part.gather.set_min_sequence(request_.min_sequence);
    SetIndices(part.values, {part.rows}, part.gather.mutable_indices());
    peer.stub->async()->Gather(part.context.get(), &part.gather, &part.gather_answer,
                               [self, this, &part](grpc::Status status) {
                                 absl::Status done = proto::FromGrpcStatus(status);
                                 if (done.ok())
                                   done = CheckAnswer(part, part.gather_answer.output());
                                 PartDone(part, std::move(done));
                               });
  }
}

absl::Status ShardRouter::Call::CheckAnswer(Part& part, const v1::Tensor& output) {
  // A peer's answer is checked to the byte: Finish copies rows out of it by count alone.
  const int64_t expected = part.rows * row_bytes_;
  if (proto::FromProtoDataType(output.dtype()) != dtype_ ||
      static_cast<int64_t>(output.data().size()) != expected) {
    return absl::InternalError(absl::StrCat("answered ", output.data().size(), " bytes of ",
                                            v1::DataType_Name(output.dtype()), "; expected ",
                                            expected, " of ", core::DataTypeName(dtype_)));
  }
  // A view into the response message the part owns: no copy.
  part.answer = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(output.data().data()),
                                          output.data().size());
  return absl::OkStatus();
}

void ShardRouter::Call::Finish() {
  if (!pooled_) {
    if (!request_.make_output) return Answer(absl::OkStatus());  // an empty output
    const core::MutableTensorView out = std::move(request_.make_output)();
    std::vector<size_t> next(static_cast<size_t>(spec().count), 0);
    std::vector<const Part*> by_shard(static_cast<size_t>(spec().count), nullptr);
    for (const Part& part : parts_) by_shard[static_cast<size_t>(part.shard)] = &part;
    const size_t row = static_cast<size_t>(row_bytes_);
    if (row == 0) return Answer(absl::OkStatus());  // rows of no bytes: nothing to copy
    // Row by row in the request's order; `next` is each shard's cursor into its part, whose rows
    // come in that same order (core::RowSplit).
    uint8_t* dst = out.data.data();
    for (int32_t shard : rows_.shard_of_row) {
      const Part& part = *by_shard[static_cast<size_t>(shard)];
      std::memcpy(dst, part.answer.data() + next[static_cast<size_t>(shard)]++ * row, row);
      dst += row;
    }
    return Answer(absl::OkStatus());
  }
  // A pooled lookup: the fetched rows shard by shard, then the zero padding row.
  PoolFetched(bags_, request_.indices.shape, [this](uint8_t* dst) {
    for (const Part& part : parts_) {
      if (!part.answer.empty()) std::memcpy(dst, part.answer.data(), part.answer.size());
      dst += part.answer.size();
    }
    if (bags_.padding_slot >= 0 && row_bytes_ > 0) {
      std::memset(dst, 0, static_cast<size_t>(row_bytes_));
    }
  });
}

absl::Status ShardRouter::Named(const core::ResidentTensor& table, int32_t shard,
                                const absl::Status& status) const {
  if (status.ok()) return status;
  // The caller's deadline and cancellation, a part too large for the shard's output cap, and
  // a shard that refuses the part as another shard's stay what they are; anything else (no
  // live replica, a replica without the table) is the shard being unavailable.
  absl::StatusCode code = status.code();
  if (code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kCancelled &&
      code != absl::StatusCode::kResourceExhausted &&
      code != absl::StatusCode::kFailedPrecondition) {
    code = absl::StatusCode::kUnavailable;
  }
  // The peer refusing this server's credentials is this server's configuration, not the
  // client's token: said so, as the client's own call was accepted here.
  const bool refused = status.code() == absl::StatusCode::kUnauthenticated ||
                       status.code() == absl::StatusCode::kPermissionDenied;
  return absl::Status(
      code, absl::StrCat("shard ", shard, " of ", table.shard->count, " of table '", table.name,
                         "' (", peers_[static_cast<size_t>(shard)]->target, "): ", status.message(),
                         refused ? " (the shard refused this server's sub-call: check its "
                                   "--shard_peer_token_file)"
                                 : ""));
}

std::unique_ptr<grpc::ClientContext> ShardRouter::SubCallContext(
    const ComputeRequest& request) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (request.deadline != absl::InfiniteFuture()) {
    context->set_deadline(absl::ToChronoTime(request.deadline));
  }
  context->AddMetadata(kHopMetadata, "1");
  // Per-call metadata, not call credentials: gRPC sends those only over TLS, and a token is
  // also what a plaintext peer behind a private network checks.
  if (options_.token != nullptr) {
    context->AddMetadata("authorization", options_.token->Authorization());
  }
  return context;
}

std::string ShardRouter::Unroutable(const core::ShardSpec& spec, const ComputeRequest& request,
                                    int32_t shard) const {
  if (request.from_router) {
    return absl::StrCat("this request is a router's sub-call: the router's --shard_peers entry ",
                        shard, " does not reach shard ", shard);
  }
  if (options_.peers.empty()) return "this server has no --shard_peers to route it to";
  if (static_cast<int64_t>(options_.peers.size()) != spec.count) {
    return absl::StrCat("--shard_peers lists ", options_.peers.size(), " targets for its ",
                        spec.count, " shards");
  }
  return "";
}

ShardRouter::ShardRouter(ComputeEntry* compute, Metrics* metrics, ShardRouterOptions options)
    : compute_(compute), metrics_(metrics), options_(std::move(options)) {
  for (const std::string& target : options_.peers) {
    auto peer = std::make_unique<Peer>();
    peer->target = target;
    peer->channel = MakePeerChannel(target, options_.channel);
    peer->stub = v1::TensorCompute::NewStub(peer->channel);
    peers_.push_back(std::move(peer));
  }
}

ShardRouter::~ShardRouter() = default;

void ShardRouter::Route(ComputeRequest request, ByteBudget::Reservation* reservation,
                        ComputeEntry::Done done) {
  if (request.table->shard->by_key) {
    return RouteByKey(std::move(request), reservation, std::move(done));
  }
  auto call = std::make_shared<Call>(this, std::move(request), std::move(done));
  Route(call);
  call->Start(reservation);
}

void ShardRouter::Route(std::shared_ptr<Routed> call) {
  // Registered before Start, so that a NoticeCancel during Start finds it. The map holds weak
  // pointers: it never keeps a call alive.
  absl::MutexLock lock(&mu_);
  calls_.emplace(call.get(), call);
}

void ShardRouter::NoticeCancel() {
  std::vector<std::shared_ptr<Routed>> calls;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [raw, weak] : calls_) {
      if (auto call = weak.lock()) calls.push_back(std::move(call));
    }
  }
  // Outside mu_: a cancelled sub-call may complete on this thread, and its answer takes mu_
  // (Forget).
  for (const auto& call : calls) call->NoticeCancel();
}

void ShardRouter::Forget(Routed* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

}  // namespace tensorcompute::server
