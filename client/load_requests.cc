#include "client/load_requests.h"

#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "client/kserve_grpc_load_encoder.h"
#include "client/kserve_http_load_encoder.h"
#include "client/native_load_encoder.h"
#include "core/half_float.h"
#include "core/status_macros.h"

namespace tensorcompute::client {
namespace {

// The checks that only EmbeddingBag requests need.
absl::Status CheckEmbeddingBagSpec(const LoadRequestSpec& spec) {
  if (spec.kserve) {
    return absl::InvalidArgumentError(
        "EmbeddingBag load speaks the native protocol only: KServe v2 has no embedding_bag "
        "form here yet");
  }
  if (spec.params_shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EmbeddingBag params must be [rows, dim], got shape %s",
                        core::ShapeToString(spec.params_shape)));
  }
  if (spec.dtype != core::DataType::kFloat16 && spec.dtype != core::DataType::kBfloat16 &&
      spec.dtype != core::DataType::kFloat32 && spec.dtype != core::DataType::kFloat64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EmbeddingBag params must be float16, bfloat16, float32 or float64, got %s",
                        core::DataTypeName(spec.dtype)));
  }
  if (spec.bag_size < 1 || spec.num_indices % spec.bag_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EmbeddingBag: %d lookups per request do not make whole bags of %d: "
                        "expected a bag size >= 1 that divides them",
                        spec.num_indices, spec.bag_size));
  }
  return absl::OkStatus();
}

// Every check of BuildLoadRequests' contract: the shape to index, the counts, the index
// dtype, then the op's and the protocol's own. The first that fails is the answer.
absl::Status CheckSpec(const LoadRequestSpec& spec) {
  const core::Shape& shape = spec.params_shape;
  const int64_t depth = spec.op == LoadOp::kGatherNd ? spec.index_depth : 1;
  if (shape.empty()) return absl::InvalidArgumentError("params shape must have rank >= 1");
  if (depth < 1 || depth > static_cast<int64_t>(shape.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "index depth %d is not in [1, %d] (the rank of params)", depth, shape.size()));
  }
  for (int64_t d = 0; d < depth; ++d) {
    if (shape[d] <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "params dimension %d is %d: nothing to index; expected > 0", d, shape[d]));
    }
  }
  if (spec.num_indices < 0 || spec.distinct_requests < 1) {
    return absl::InvalidArgumentError("expected num_indices >= 0 and distinct_requests >= 1");
  }
  if (spec.invalid_fraction < 0 || spec.invalid_fraction > 1) {
    return absl::InvalidArgumentError("invalid_fraction must be in [0, 1]");
  }
  if (spec.index_dtype != core::DataType::kInt32 && spec.index_dtype != core::DataType::kInt64) {
    return absl::InvalidArgumentError("index dtype must be int32 or int64");
  }
  if (spec.op == LoadOp::kEmbeddingBag) TC_RETURN_IF_ERROR(CheckEmbeddingBagSpec(spec));
  if (spec.http && !spec.kserve) {
    return absl::InvalidArgumentError("HTTP load speaks KServe v2 only: set kserve too");
  }
  if (spec.kserve) TC_RETURN_IF_ERROR(CheckKserveLoadSpec(spec));
  return absl::OkStatus();
}

// Random params of `spec`: bytes for numeric types (bools 0/1), short strings for strings;
// for EmbeddingBag, which adds them up, finite values in [-1, 1).
absl::StatusOr<core::Tensor> RandomParams(const LoadRequestSpec& spec, std::mt19937_64& rng) {
  TC_ASSIGN_OR_RETURN(core::Tensor params, core::Tensor::Allocate(spec.dtype, spec.params_shape));
  if (spec.op == LoadOp::kEmbeddingBag) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    uint8_t* out = params.mutable_bytes().data();
    for (int64_t i = 0; i < params.num_elements(); ++i) {
      const float v = uniform(rng);
      switch (spec.dtype) {
        case core::DataType::kFloat16:
          reinterpret_cast<uint16_t*>(out)[i] = core::FloatToHalf(v);
          break;
        case core::DataType::kBfloat16:
          reinterpret_cast<uint16_t*>(out)[i] = core::FloatToBFloat16(v);
          break;
        case core::DataType::kFloat64:
          reinterpret_cast<double*>(out)[i] = v;
          break;
        default:  // kFloat32 (CheckEmbeddingBagSpec admits no other dtype)
          reinterpret_cast<float*>(out)[i] = v;
      }
    }
    return params;
  }
  if (spec.dtype == core::DataType::kString) {
    std::vector<std::string> strings(params.num_elements());
    for (auto& s : strings) s = absl::StrFormat("s%016x", rng());
    return core::Tensor::FromStrings(spec.params_shape, std::move(strings));
  }
  for (uint8_t& b : params.mutable_bytes()) {
    b = spec.dtype == core::DataType::kBool ? rng() & 1 : static_cast<uint8_t>(rng());
  }
  return params;
}

