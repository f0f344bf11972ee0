// The load tester's requests (client/load_requests.h), decoded field by field, one protocol
// at a time: the native tensorcompute.v1 calls, KServe v2 ModelInfer over gRPC, and the same
// over HTTP/REST (a JSON header, then the inputs' raw bytes). Each test parses what
// BuildLoadRequests produced with the protocol's own types (protobuf messages, a JSON parser)
// and checks the fields it sets; then the checks every protocol shares (indices in range,
// params shared, impossible specs refused), and EmbeddingBag's fixed bags of finite values.

#include "client/load_requests.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.pb.h"
#include "nlohmann/json.hpp"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/half_float.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Body `k` of `requests` parsed as a `Request`.
template <typename Request>
Request Parse(const LoadRequests& requests, size_t k) {
  grpc::Slice slice;
  EXPECT_TRUE(requests.bodies[k].DumpToSingleSlice(&slice).ok());
  Request request;
  EXPECT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
  return request;
}

// The int32 or int64 values of raw little-endian index bytes.
std::vector<int64_t> IndexValues(const std::string& bytes, core::DataType index_dtype) {
  std::vector<int64_t> values;
  if (index_dtype == core::DataType::kInt32) {
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      int32_t v;
      std::memcpy(&v, bytes.data() + i, 4);
      values.push_back(v);
    }
  } else {
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      int64_t v;
      std::memcpy(&v, bytes.data() + i, 8);
      values.push_back(v);
    }
  }
  return values;
}

// How many of `values` (index tuples of `depth` components) fall outside `dims`.
int OutOfRange(const std::vector<int64_t>& values, const core::Shape& dims, int64_t depth) {
  int bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    bad += values[i] < 0 || values[i] >= dims[i % depth];
  }
  return bad;
}

int64_t MeanSize(const std::vector<std::string>& bodies) {
  int64_t total = 0;
  for (const std::string& b : bodies) total += static_cast<int64_t>(b.size());
  return total / static_cast<int64_t>(bodies.size());
}

TEST(NativeLoadRequests, GatherNdCarriesTheParamsAndIndexTuples) {
  LoadRequestSpec spec;
  spec.op = LoadOp::kGatherNd;
  spec.dtype = core::DataType::kString;
  spec.params_shape = {9, 4, 3};
  spec.index_depth = 2;
  spec.num_indices = 6;
  spec.index_dtype = core::DataType::kInt64;
  spec.distinct_requests = 5;
  spec.invalid_fraction = 0.4;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/tensorcompute.v1.TensorCompute/GatherNd");
  ASSERT_THAT(requests->bodies, SizeIs(5));
  EXPECT_THAT(requests->http_bodies, IsEmpty());
  EXPECT_THAT(requests->valid, ElementsAre(true, true, false, true, false));
  int64_t total = 0;
  std::string first_params;
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    total += static_cast<int64_t>(requests->bodies[k].Length());
    const auto request = Parse<v1::GatherNdRequest>(*requests, k);
    EXPECT_TRUE(request.params_name().empty());
    EXPECT_EQ(request.params().dtype(), v1::DT_STRING);
    EXPECT_THAT(request.params().shape(), ElementsAre(9, 4, 3));
    ASSERT_EQ(request.params().strings_size(), 9 * 4 * 3);
    if (k == 0) first_params = request.params().SerializeAsString();
    EXPECT_EQ(request.params().SerializeAsString(), first_params) << "request " << k;
    EXPECT_EQ(request.indices().dtype(), v1::DT_INT64);
    EXPECT_THAT(request.indices().shape(), ElementsAre(6, 2));
    const auto values = IndexValues(request.indices().data(), core::DataType::kInt64);
    ASSERT_THAT(values, SizeIs(12));
    EXPECT_EQ(OutOfRange(values, spec.params_shape, 2), requests->valid[k] ? 0 : 1);
  }
  EXPECT_EQ(requests->request_bytes, total / 5);
}

