#include "server/native/compute_rpcs.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/slice.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/slice.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/live_rows.h"
#include "core/status_macros.h"
#include "proto/tensor_codec.h"
#include "server/compute/keyed_lookup.h"
#include "server/compute/shard_router.h"
#include "server/compute/table_plans.h"
#include "server/native/unary_reactor.h"

namespace tensorcompute::server {
namespace {

// Keys in place of indices (keyed tables, keyed_lookup.h): `keyed` prepared, and the plan's
// params and indices set to the table's keyed view and the keys' slots. OK and nothing done
// for a request without keys, which must then leave the keyed-only fields unset.
template <typename Request>
absl::Status DecodeKeys(const Request& request, const ComputeEntry& compute, bool pooled,
                        ComputeRequest* out, KeyedLookup* keyed, bool* by_keys) {
  *by_keys = request.has_keys();
  if (!*by_keys) {
    if (request.missing() != v1::MISSING_TABLE || request.return_found()) {
      return absl::InvalidArgumentError(
          "missing and return_found are for lookups by keys; the request sends indices");
    }
    return absl::OkStatus();
  }
  if (request.has_indices()) {
    return absl::InvalidArgumentError("set either indices or keys, not both");
  }
  TC_ASSIGN_OR_RETURN(const core::TensorView keys, proto::ViewTensor(request.keys(), "keys"));
  TC_RETURN_IF_ERROR(keyed->Prepare(out->table.get(), keys,
                                    static_cast<core::MissingKeys>(request.missing()), pooled,
                                    compute.plan_options().max_rank, compute.key_pool()));
  out->params = out->table->keyed_view();
  out->indices = keyed->slots();
  return absl::OkStatus();
}

// The views (params already in `out`) and the plan each request asks for.
absl::Status DecodeOp(const v1::GatherRequest& request, const ComputeEntry& compute,
                      ComputeRequest* out, KeyedLookup* keyed) {
  out->builtin = BuiltinModel::kGather;
  bool by_keys = false;
  TC_RETURN_IF_ERROR(DecodeKeys(request, compute, /*pooled=*/false, out, keyed, &by_keys));
  if (by_keys) {
    if ((request.has_axis() && request.axis() != 0) || request.batch_dims() != 0) {
      return absl::InvalidArgumentError(
          "a Gather by keys is along axis 0 without batch_dims (a key names a whole row)");
    }
    absl::StatusOr<batching::TaskPlan> plan =
        PlanGatherOn(out->table.get(), out->params, out->indices, 0, 0, compute.plan_options());
    if (!plan.ok()) return KeyedLookup::InKeysWords(plan.status());
    out->plan = *std::move(plan);
    return absl::OkStatus();
  }
  TC_ASSIGN_OR_RETURN(out->indices, proto::ViewTensor(request.indices(), "indices"));
  const std::optional<int64_t> axis =
      request.has_axis() ? std::optional<int64_t>(request.axis()) : std::nullopt;
  TC_ASSIGN_OR_RETURN(out->plan, PlanGatherOn(out->table.get(), out->params, out->indices, axis,
                                              request.batch_dims(), compute.plan_options()));
  return absl::OkStatus();
}

absl::Status DecodeOp(const v1::GatherNdRequest& request, const ComputeEntry& compute,
                      ComputeRequest* out, KeyedLookup* /*keyed*/) {
  out->builtin = BuiltinModel::kGatherNd;
  TC_ASSIGN_OR_RETURN(out->indices, proto::ViewTensor(request.indices(), "indices"));
  TC_ASSIGN_OR_RETURN(out->plan, PlanGatherNdOn(out->table.get(), out->params, out->indices,
                                                request.batch_dims(), compute.plan_options()));
  return absl::OkStatus();
}

absl::Status DecodeOp(const v1::EmbeddingBagRequest& request, const ComputeEntry& compute,
                      ComputeRequest* out, KeyedLookup* keyed) {
  out->builtin = BuiltinModel::kEmbeddingBag;
  bool by_keys = false;
  TC_RETURN_IF_ERROR(DecodeKeys(request, compute, /*pooled=*/true, out, keyed, &by_keys));
  if (by_keys && request.has_padding_idx()) {
    return absl::InvalidArgumentError(
        "padding_idx is for indices; with keys, missing=SKIP leaves out the keys a table lacks");
  }
  if (!by_keys) {
    TC_ASSIGN_OR_RETURN(out->indices, proto::ViewTensor(request.indices(), "indices"));
  }
  if (request.has_offsets()) {
    TC_ASSIGN_OR_RETURN(out->offsets, proto::ViewTensor(request.offsets(), "offsets"));
  }
  if (request.has_per_sample_weights()) {
    TC_ASSIGN_OR_RETURN(out->weights,
                        proto::ViewTensor(request.per_sample_weights(), "per_sample_weights"));
  }
  core::EmbeddingBagOptions options = compute.embedding_bag_options();
  // The wire's Mode numbers are core's (SUM 0 .. SQRTN 3); an unknown one, which proto3 lets
  // through, is INVALID_ARGUMENT from the planner.
  options.mode = static_cast<core::EmbeddingBagMode>(request.mode());
  options.include_last_offset = request.include_last_offset();
  if (request.has_padding_idx()) options.padding_idx = request.padding_idx();
  if (by_keys && keyed->policy() == core::MissingKeys::kSkip) {
    options.padding_idx = keyed->zero_slot();
  }
  absl::StatusOr<core::EmbeddingBagPlan> plan = PlanEmbeddingBagOn(
      out->table.get(), out->params, out->indices, request.has_offsets() ? &out->offsets : nullptr,
      request.has_per_sample_weights() ? &out->weights : nullptr, options);
  if (!plan.ok()) return by_keys ? KeyedLookup::InKeysWords(plan.status()) : plan.status();
  out->plan = *std::move(plan);
  return absl::OkStatus();
}

// Where a response's found mask goes: GatherNd has none.
v1::Tensor* FoundOf(v1::GatherResponse* response) { return response->mutable_found(); }
v1::Tensor* FoundOf(v1::EmbeddingBagResponse* response) { return response->mutable_found(); }
v1::Tensor* FoundOf(v1::GatherNdResponse* /*response*/) { return nullptr; }
bool ReturnFound(const v1::GatherRequest& request) { return request.return_found(); }
bool ReturnFound(const v1::EmbeddingBagRequest& request) { return request.return_found(); }
bool ReturnFound(const v1::GatherNdRequest& /*request*/) { return false; }

// What the output of a plan needs: its dtype, shape, element count and bytes.
struct OutputSpec {
  core::DataType dtype = core::DataType::kUnspecified;
  core::Shape shape;
  int64_t elements = 0;
  int64_t bytes = 0;
};

OutputSpec OutputOf(const batching::TaskPlan& plan) {
  if (const auto* bag = std::get_if<core::EmbeddingBagPlan>(&plan)) {
    return {bag->dtype, bag->output_shape, bag->bags * bag->dim, bag->output_bytes};
  }
  const auto& gather = std::get<core::GatherPlan>(plan);
  return {gather.dtype, gather.output_shape, gather.output_elements, gather.output_bytes};
}

template <typename Request, typename Response>
class ComputeCall final : public UnaryReactor {
 public:
  ComputeCall(CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context, Rpc rpc)
      : UnaryReactor(gate, compute, context, rpc) {}

