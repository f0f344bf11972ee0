#include "server/gather_call.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/slice.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/slice.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/gather_plan.h"
#include "proto/tensor_codec.h"
#include "server/unary_call.h"

namespace tensorcompute::server {
namespace {

// The plan each request asks for.
absl::StatusOr<core::GatherPlan> PlanOf(const v1::GatherRequest& request,
                                        const core::TensorView& params,
                                        const core::TensorView& indices,
                                        const core::PlanOptions& options) {
  const std::optional<int64_t> axis =
      request.has_axis() ? std::optional<int64_t>(request.axis()) : std::nullopt;
  return core::PlanGather(params, indices, axis, request.batch_dims(), options);
}

absl::StatusOr<core::GatherPlan> PlanOf(const v1::GatherNdRequest& request,
                                        const core::TensorView& params,
                                        const core::TensorView& indices,
                                        const core::PlanOptions& options) {
  return core::PlanGatherNd(params, indices, request.batch_dims(), options);
}

template <typename Request, typename Response>
class GatherCall final : public UnaryCall {
 public:
  GatherCall(CallGate* gate, ComputeService* compute, grpc::CallbackServerContext* context, Rpc rpc)
      : UnaryCall(gate, compute, context, rpc) {}

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

  // Params (inline, or a resident tensor's), indices, the plan, and where the output goes.
  absl::Status Decode(ComputeRequest* out) {
    const ComputeService& compute = this->compute();
    absl::StatusOr<core::TensorView> params;
    if (!request_.params_name().empty()) {
      if (request_.has_params()) {
        return absl::InvalidArgumentError(
            "set either params (the tensor inline) or params_name (a resident tensor), not "
            "both");
      }
      if (compute.registry() != nullptr)
        out->table = compute.registry()->Find(request_.params_name());
      if (out->table == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("params_name: no resident tensor named '", request_.params_name(),
                         "' (ListTensors lists them; PutTensor stores one)"));
      }
      params = out->table->tensor.view();
    } else {
      params = proto::ViewTensor(request_.params(), "params");
    }
    if (!params.ok()) return params.status();
    absl::StatusOr<core::TensorView> indices = proto::ViewTensor(request_.indices(), "indices");
    if (!indices.ok()) return indices.status();
    absl::StatusOr<core::GatherPlan> plan =
        PlanOf(request_, *params, *indices, compute.plan_options());
    if (!plan.ok()) return plan.status();
    out->params = *std::move(params);
    out->indices = *std::move(indices);
    out->plan = *std::move(plan);
    // What make_output needs of the plan, kept here so that its closure holds only `this` and
    // fits AnyInvocable's inline storage (no allocation per call).
    output_dtype_ = out->plan.dtype;
    output_shape_ = out->plan.output_shape;
    output_elements_ = out->plan.output_elements;
    output_bytes_ = out->plan.output_bytes;
    if (output_dtype_ != core::DataType::kString && output_bytes_ > 0) {
      out->make_output = [this] { return OutputInPlace(); };
    } else {
      out->make_output = [this] {
        const int64_t data_bytes = output_dtype_ == core::DataType::kString ? 0 : output_bytes_;
        return proto::PrepareOutput(output_dtype_, output_shape_, output_elements_, data_bytes,
                                    response_.mutable_output());
      };
    }
    return absl::OkStatus();
  }

  // The whole reply in the buffer that gRPC will send: the response's serialized head, then the
  // output's bytes as the executor writes them (every byte is written when the gather is OK).
  core::MutableTensorView OutputInPlace() {
    const std::string head = proto::ResponsePrefix(output_dtype_, output_shape_, output_bytes_);
    // _large: never inlined into the grpc_slice struct, so the bytes stay where they are.
    grpc_slice slice = grpc_slice_malloc_large(head.size() + static_cast<size_t>(output_bytes_));
    uint8_t* begin = GRPC_SLICE_START_PTR(slice);
    std::memcpy(begin, head.data(), head.size());
    direct_reply_ = grpc::Slice(slice, grpc::Slice::STEAL_REF);
    core::MutableTensorView view;
    view.dtype = output_dtype_;
    view.shape = output_shape_;
    view.data = absl::Span<uint8_t>(begin + head.size(), static_cast<size_t>(output_bytes_));
    return view;
  }

  grpc::Status WriteReply(grpc::ByteBuffer* reply) override {
    if (direct_reply_.size() > 0) {
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

  Request request_;
  Response response_;
  grpc::Slice direct_reply_;  // the whole reply, the output written in place
  core::DataType output_dtype_ = core::DataType::kUnspecified;
  core::Shape output_shape_;
  int64_t output_elements_ = 0;
  int64_t output_bytes_ = 0;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGather(
    CallGate* gate, ComputeService* compute, grpc::CallbackServerContext* context) {
  auto* call =
      new GatherCall<v1::GatherRequest, v1::GatherResponse>(gate, compute, context, Rpc::kGather);
  call->Begin();
  return call;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGatherNd(
    CallGate* gate, ComputeService* compute, grpc::CallbackServerContext* context) {
  auto* call = new GatherCall<v1::GatherNdRequest, v1::GatherNdResponse>(gate, compute, context,
                                                                         Rpc::kGatherNd);
  call->Begin();
  return call;
}

}  // namespace tensorcompute::server
