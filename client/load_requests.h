// File: client/load_requests.h
//
// The requests of `tensorcompute load` (client/load_tester.h sends them): made once, up front,
// serialized, so the client spends nothing per call on them.
//
//   BuildLoadRequests(spec)  makes `distinct_requests` requests (random valid indices; an
//                            `invalid_fraction` share with one index out of range). The params
//                            are random, or a resident tensor's name (params_name). An
//                            EmbeddingBag request is num_indices lookups in fixed bags:
//                            indices [num_indices / bag_size, bag_size], mode SUM, no weights.
//
// It checks the spec, draws the params and each request's indices, and hands them to the
// encoder of the spec's protocol (LoadRequestEncoder, below), one file each:
//   native_load_encoder.h       tensorcompute.v1 Gather, GatherNd or EmbeddingBag over gRPC
//   kserve_grpc_load_encoder.h  KServe v2 ModelInfer over gRPC
//   kserve_http_load_encoder.h  KServe v2 over HTTP/REST with the binary-data extension
// The draws depend on the spec and its seed only, never on the protocol: the same spec sent
// natively, over KServe gRPC or over HTTP carries the same params and indices.
// Thread-safety: BuildLoadRequests is a pure function of its spec; the result is immutable
// once built and may be shared by any number of load runs.

#ifndef TENSORCOMPUTE_CLIENT_LOAD_REQUESTS_H_
#define TENSORCOMPUTE_CLIENT_LOAD_REQUESTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::client {

// The call each request makes.
enum class LoadOp { kGather, kGatherNd, kEmbeddingBag };

// What each request looks like.
struct LoadRequestSpec {
  LoadOp op = LoadOp::kGather;
  // EmbeddingBag: float16, bfloat16, float32 or float64 (the params get finite values in
  // [-1, 1), never NaN or subnormals, which some CPUs add slowly).
  core::DataType dtype = core::DataType::kFloat32;
  // Gather picks rows along axis 0 of params (a slice = the trailing dimensions); GatherNd
  // uses index tuples of `index_depth` components (a slice = the dimensions after them);
  // EmbeddingBag needs rank 2, [rows, dim], and answers one row of dim per bag.
  core::Shape params_shape = {1024, 64};
  int64_t num_indices = 16;  // rows (index tuples, lookups) per request
  int64_t index_depth = 1;   // GatherNd only; 1..rank(params)
  // EmbeddingBag only: lookups per bag, >= 1; num_indices must be a multiple of it.
  int64_t bag_size = 8;
  core::DataType index_dtype = core::DataType::kInt32;
  // Share of requests (0..1) that carry one out-of-range index (INVALID_ARGUMENT expected).
  double invalid_fraction = 0;
  int64_t distinct_requests = 16;
  uint64_t seed = 1;
  // Non-empty: gather from this resident tensor (GatherRequest.params_name; the same field of
  // the other requests) instead of sending params; only the indices travel. dtype and params_shape
  // must then describe that tensor (Client::ListTensors tells them): the indices are drawn from its
  // dimensions.
  std::string params_name;
  // Send KServe v2 ModelInfer calls (inference.GRPCInferenceService, docs/kserve.md) instead of
  // the native ones: model "gather" or "gather_nd" with params and indices in
  // raw_input_contents, or the resident tensor's model (params_name) with indices only.
  // Gather and GatherNd only: EmbeddingBag has no KServe form yet (INVALID_ARGUMENT).
  bool kserve = false;
  // With kserve: the HTTP/REST form instead of gRPC (POST /v2/models/NAME/infer on the
  // server's --http_listen port), with the binary-data extension as tritonclient.http sends
  // large tensors: a JSON header, then the inputs' raw bytes; the output is asked for as
  // binary too. RunHttpLoad sends them.
  bool http = false;
};

struct LoadRequests {
  // "/tensorcompute.v1.TensorCompute/Gather", ...GatherNd, ...EmbeddingBag or KServe's
  // ModelInfer.
  std::string method;
  std::vector<grpc::ByteBuffer> bodies;  // serialized requests, used in turn (gRPC)
  std::vector<bool> valid;               // per body: expected to succeed
  int64_t request_bytes = 0;             // mean serialized size
  // HTTP (spec.http): the path, and per request its body and the JSON header's length (the
  // Inference-Header-Content-Length header); `bodies` is then empty.
  std::string http_path;
  std::vector<std::string> http_bodies;
  std::vector<int64_t> http_header_bytes;
};

// Returns the requests, or INVALID_ARGUMENT for an impossible spec (string dtype with no
// bytes, index_depth out of range, a zero-size axis to index; for EmbeddingBag, params not a
// float [rows, dim], a bag_size below 1 or not dividing num_indices, or kserve; http without
// kserve; kserve with a dtype KServe v2 cannot name).
absl::StatusOr<LoadRequests> BuildLoadRequests(const LoadRequestSpec& spec);

// --- For the encoders (native_, kserve_grpc_, kserve_http_load_encoder.h) -----------------

// Returns the shape of each request's indices: [num_indices] for Gather, [num_indices,
// index_depth] for GatherNd, [num_indices / bag_size, bag_size] for EmbeddingBag.
// REQUIRES: spec passed BuildLoadRequests' checks (bag_size >= 1 for EmbeddingBag).
core::Shape LoadIndexShape(const LoadRequestSpec& spec);

// One protocol's form of the requests. An encoder is built once per BuildLoadRequests call,
// from a spec that passed its checks and the params drawn for it, and does everything but the
// indices then; each Add then costs only one request's indices.
//
// The gRPC encoders rely on a protobuf rule: a message's serialization is the concatenation
// of its fields', in any order. So the part every request shares (the params or their name,
// the model, the inputs' descriptions) is serialized once into one reference-counted slice,
// and each body is that slice followed by a second one that holds only the request's own
// indices.
//
// Thread-safety: Add is const and the encoder keeps no state between calls.
class LoadRequestEncoder {
 public:
  virtual ~LoadRequestEncoder() = default;

  // Returns LoadRequests::method: the gRPC method's full name, or "POST <http_path()>".
  virtual std::string method() const = 0;
  // Returns LoadRequests::http_path: the path of every HTTP request; empty over gRPC.
  virtual std::string http_path() const { return ""; }
  // Appends the request whose indices are `indices` to `out`: its body to out->bodies (gRPC),
  // or to out->http_bodies with its JSON header's length in out->http_header_bytes (HTTP).
  // REQUIRES: indices has spec.index_dtype and LoadIndexShape(spec); out != nullptr.
  virtual void Add(const core::Tensor& indices, LoadRequests* out) const = 0;
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_LOAD_REQUESTS_H_
