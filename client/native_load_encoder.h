// File: client/native_load_encoder.h
//
// The load tester's requests in tensorcompute.v1's own form (proto/tensorcompute/v1/
// tensorcompute.proto), sent through gRPC's generic stub:
//   Gather        GatherRequest     params (or params_name), indices [n], axis 0
//   GatherNd      GatherNdRequest   params (or params_name), indices [n, index_depth]
//   EmbeddingBag  EmbeddingBagRequest  params (or params_name), indices [bags, bag_size]:
//                 fixed bags, so no offsets, no weights, mode SUM (the default, 0)
// Each body is two slices: the params (a GatherRequest holding field 1, which is `params` in
// all three requests) or the name, shared by every body, then the request's own indices.
// Thread-safety: see LoadRequestEncoder (client/load_requests.h).

#ifndef TENSORCOMPUTE_CLIENT_NATIVE_LOAD_ENCODER_H_
#define TENSORCOMPUTE_CLIENT_NATIVE_LOAD_ENCODER_H_

#include <string>

#include "grpcpp/support/slice.h"

#include "client/load_requests.h"
#include "core/tensor.h"

namespace tensorcompute::client {

class NativeLoadEncoder final : public LoadRequestEncoder {
 public:
  // `params`: the params every request carries, or nullptr to name spec.params_name instead.
  // REQUIRES: spec passed BuildLoadRequests' checks; params != nullptr exactly when
  // spec.params_name is empty, and then it has spec.dtype and spec.params_shape.
  NativeLoadEncoder(const LoadRequestSpec& spec, const core::Tensor* params);

  // "/tensorcompute.v1.TensorCompute/Gather", ".../GatherNd" or ".../EmbeddingBag".
  std::string method() const override;
  void Add(const core::Tensor& indices, LoadRequests* out) const override;

 private:
  const LoadOp op_;
  const grpc::Slice shared_;  // the params, or their name, serialized
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_NATIVE_LOAD_ENCODER_H_
