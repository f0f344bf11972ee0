// File: server/kserve/json.h
//
// KServe v2's HTTP/REST form (JSON, and Triton's binary tensor data extension) in terms of the
// protocol's protobuf messages: an HTTP infer request body becomes an
// inference::ModelInferRequest, and a ModelInferResponse becomes the HTTP response body. The
// protocol's meaning (models, inputs, parameters, datatypes, the plan and its errors) is
// codec.h's alone; this file only changes the form, and http_front_end.cc serves it.
//
// Request body: a JSON object {"id", "parameters", "inputs": [{"name", "shape", "datatype",
// "parameters", "data"}], "outputs": [{"name", "parameters"}]}. `data` is a flat or nested
// array of JSON booleans (BOOL), integers (INT*, UINT*, range-checked), numbers (FP16, BF16,
// FP32, FP64; rounded to nearest even) or strings (BYTES, their UTF-8 bytes). With the binary
// extension, the first `header_length` bytes of the body are the JSON, and an input with
// "parameters": {"binary_data_size": K} has no `data`: its bytes are the next K bytes after the
// JSON, inputs in order (BYTES as a 4-byte little-endian length before each element). Every
// input's data goes to raw_input_contents, so JSON and binary inputs can be mixed.
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

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

namespace tensorcompute::server::kserve {

// What an HTTP infer request asks beyond its ModelInferRequest.
struct HttpInferOptions {
  // Return the output as binary data: the output's "binary_data" parameter when it has one,
  // else the request's "binary_data_output" parameter; default false.
  bool binary_output = false;
  // The request's "timeout" parameter (microseconds), when it has a positive one.
  std::optional<int64_t> timeout_us;
};

// Parses an HTTP infer request `body` into `request` (model_name and model_version are left
// to the caller, who takes them from the URL). `header_length` is the request's
// Inference-Header-Content-Length header (nullopt without one): the JSON is then the body's
// first `header_length` bytes, and the rest is the inputs' binary data.
// Returns OK, or INVALID_ARGUMENT saying what is wrong: not JSON (with the parser's
// position), a field of the wrong JSON type, a data element that is not of the datatype or does
// not fit it, data whose element count differs from the shape's, binary data sizes that do not
// add up to what follows the JSON. Unknown datatypes get codec.h's ParseDatatype message.
absl::Status ParseHttpInferRequest(absl::string_view body, std::optional<int64_t> header_length,
                                   inference::ModelInferRequest* request,
                                   HttpInferOptions* options);

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

// {"error": "<message>"}.
std::string ErrorJson(absl::string_view message);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_H_
