#include "client/kserve_grpc_load_encoder.h"

#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

#include "proto/kserve_wire.h"

namespace tensorcompute::client {
namespace {

void AddInput(const char* name, absl::string_view datatype, const core::Shape& shape,
              inference::ModelInferRequest* r) {
  inference::ModelInferRequest::InferInputTensor* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(std::string(datatype));
  for (int64_t d : shape) input->add_shape(d);
}

}  // namespace

absl::Status CheckKserveLoadSpec(const LoadRequestSpec& spec) {
  if (!proto::KserveDatatypeName(spec.dtype).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has no KServe v2 datatype", core::DataTypeName(spec.dtype)));
  }
  return absl::OkStatus();
}

inference::ModelInferRequest KserveLoadHead(const LoadRequestSpec& spec,
                                            const core::Tensor* params) {
  const bool nd = spec.op == LoadOp::kGatherNd;
  inference::ModelInferRequest head;
  if (!spec.params_name.empty()) {
    head.set_model_name(spec.params_name);
    if (nd) (*head.mutable_parameters())["op"].set_string_param("gather_nd");
  } else {
    head.set_model_name(nd ? "gather_nd" : "gather");
    AddInput("params", *proto::KserveDatatypeName(spec.dtype), spec.params_shape, &head);
  }
  AddInput("indices", *proto::KserveDatatypeName(spec.index_dtype), LoadIndexShape(spec), &head);
  if (!nd) (*head.mutable_parameters())["axis"].set_int64_param(0);
  if (params != nullptr) head.add_raw_input_contents(KserveRawContents(*params));
  return head;
}

std::string KserveRawContents(const core::Tensor& t) {
  if (t.dtype() != core::DataType::kString) {
    return std::string(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size());
  }
  std::string out;
  for (const std::string& s : t.strings()) proto::AppendKserveBytesElement(s, &out);
  return out;
}

KserveGrpcLoadEncoder::KserveGrpcLoadEncoder(const LoadRequestSpec& spec,
                                             const core::Tensor* params)
    : head_(KserveLoadHead(spec, params).SerializeAsString()) {}

std::string KserveGrpcLoadEncoder::method() const {
  return "/inference.GRPCInferenceService/ModelInfer";
}

void KserveGrpcLoadEncoder::Add(const core::Tensor& indices, LoadRequests* out) const {
  inference::ModelInferRequest own;
  own.add_raw_input_contents(KserveRawContents(indices));
  // head_ is shared by reference (a slice copy copies no bytes); the indices' entry of the
  // repeated raw_input_contents lands after the params' when the two are parsed as one.
  grpc::Slice slices[2] = {head_, grpc::Slice(own.SerializeAsString())};
  out->bodies.emplace_back(slices, 2);
}

}  // namespace tensorcompute::client