 private:
  bool Parse(grpc::ByteBuffer* message) override {
    return grpc::SerializationTraits<Request>::Deserialize(message, &request_).ok();
  }

  const google::protobuf::Descriptor& RequestType() const override {
    return *Request::descriptor();
  }

  void Run() override {
    ComputeRequest request;
    if (absl::Status decoded = Decode(&request); !decoded.ok()) return Answer(decoded);
    Submit(std::move(request));
  }

  // Params (inline, or a resident tensor's), the other inputs, the plan, and where the output
  // goes.
  absl::Status Decode(ComputeRequest* out) {
    const ComputeEntry& compute = this->compute();
    if (!request_.params_name().empty()) {
      if (request_.has_params()) {
        return absl::InvalidArgumentError(
            "set either params (the tensor inline) or params_name (a resident tensor), not "
            "both");
      }
      // Held by the request from here on: a delete or replace meanwhile does not disturb it.
      if (compute.registry() != nullptr)
        out->table = compute.registry()->Find(request_.params_name());
      if (out->table == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("params_name: no resident tensor named '", request_.params_name(),
                         "' (ListTensors lists them; PutTensor stores one)"));
      }
      TC_RETURN_IF_ERROR(core::CheckMinSequence(*out->table, request_.min_sequence()));
      out->min_sequence = request_.min_sequence();
      out->params = out->table->plan_view();
      // Only a call on a resident table can be a router's sub-call: the router names its table.
      out->from_router = context().client_metadata().count(kHopMetadata) > 0;
    } else if (!request_.has_params()) {
      // Said in these words, not as the empty tensor's "dtype is unspecified", which sent
      // callers looking for a dtype they never meant to set.
      return absl::InvalidArgumentError(
          "set params (the tensor inline) or params_name (a resident tensor); the request has "
          "neither");
    } else {
      if (request_.min_sequence() != 0) {
        return absl::InvalidArgumentError(
            "min_sequence is for a resident table (params_name); the request sends params "
            "inline");
      }
      TC_ASSIGN_OR_RETURN(out->params, proto::ViewTensor(request_.params(), "params"));
    }
    if (KeyedRequest()) {
      // A lookup by keys holds, beside its keys, a slot (int64) for each, and a byte for each
      // when it asks for the found mask: charged before they are made.
      const int64_t keys = static_cast<int64_t>(KeysBytes() / sizeof(int64_t));
      TC_RETURN_IF_ERROR(ReserveMore(keys * (8 + (ReturnFound(request_) ? 1 : 0)),
                                     absl::StrCat("the slots of ", keys, " keys")));
    }
    TC_RETURN_IF_ERROR(DecodeOp(request_, compute, out, &keyed_));
    // What make_output needs of the plan, kept here so that its closure holds only `this` and
    // fits AnyInvocable's inline storage (no allocation per call).
    output_ = OutputOf(out->plan);
    bool found = false;
    if (KeyedRequest()) {
      found = ReturnFound(request_);
      uint8_t* mask = nullptr;
      if (found) {
        // DT_BOOL of the keys' shape, one byte a key, written by Resolve.
        v1::Tensor* tensor = FoundOf(&response_);
        tensor->set_dtype(v1::DT_BOOL);
        for (int64_t d : out->indices.shape) tensor->add_shape(d);
        tensor->mutable_data()->resize(out->indices.data.size() / sizeof(int64_t));
        mask = reinterpret_cast<uint8_t*>(tensor->mutable_data()->data());
      }
      out->resolve = [this, mask] { return keyed_.Resolve(mask); };
      out->keyed = &keyed_;
      out->found = mask;
    }
    // Strings cannot be written in place (each is its own protobuf field), and an empty output
    // has nothing to write; an answer with a found mask is serialized whole.
    if (output_.dtype != core::DataType::kString && output_.bytes > 0 && !found) {
      out->make_output = [this] { return OutputInPlace(); };
    } else {
      out->make_output = [this] {
        const int64_t data_bytes = output_.dtype == core::DataType::kString ? 0 : output_.bytes;
        return proto::PrepareOutput(output_.dtype, output_.shape, output_.elements, data_bytes,
                                    response_.mutable_output());
      };
    }
    return absl::OkStatus();
  }

