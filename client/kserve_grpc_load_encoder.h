// File: client/kserve_grpc_load_encoder.h
//
// The load tester's requests as KServe v2 ModelInfer calls (inference.GRPCInferenceService,
// docs/kserve.md); Gather and GatherNd only (BuildLoadRequests refuses EmbeddingBag):
//   inline params  model "gather" or "gather_nd", inputs "params" then "indices", their bytes
//                  in raw_input_contents in that order
//   params_name    model = the resident tensor's name, input "indices" only, and for GatherNd
//                  the parameter op = "gather_nd"
// A Gather request also carries the parameter axis = 0 (int64). Datatypes are v2 names and
// strings travel in BYTES framing (proto/kserve_wire.h).
// Each body is two slices: everything but the indices' bytes (KserveLoadHead, serialized),
// shared by every body, then a ModelInferRequest with only the indices' raw_input_contents
// entry, which a parser appends after the params' entry.
// The HTTP encoder (kserve_http_load_encoder.h) sends the same request as JSON, built from
// KserveLoadHead and KserveRawContents.
// Thread-safety: see LoadRequestEncoder (client/load_requests.h); the functions are pure.

#ifndef TENSORCOMPUTE_CLIENT_KSERVE_GRPC_LOAD_ENCODER_H_
#define TENSORCOMPUTE_CLIENT_KSERVE_GRPC_LOAD_ENCODER_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/slice.h"
#include "inference/grpc_predict_v2.pb.h"

#include "client/load_requests.h"
#include "core/tensor.h"

namespace tensorcompute::client {

// Returns OK, or INVALID_ARGUMENT when spec.dtype has no v2 datatype (complex, unspecified).
// BuildLoadRequests calls it before it draws the params.
absl::Status CheckKserveLoadSpec(const LoadRequestSpec& spec);

// Returns the ModelInferRequest of the table above without the indices' bytes: model, inputs,
// parameters, and the params' raw contents when `params` is given.
// REQUIRES: spec passed BuildLoadRequests' checks (CheckKserveLoadSpec included); params !=
// nullptr exactly when spec.params_name is empty.
inference::ModelInferRequest KserveLoadHead(const LoadRequestSpec& spec,
                                            const core::Tensor* params);

// Returns a tensor's raw_input_contents entry: its bytes, or for strings each element in
// BYTES framing.
std::string KserveRawContents(const core::Tensor& t);

class KserveGrpcLoadEncoder final : public LoadRequestEncoder {
 public:
  // REQUIRES: as KserveLoadHead's.
  KserveGrpcLoadEncoder(const LoadRequestSpec& spec, const core::Tensor* params);

  // "/inference.GRPCInferenceService/ModelInfer".
  std::string method() const override;
  void Add(const core::Tensor& indices, LoadRequests* out) const override;

 private:
  const grpc::Slice head_;  // KserveLoadHead, serialized
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_KSERVE_GRPC_LOAD_ENCODER_H_
