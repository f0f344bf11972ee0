#include "client/native_load_encoder.h"

#include <string>

#include "tensorcompute/v1/tensorcompute.pb.h"

#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// The serialized `Request` that holds only the name of a resident tensor (field 5 of
// GatherRequest, 4 of GatherNdRequest, 2 of EmbeddingBagRequest).
template <typename Request>
std::string NameOnly(const std::string& name) {
  Request request;
  request.set_params_name(name);
  return request.SerializeAsString();
}

std::string SharedPart(const LoadRequestSpec& spec, const core::Tensor* params) {
  if (params != nullptr) {
    v1::GatherRequest params_only;  // field 1 in all three requests
    proto::ToProto(params->view(), params_only.mutable_params());
    return params_only.SerializeAsString();
  }
  switch (spec.op) {
    case LoadOp::kGatherNd:
      return NameOnly<v1::GatherNdRequest>(spec.params_name);
    case LoadOp::kEmbeddingBag:
      return NameOnly<v1::EmbeddingBagRequest>(spec.params_name);
    case LoadOp::kGather:
      break;
  }
  return NameOnly<v1::GatherRequest>(spec.params_name);
}

}  // namespace

NativeLoadEncoder::NativeLoadEncoder(const LoadRequestSpec& spec, const core::Tensor* params)
    : op_(spec.op), shared_(SharedPart(spec, params)) {}

std::string NativeLoadEncoder::method() const {
  switch (op_) {
    case LoadOp::kGatherNd:
      return "/tensorcompute.v1.TensorCompute/GatherNd";
    case LoadOp::kEmbeddingBag:
      return "/tensorcompute.v1.TensorCompute/EmbeddingBag";
    case LoadOp::kGather:
      break;
  }
  return "/tensorcompute.v1.TensorCompute/Gather";
}

void NativeLoadEncoder::Add(const core::Tensor& indices, LoadRequests* out) const {
  std::string own;
  switch (op_) {
    case LoadOp::kGatherNd: {
      v1::GatherNdRequest r;
      proto::ToProto(indices.view(), r.mutable_indices());
      own = r.SerializeAsString();
      break;
    }
    case LoadOp::kEmbeddingBag: {
      v1::EmbeddingBagRequest r;
      proto::ToProto(indices.view(), r.mutable_indices());
      own = r.SerializeAsString();
      break;
    }
    case LoadOp::kGather: {
      v1::GatherRequest r;
      proto::ToProto(indices.view(), r.mutable_indices());
      r.set_axis(0);
      own = r.SerializeAsString();
      break;
    }
  }
  // Copying shared_ takes a reference, not its bytes: every body shares the one serialized
  // params. The two slices parse as one request: protobuf merges concatenated messages.
  grpc::Slice slices[2] = {shared_, grpc::Slice(own)};
  out->bodies.emplace_back(slices, 2);
}

}  // namespace tensorcompute::client