TEST(KserveGrpcLoadRequests, InlineGatherIsModelGatherWithParamsAndIndices) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.params_shape = {20, 3};
  spec.num_indices = 7;
  spec.distinct_requests = 4;
  spec.invalid_fraction = 0.5;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/inference.GRPCInferenceService/ModelInfer");
  ASSERT_THAT(requests->bodies, SizeIs(4));
  EXPECT_THAT(requests->http_bodies, IsEmpty());
  EXPECT_TRUE(requests->http_path.empty());
  EXPECT_THAT(requests->valid, ElementsAre(true, false, true, false));
  int64_t total = 0;
  std::string first_params;
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    total += static_cast<int64_t>(requests->bodies[k].Length());
    const auto request = Parse<inference::ModelInferRequest>(*requests, k);
    EXPECT_EQ(request.model_name(), "gather");
    EXPECT_TRUE(request.model_version().empty());
    EXPECT_TRUE(request.id().empty());
    EXPECT_EQ(request.outputs_size(), 0);
    ASSERT_EQ(request.parameters().size(), 1u);
    EXPECT_EQ(request.parameters().at("axis").int64_param(), 0);
    ASSERT_EQ(request.inputs_size(), 2);
    EXPECT_EQ(request.inputs(0).name(), "params");
    EXPECT_EQ(request.inputs(0).datatype(), "FP32");
    EXPECT_THAT(request.inputs(0).shape(), ElementsAre(20, 3));
    EXPECT_EQ(request.inputs(1).name(), "indices");
    EXPECT_EQ(request.inputs(1).datatype(), "INT32");
    EXPECT_THAT(request.inputs(1).shape(), ElementsAre(7));
    for (const auto& input : request.inputs()) {
      EXPECT_FALSE(input.has_contents());
      EXPECT_TRUE(input.parameters().empty());
    }
    ASSERT_EQ(request.raw_input_contents_size(), 2);
    EXPECT_EQ(request.raw_input_contents(0).size(), 20u * 3 * 4);
    if (k == 0) first_params = request.raw_input_contents(0);
    EXPECT_EQ(request.raw_input_contents(0), first_params) << "request " << k;
    const auto values = IndexValues(request.raw_input_contents(1), core::DataType::kInt32);
    ASSERT_THAT(values, SizeIs(7));
    EXPECT_EQ(OutOfRange(values, spec.params_shape, 1), requests->valid[k] ? 0 : 1);
  }
  EXPECT_EQ(requests->request_bytes, total / 4);
}

TEST(KserveGrpcLoadRequests, ResidentGatherNdNamesTheModelAndSendsIndicesOnly) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.op = LoadOp::kGatherNd;
  spec.params_shape = {5, 4, 2};
  spec.index_depth = 2;
  spec.num_indices = 3;
  spec.index_dtype = core::DataType::kInt64;
  spec.distinct_requests = 3;
  spec.params_name = "table";
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/inference.GRPCInferenceService/ModelInfer");
  ASSERT_THAT(requests->bodies, SizeIs(3));
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    const auto request = Parse<inference::ModelInferRequest>(*requests, k);
    EXPECT_EQ(request.model_name(), "table");
    ASSERT_EQ(request.parameters().size(), 1u);
    EXPECT_EQ(request.parameters().at("op").string_param(), "gather_nd");
    ASSERT_EQ(request.inputs_size(), 1);
    EXPECT_EQ(request.inputs(0).name(), "indices");
    EXPECT_EQ(request.inputs(0).datatype(), "INT64");
    EXPECT_THAT(request.inputs(0).shape(), ElementsAre(3, 2));
    ASSERT_EQ(request.raw_input_contents_size(), 1);
    const auto values = IndexValues(request.raw_input_contents(0), core::DataType::kInt64);
    ASSERT_THAT(values, SizeIs(6));
    EXPECT_EQ(OutOfRange(values, spec.params_shape, 2), 0);
  }
}

TEST(KserveGrpcLoadRequests, StringParamsTravelInBytesFraming) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.dtype = core::DataType::kString;
  spec.params_shape = {4};
  spec.num_indices = 2;
  spec.distinct_requests = 1;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  const auto request = Parse<inference::ModelInferRequest>(*requests, 0);
  ASSERT_EQ(request.inputs_size(), 2);
  EXPECT_EQ(request.inputs(0).datatype(), "BYTES");
  // Four elements of 17 bytes ("s" and 16 hex digits), each after its 4-byte length.
  const std::string& raw = request.raw_input_contents(0);
  ASSERT_EQ(raw.size(), 4u * (4 + 17));
  for (size_t at = 0; at < raw.size(); at += 4 + 17) {
    EXPECT_EQ(raw.substr(at, 4), std::string("\x11\0\0\0", 4)) << "element at " << at;
    EXPECT_EQ(raw[at + 4], 's');
  }
}

