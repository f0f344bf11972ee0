// File: server/kserve/json.h
//
// KServe v2's HTTP/REST form (JSON, and Triton's binary tensor data extension) in terms of the
// protocol's protobuf messages: a ModelInferResponse becomes the HTTP response body, and the
// server's and models' metadata, configuration and statistics become JSON. An HTTP infer
// request body becomes an inference::ModelInferRequest in json_request.h. The protocol's meaning
// (models, inputs, parameters, datatypes, the plan and its errors) is codec.h's alone; this file
// only changes the form, and http_front_end.cc serves it.
//
// Response body: {"model_name", "model_version", "id" (when the request had one), "outputs":
// [{"name", "datatype", "shape", "data"}]}; with binary output, the output has "parameters":
// {"binary_data_size": K} instead of `data`, and its bytes follow the JSON. JSON has no NaN or
// infinity: such floats are written as null (ask for binary output to get them).
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

namespace tensorcompute::server::kserve {

// An HTTP response body and, for binary output, the length of its JSON part (the
// Inference-Header-Content-Length response header).
struct HttpBody {
  std::string body;
  std::optional<int64_t> header_length;
  // With binary output and append_binary false: the outputs' bytes, in order, still in the
  // response (they follow `body` on the wire; the caller sends them from there).
  std::vector<absl::string_view> binary;
};

// The HTTP form of `response` (as kserve::CompleteInferResponse leaves it: every output's bytes
// in raw_output_contents). With `binary_output`, outputs are binary data after the JSON: appended
// to `body`, or with `append_binary` false only viewed in HttpBody::binary (no copy).
HttpBody WriteHttpInferResponse(const inference::ModelInferResponse& response, bool binary_output,
                                bool append_binary = true);

// JSON of the server's and of a model's metadata (KServe v2 REST shapes).
std::string ServerMetadataJson(const inference::ServerMetadataResponse& metadata);
std::string ModelMetadataJson(const inference::ModelMetadataResponse& metadata);

// Triton's JSON of a model's configuration (GET .../config: the ModelConfig message's fields by
// their proto names, enums by name) and of models' statistics (GET .../stats: numbers, not
// strings, for the 64-bit counters, as Triton writes them).
std::string ModelConfigJson(const inference::ModelConfig& config);
std::string ModelStatisticsJson(const inference::ModelStatisticsResponse& response);

// {"error": "<message>"}.
std::string ErrorJson(absl::string_view message);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_H_