// Random indices of one request, each in range of the dimension it indexes; with `invalid`,
// one of them (at a random position) is beyond any dimension instead.
absl::StatusOr<core::Tensor> RandomIndices(const LoadRequestSpec& spec, bool invalid,
                                           std::mt19937_64& rng) {
  const int64_t depth = spec.op == LoadOp::kGatherNd ? spec.index_depth : 1;
  std::vector<int64_t> values(spec.num_indices * depth);
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    values[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(spec.params_shape[i % depth]));
  }
  // INT32_MAX: beyond any dimension here, and representable in either index dtype.
  if (invalid) values[rng() % values.size()] = INT32_MAX;
  TC_ASSIGN_OR_RETURN(core::Tensor indices,
                      core::Tensor::Allocate(spec.index_dtype, LoadIndexShape(spec)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (spec.index_dtype == core::DataType::kInt32) {
      reinterpret_cast<int32_t*>(indices.mutable_bytes().data())[i] =
          static_cast<int32_t>(values[i]);
    } else {
      reinterpret_cast<int64_t*>(indices.mutable_bytes().data())[i] = values[i];
    }
  }
  return indices;
}

std::unique_ptr<LoadRequestEncoder> EncoderFor(const LoadRequestSpec& spec,
                                               const core::Tensor* params) {
  if (spec.http) return std::make_unique<KserveHttpLoadEncoder>(spec, params);
  if (spec.kserve) return std::make_unique<KserveGrpcLoadEncoder>(spec, params);
  return std::make_unique<NativeLoadEncoder>(spec, params);
}

}  // namespace

core::Shape LoadIndexShape(const LoadRequestSpec& spec) {
  switch (spec.op) {
    case LoadOp::kGatherNd:
      return {spec.num_indices, spec.index_depth};
    case LoadOp::kEmbeddingBag:
      return {spec.num_indices / spec.bag_size, spec.bag_size};
    case LoadOp::kGather:
      break;
  }
  return {spec.num_indices};
}

absl::StatusOr<LoadRequests> BuildLoadRequests(const LoadRequestSpec& spec) {
  TC_RETURN_IF_ERROR(CheckSpec(spec));
  // One generator for the whole set, drawn in a fixed order (params, then each request's
  // indices) whatever the protocol.
  std::mt19937_64 rng(spec.seed);
  std::optional<core::Tensor> params;
  if (spec.params_name.empty()) {
    TC_ASSIGN_OR_RETURN(params, RandomParams(spec, rng));
  }
  const std::unique_ptr<LoadRequestEncoder> encoder =
      EncoderFor(spec, params.has_value() ? &*params : nullptr);

  LoadRequests out;
  out.method = encoder->method();
  out.http_path = encoder->http_path();
  int64_t total_bytes = 0;
  for (int64_t k = 0; k < spec.distinct_requests; ++k) {
    // Request k is invalid when the running share of invalid ones steps up at k: the first n
    // requests hold floor(n * invalid_fraction) invalid ones, evenly spread, not drawn at
    // random. A request without indices has none to make invalid.
    const bool invalid = spec.num_indices > 0 && std::floor((k + 1) * spec.invalid_fraction) >
                                                     std::floor(k * spec.invalid_fraction);
    TC_ASSIGN_OR_RETURN(core::Tensor indices, RandomIndices(spec, invalid, rng));
    encoder->Add(indices, &out);
    out.valid.push_back(!invalid);
    total_bytes += spec.http ? static_cast<int64_t>(out.http_bodies.back().size())
                             : static_cast<int64_t>(out.bodies.back().Length());
  }
  out.request_bytes = total_bytes / spec.distinct_requests;
  return out;
}

}  // namespace tensorcompute::client