TEST(KserveGrpcLoadRequests, RejectsADtypeWithoutAV2Name) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.dtype = core::DataType::kComplex64;
  EXPECT_THAT(BuildLoadRequests(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no KServe v2 datatype")));
}

// The header of an HTTP body: its first `header_bytes` bytes, parsed.
nlohmann::json Header(const LoadRequests& requests, size_t k) {
  return nlohmann::json::parse(requests.http_bodies[k].substr(0, requests.http_header_bytes[k]));
}

TEST(KserveHttpLoadRequests, InlineGatherIsAJsonHeaderThenTheRawInputs) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.http = true;
  spec.dtype = core::DataType::kFloat64;
  spec.params_shape = {10, 2};
  spec.num_indices = 5;
  spec.distinct_requests = 4;
  spec.invalid_fraction = 0.25;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->http_path, "/v2/models/gather/infer");
  EXPECT_EQ(requests->method, "POST /v2/models/gather/infer");
  EXPECT_THAT(requests->bodies, IsEmpty());
  ASSERT_THAT(requests->http_bodies, SizeIs(4));
  ASSERT_THAT(requests->http_header_bytes, SizeIs(4));
  EXPECT_THAT(requests->valid, ElementsAre(true, true, true, false));
  EXPECT_EQ(requests->request_bytes, MeanSize(requests->http_bodies));

  // The same spec over gRPC draws the same params and indices: the HTTP bodies carry exactly
  // its raw_input_contents after the header.
  spec.http = false;
  auto grpc_requests = BuildLoadRequests(spec);
  ASSERT_THAT(grpc_requests.status(), IsOk());
  const nlohmann::json expected_header = {
      {"inputs",
       {{{"name", "params"},
         {"datatype", "FP64"},
         {"shape", {10, 2}},
         {"parameters", {{"binary_data_size", 10 * 2 * 8}}}},
        {{"name", "indices"},
         {"datatype", "INT32"},
         {"shape", {5}},
         {"parameters", {{"binary_data_size", 5 * 4}}}}}},
      {"parameters", {{"binary_data_output", true}, {"axis", 0}}}};
  for (size_t k = 0; k < requests->http_bodies.size(); ++k) {
    const std::string& body = requests->http_bodies[k];
    const size_t header_bytes = static_cast<size_t>(requests->http_header_bytes[k]);
    EXPECT_EQ(Header(*requests, k), expected_header) << "request " << k;
    const auto grpc_request = Parse<inference::ModelInferRequest>(*grpc_requests, k);
    ASSERT_EQ(grpc_request.raw_input_contents_size(), 2);
    EXPECT_EQ(body.substr(header_bytes),
              absl::StrCat(grpc_request.raw_input_contents(0), grpc_request.raw_input_contents(1)))
        << "request " << k;
    const auto values = IndexValues(body.substr(body.size() - 5 * 4), core::DataType::kInt32);
    EXPECT_EQ(OutOfRange(values, spec.params_shape, 1), requests->valid[k] ? 0 : 1);
  }
}