  // The whole reply in the buffer that gRPC will send: the response's serialized head, then the
  // output's bytes as the executor writes them (every byte is written when the gather is OK).
  core::MutableTensorView OutputInPlace() {
    const std::string head = proto::ResponsePrefix(output_.dtype, output_.shape, output_.bytes);
    // _large: never inlined into the grpc_slice struct, so the bytes stay where they are.
    grpc_slice slice = grpc_slice_malloc_large(head.size() + static_cast<size_t>(output_.bytes));
    uint8_t* begin = GRPC_SLICE_START_PTR(slice);
    std::memcpy(begin, head.data(), head.size());
    direct_reply_ = grpc::Slice(slice, grpc::Slice::STEAL_REF);
    core::MutableTensorView view;
    view.dtype = output_.dtype;
    view.shape = output_.shape;
    view.data = absl::Span<uint8_t>(begin + head.size(), static_cast<size_t>(output_.bytes));
    return view;
  }

  grpc::Status WriteReply(grpc::ByteBuffer* reply) override {
    if (direct_reply_.size() > 0) {
      // The reply takes its own reference to the slice; dropping ours leaves it the bytes' only
      // holder.
      *reply = grpc::ByteBuffer(&direct_reply_, 1);
      direct_reply_ = grpc::Slice();
      return grpc::Status::OK;
    }
    // Serialized here rather than by gRPC, so that the output is freed at once: until the
    // client has taken the answer, the server holds one copy of it (the one the budget
    // counts), not two.
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<Response>::Serialize(response_, reply, &own_buffer);
    response_ = Response();
    return serialized;
  }

  // The bytes of the request's keys, as sent (checked against their shape when decoded).
  size_t KeysBytes() const {
    if constexpr (std::is_same_v<Request, v1::GatherNdRequest>) {
      return 0;
    } else {
      return request_.keys().data().size();
    }
  }

  // Whether the request looks its table up by keys.
  bool KeyedRequest() const {
    if constexpr (std::is_same_v<Request, v1::GatherNdRequest>) {
      return false;
    } else {
      return request_.has_keys();
    }
  }

  Request request_;
  Response response_;
  KeyedLookup keyed_;         // a lookup by keys
  grpc::Slice direct_reply_;  // the whole reply, the output written in place
  OutputSpec output_;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGather(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context) {
  // Begin may already answer (a refusal) before the reactor is returned: gRPC holds a
  // reactor's operations until the reactor is bound to its call.
  auto* call =
      new ComputeCall<v1::GatherRequest, v1::GatherResponse>(gate, compute, context, Rpc::kGather);
  call->Begin();
  return call;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGatherNd(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context) {
  auto* call = new ComputeCall<v1::GatherNdRequest, v1::GatherNdResponse>(gate, compute, context,
                                                                          Rpc::kGatherNd);
  call->Begin();
  return call;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartEmbeddingBag(
    CallGate* gate, ComputeEntry* compute, grpc::CallbackServerContext* context) {
  auto* call = new ComputeCall<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(
      gate, compute, context, Rpc::kEmbeddingBag);
  call->Begin();
  return call;
}

}  // namespace tensorcompute::server
