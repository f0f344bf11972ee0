// File: client/kserve_http_load_encoder.h
//
// The load tester's requests in KServe v2's HTTP/REST form: POST /v2/models/MODEL/infer with
// the binary-data extension, as tritonclient.http sends large tensors. Each body is a JSON
// header, then the inputs' raw bytes in input order; the header's length goes in the
// Inference-Header-Content-Length header (LoadRequests::http_header_bytes). The request is
// the gRPC encoder's (kserve_grpc_load_encoder.h: model, inputs, parameters, raw contents),
// written as JSON:
//   {"inputs": [{"name", "datatype", "shape", "parameters": {"binary_data_size": BYTES}}, ...],
//    "parameters": {"binary_data_output": true, and the request's axis or op}}
// so that the output comes back as binary too.
// Thread-safety: see LoadRequestEncoder (client/load_requests.h).

#ifndef TENSORCOMPUTE_CLIENT_KSERVE_HTTP_LOAD_ENCODER_H_
#define TENSORCOMPUTE_CLIENT_KSERVE_HTTP_LOAD_ENCODER_H_

#include <string>

#include "client/load_requests.h"
#include "core/tensor.h"

namespace tensorcompute::client {

class KserveHttpLoadEncoder final : public LoadRequestEncoder {
 public:
  // REQUIRES: as KserveLoadHead's (kserve_grpc_load_encoder.h).
  KserveHttpLoadEncoder(const LoadRequestSpec& spec, const core::Tensor* params);

  // "POST /v2/models/MODEL/infer".
  std::string method() const override;
  // "/v2/models/MODEL/infer": MODEL is "gather", "gather_nd" or spec.params_name.
  std::string http_path() const override;
  void Add(const core::Tensor& indices, LoadRequests* out) const override;

 private:
  std::string header_;  // the JSON header
  std::string params_;  // the params' raw bytes (empty for a resident tensor)
  std::string path_;
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_KSERVE_HTTP_LOAD_ENCODER_H_