TEST(KserveHttpLoadRequests, ResidentGatherNdPostsIndicesOnlyToTheTable) {
  LoadRequestSpec spec;
  spec.kserve = true;
  spec.http = true;
  spec.op = LoadOp::kGatherNd;
  spec.params_shape = {6, 5};
  spec.index_depth = 2;
  spec.num_indices = 4;
  spec.distinct_requests = 2;
  spec.params_name = "table";
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->http_path, "/v2/models/table/infer");
  EXPECT_EQ(requests->method, "POST /v2/models/table/infer");
  ASSERT_THAT(requests->http_bodies, SizeIs(2));
  const nlohmann::json expected_header = {
      {"inputs",
       {{{"name", "indices"},
         {"datatype", "INT32"},
         {"shape", {4, 2}},
         {"parameters", {{"binary_data_size", 4 * 2 * 4}}}}}},
      {"parameters", {{"binary_data_output", true}, {"op", "gather_nd"}}}};
  for (size_t k = 0; k < requests->http_bodies.size(); ++k) {
    EXPECT_EQ(Header(*requests, k), expected_header);
    const std::string& body = requests->http_bodies[k];
    ASSERT_EQ(body.size(), static_cast<size_t>(requests->http_header_bytes[k]) + 4 * 2 * 4);
    const auto values = IndexValues(body.substr(body.size() - 4 * 2 * 4), core::DataType::kInt32);
    EXPECT_EQ(OutOfRange(values, spec.params_shape, 2), 0);
  }
}

TEST(KserveHttpLoadRequests, NeedsKserve) {
  LoadRequestSpec spec;
  spec.http = true;
  EXPECT_THAT(BuildLoadRequests(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KServe v2 only")));
}

TEST(BuildLoadRequests, BodiesAreRequestsWithSharedParams) {
  LoadRequestSpec spec;
  spec.params_shape = {100, 8};
  spec.num_indices = 5;
  spec.distinct_requests = 10;
  spec.invalid_fraction = 0.3;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/tensorcompute.v1.TensorCompute/Gather");
  ASSERT_EQ(requests->bodies.size(), 10u);
  EXPECT_EQ(std::count(requests->valid.begin(), requests->valid.end(), false), 3);
  std::string first_params;
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    grpc::Slice slice;
    ASSERT_TRUE(requests->bodies[k].TrySingleSlice(&slice).ok() ||
                requests->bodies[k].DumpToSingleSlice(&slice).ok());
    v1::GatherRequest request;
    ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
    EXPECT_THAT(request.params().shape(), ElementsAre(100, 8));
    EXPECT_THAT(request.indices().shape(), ElementsAre(5));
    EXPECT_EQ(request.axis(), 0);
    if (k == 0) first_params = request.params().data();
    EXPECT_EQ(request.params().data(), first_params);
  }
}

TEST(BuildLoadRequests, ParamsNameSendsOnlyTheNameAndIndicesInRange) {
  for (bool nd : {false, true}) {
    LoadRequestSpec spec;
    spec.op = nd ? LoadOp::kGatherNd : LoadOp::kGather;
    spec.params_shape = {7, 3, 2};
    spec.index_depth = 2;
    spec.num_indices = 50;
    spec.distinct_requests = 4;
    spec.params_name = "emb";
    auto requests = BuildLoadRequests(spec);
    ASSERT_THAT(requests.status(), IsOk());
    for (const grpc::ByteBuffer& body : requests->bodies) {
      grpc::Slice slice;
      ASSERT_TRUE(body.DumpToSingleSlice(&slice).ok());
      v1::Tensor indices;
      if (nd) {
        v1::GatherNdRequest request;
        ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
        EXPECT_EQ(request.params_name(), "emb");
        EXPECT_FALSE(request.has_params());
        EXPECT_THAT(request.indices().shape(), ElementsAre(50, 2));
        indices = request.indices();
      } else {
        v1::GatherRequest request;
        ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
        EXPECT_EQ(request.params_name(), "emb");
        EXPECT_FALSE(request.has_params());
        EXPECT_THAT(request.indices().shape(), ElementsAre(50));
        indices = request.indices();
      }
      const auto* values = reinterpret_cast<const int32_t*>(indices.data().data());
      for (int i = 0; i < static_cast<int>(indices.data().size() / 4); ++i) {
        const int64_t dim = nd ? spec.params_shape[i % 2] : spec.params_shape[0];
        EXPECT_GE(values[i], 0);
        EXPECT_LT(values[i], dim) << "index " << i;
      }
    }
    // The params (7x3x2 float32: 168 data bytes) no longer travel; the name is a few bytes.
    spec.params_name.clear();
    auto inline_requests = BuildLoadRequests(spec);
    ASSERT_THAT(inline_requests.status(), IsOk());
    EXPECT_GE(inline_requests->request_bytes - requests->request_bytes, 168 - 8);
  }
}

TEST(BuildLoadRequests, RejectsImpossibleSpecs) {
  LoadRequestSpec spec;
  spec.params_shape = {0, 8};
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = LoadRequestSpec();
  spec.op = LoadOp::kGatherNd;
  spec.index_depth = 3;
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = LoadRequestSpec();
  spec.invalid_fraction = 2;
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BuildLoadRequests, EmbeddingBagBodiesAreFixedBagsOfFiniteRows) {
  LoadRequestSpec spec;
  spec.op = LoadOp::kEmbeddingBag;
  spec.dtype = core::DataType::kFloat16;
  spec.params_shape = {50, 6};
  spec.num_indices = 24;
  spec.bag_size = 4;
  spec.distinct_requests = 8;
  spec.invalid_fraction = 0.25;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/tensorcompute.v1.TensorCompute/EmbeddingBag");
  ASSERT_EQ(requests->bodies.size(), 8u);
  EXPECT_EQ(std::count(requests->valid.begin(), requests->valid.end(), false), 2);
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    const auto request = Parse<v1::EmbeddingBagRequest>(*requests, k);
    EXPECT_EQ(request.mode(), v1::EmbeddingBagRequest::SUM);
    EXPECT_FALSE(request.has_offsets());
    EXPECT_FALSE(request.has_per_sample_weights());
    EXPECT_FALSE(request.include_last_offset());
    EXPECT_THAT(request.indices().shape(), ElementsAre(6, 4));  // 24 lookups, bags of 4
    EXPECT_EQ(request.params().dtype(), v1::DT_FLOAT16);
    EXPECT_THAT(request.params().shape(), ElementsAre(50, 6));
    ASSERT_EQ(request.params().data().size(), 50u * 6 * 2);
    const auto* halves = reinterpret_cast<const uint16_t*>(request.params().data().data());
    for (int i = 0; i < 50 * 6; ++i) {
      const float v = core::HalfToFloat(halves[i]);
      EXPECT_TRUE(v >= -1.0f && v <= 1.0f) << "params element " << i << " = " << v;
    }
    const auto* values = reinterpret_cast<const int32_t*>(request.indices().data().data());
    int out_of_range = 0;
    for (int i = 0; i < 24; ++i) out_of_range += values[i] < 0 || values[i] >= 50;
    EXPECT_EQ(out_of_range, requests->valid[k] ? 0 : 1) << "request " << k;
  }

  spec.params_name = "table";
  auto by_name = BuildLoadRequests(spec);
  ASSERT_THAT(by_name.status(), IsOk());
  const auto request = Parse<v1::EmbeddingBagRequest>(*by_name, 0);
  EXPECT_EQ(request.params_name(), "table");
  EXPECT_FALSE(request.has_params());
  EXPECT_THAT(request.indices().shape(), ElementsAre(6, 4));
}

