// File: server/kserve/json_request.h
//
// An HTTP infer request body (KServe v2's HTTP/REST form, JSON and Triton's binary tensor data
// extension) decoded into an inference::ModelInferRequest, as a stream: no document is built.
// json.h has the other direction (the response body) and codec.h the protocol's meaning.
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
// Implemented by json_request.cc on a private SAX handler (json_request_parser.h: the events;
// json_request_rules.cc: what each field is), tested against the document decoder it replaced,
// tests/server/kserve_json_reference.cc.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_

#include <cstdint>
#include <optional>

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

// How deep a request's JSON may nest: the request object is level 1, "inputs" 2, an input 3,
// its "parameters" or "data" 4, so data arrays may nest 61 deep (a tensor of rank 61 written
// as nested arrays; the server's default --max_rank is 32, and flat data suits any rank).
// Deeper is INVALID_ARGUMENT "the request: JSON nests deeper than 64 levels", refused when the
// 65th level opens: the parser never holds more than this many levels of state.
inline constexpr int kMaxJsonDepth = 64;

// The most entries of every list a request keeps other than `data`: inputs, outputs, an input's
// shape (dimensions) and the request's parameters. More is
// INVALID_ARGUMENT, e.g. "the request: more than 64 inputs" or "input 'x': 'shape' has more
// than 64 dimensions" (the parameters of an input or an output are not kept, and not counted). Each
// entry decodes to more memory than its text (a protobuf message, a map node): bounding them keeps
// a request's decoded cost within a small multiple of the tensors it carries.
inline constexpr int kMaxJsonListLength = 64;

// Parses an HTTP infer request `body` into `request` (model_name and model_version are left
// to the caller, who takes them from the URL). `header_length` is the request's
// Inference-Header-Content-Length header (nullopt without one): the JSON is then the body's
// first `header_length` bytes, and the rest is the inputs' binary data.
// Returns OK, or INVALID_ARGUMENT saying what is wrong: not JSON (with the parser's
// position), a field of the wrong JSON type, a data element that is not of the datatype or does
// not fit it, data whose element count differs from the shape's, binary data sizes that do not
// add up to what follows the JSON, nesting deeper than kMaxJsonDepth, lists longer than
// kMaxJsonListLength. Unknown datatypes get codec.h's ParseDatatype message.
//
// No document is built: the JSON is parsed as a stream of events (nlohmann-json's SAX
// interface) and each input's `data` is converted element by element into its
// raw_input_contents. Beyond the request itself, the decode holds the parser's state (a bit per
// open level, and the current token twice: a long string costs twice its length while read)
// and nothing else: a tensor's bytes are reserved once from its shape (bounded by what the text
// can hold). Fields may come in any order: `data` before "datatype" or "shape" is parsed a second
// time from the body once both are known (no copy of it is kept in between). Every request gets
// the status the document-building decoder before it gave (tests/server/kserve_json_reference.cc;
// the same checks, in the same order, once the whole text has parsed; a key given twice counts its
// last value), but for the bounds above, refused as soon as they are passed, and for an object or
// array longer than 4 KiB quoted in a message, which is quoted as written rather than
// re-serialised.
absl::Status ParseHttpInferRequest(absl::string_view body, std::optional<int64_t> header_length,
                                   inference::ModelInferRequest* request,
                                   HttpInferOptions* options);

// As above, and sets `*held_bytes` (on success and on failure alike) to an upper bound of the
// memory the decode held at once beyond `body`, for the caller to charge to its in-flight byte
// budget: the request it built (request->SpaceUsedLong(): the inputs' decoded bytes, names,
// parameters) and the parser's token buffers (four times the longest string or number token,
// eight times when some `data` was parsed a second time), plus a few KiB of parser state.
// REQUIRES: held_bytes != nullptr.
absl::Status ParseHttpInferRequest(absl::string_view body, std::optional<int64_t> header_length,
                                   inference::ModelInferRequest* request, HttpInferOptions* options,
                                   int64_t* held_bytes);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_
