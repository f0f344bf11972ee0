// The load tester's requests, decoded field by field, one protocol at a time: the native
// tensorcompute.v1 calls, KServe v2 ModelInfer over gRPC, and the same over HTTP/REST (a JSON
// header, then the inputs' raw bytes). Each test parses what BuildLoadRequests produced with
// the protocol's own types (protobuf messages, a JSON parser) and checks every field it sets.

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

#include "client/load_tester.h"
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
Request ParseBody(const LoadRequests& requests, size_t k) {
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
    const auto request = ParseBody<v1::GatherNdRequest>(*requests, k);
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
    const auto request = ParseBody<inference::ModelInferRequest>(*requests, k);
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
    const auto request = ParseBody<inference::ModelInferRequest>(*requests, k);
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
  const auto request = ParseBody<inference::ModelInferRequest>(*requests, 0);
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
    const auto grpc_request = ParseBody<inference::ModelInferRequest>(*grpc_requests, k);
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

}  // namespace
}  // namespace tensorcompute::client