TEST(BuildLoadRequests, EmbeddingBagRejectsImpossibleSpecs) {
  auto spec = [] {
    LoadRequestSpec s;
    s.op = LoadOp::kEmbeddingBag;
    return s;
  };
  LoadRequestSpec rank3 = spec();
  rank3.params_shape = {4, 4, 4};
  EXPECT_THAT(BuildLoadRequests(rank3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[rows, dim]")));
  LoadRequestSpec ints = spec();
  ints.dtype = core::DataType::kInt32;
  EXPECT_THAT(BuildLoadRequests(ints).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got int32")));
  LoadRequestSpec ragged = spec();
  ragged.num_indices = 10;
  ragged.bag_size = 4;
  EXPECT_THAT(BuildLoadRequests(ragged).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("10 lookups per request do not make whole bags of 4")));
  LoadRequestSpec empty_bags = spec();
  empty_bags.bag_size = 0;
  EXPECT_THAT(BuildLoadRequests(empty_bags).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // KServe (gRPC or HTTP) has no embedding_bag form on this branch yet.
  for (bool http : {false, true}) {
    LoadRequestSpec kserve = spec();
    kserve.kserve = true;
    kserve.http = http;
    EXPECT_THAT(BuildLoadRequests(kserve).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("native protocol only")));
  }
}

}  // namespace
}  // namespace tensorcompute::client
