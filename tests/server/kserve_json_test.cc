// KServe v2 REST's JSON and binary data extension <-> inference protos
// (server/kserve/json_request.h, server/kserve/json.h).

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "proto/kserve_wire.h"
#include "server/kserve/json.h"
#include "server/kserve/json_request.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server::kserve {
namespace {

using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;
using Json = nlohmann::json;

absl::Status Parse(const std::string& body, inference::ModelInferRequest* request,
                   HttpInferOptions* options = nullptr,
                   std::optional<int64_t> header_length = std::nullopt) {
  HttpInferOptions ignored;
  return ParseHttpInferRequest(body, header_length, request, options ? options : &ignored);
}

std::string OneInput(const std::string& datatype, const std::string& shape,
                     const std::string& data) {
  return R"({"inputs":[{"name":"params","datatype":")" + datatype + R"(","shape":)" + shape +
         R"(,"data":)" + data + "}]}";
}

template <typename T>
std::string Raw(std::vector<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The raw bytes a JSON input of `datatype` becomes.
std::string RawOf(const std::string& datatype, const std::string& data, int64_t n) {
  inference::ModelInferRequest request;
  const absl::Status status = Parse(OneInput(datatype, absl::StrCat("[", n, "]"), data), &request);
  EXPECT_TRUE(status.ok()) << status;
  return request.raw_input_contents_size() == 1 ? request.raw_input_contents(0) : "";
}

TEST(KserveJson, TypedDataOfEveryDatatype) {
  EXPECT_EQ(RawOf("BOOL", "[true,false]", 2), std::string("\1\0", 2));
  EXPECT_EQ(RawOf("INT8", "[-128,127]", 2), Raw<int8_t>({-128, 127}));
  EXPECT_EQ(RawOf("INT16", "[-2,300]", 2), Raw<int16_t>({-2, 300}));
  EXPECT_EQ(RawOf("INT32", "[-2,70000]", 2), Raw<int32_t>({-2, 70000}));
  EXPECT_EQ(RawOf("INT64", "[-9223372036854775808,5]", 2), Raw<int64_t>({INT64_MIN, 5}));
  EXPECT_EQ(RawOf("UINT8", "[0,255]", 2), Raw<uint8_t>({0, 255}));
  EXPECT_EQ(RawOf("UINT16", "[65535]", 1), Raw<uint16_t>({65535}));
  EXPECT_EQ(RawOf("UINT32", "[4294967295]", 1), Raw<uint32_t>({4294967295u}));
  EXPECT_EQ(RawOf("UINT64", "[18446744073709551615]", 1), Raw<uint64_t>({UINT64_MAX}));
  EXPECT_EQ(RawOf("FP32", "[1.5,-2,0.1]", 3), Raw<float>({1.5f, -2.0f, 0.1f}));
  EXPECT_EQ(RawOf("FP64", "[0.1,3]", 2), Raw<double>({0.1, 3.0}));
  // FP16: 1.0 = 0x3c00, -2 = 0xc000, 65504 (largest) = 0x7bff, 1e6 overflows to infinity,
  // 2^-24 (smallest subnormal) = 0x0001.
  EXPECT_EQ(RawOf("FP16", "[1.0,-2,65504,1e6,5.960464477539063e-8]", 5),
            Raw<uint16_t>({0x3c00, 0xc000, 0x7bff, 0x7c00, 0x0001}));
  // BF16: the top half of the float, rounded to nearest even: 1.0 = 0x3f80, 1.00390625
  // (halfway between 0x3f80 and 0x3f81) rounds to even 0x3f80.
  EXPECT_EQ(RawOf("BF16", "[1.0,-2,1.00390625]", 3), Raw<uint16_t>({0x3f80, 0xc000, 0x3f80}));
  EXPECT_EQ(RawOf("BYTES", R"(["ab",""])", 2), std::string("\2\0\0\0ab\0\0\0\0", 10));
}

TEST(KserveJson, NestedArraysAreFlattenedInRowMajorOrder) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(Parse(OneInput("INT32", "[2,3]", "[[1,2,3],[4,5,6]]"), &request).ok());
  EXPECT_EQ(request.raw_input_contents(0), Raw<int32_t>({1, 2, 3, 4, 5, 6}));
  EXPECT_THAT(request.inputs(0).shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(request.inputs(0).datatype(), "INT32");
}

TEST(KserveJson, ParametersIdAndOutputs) {
  inference::ModelInferRequest request;
  HttpInferOptions options;
  ASSERT_TRUE(Parse(R"({"id":"r1","parameters":{"axis":1,"op":"gather","binary_data_output":true,
                        "timeout":5000,"scale":0.5},
                        "inputs":[{"name":"indices","datatype":"INT64","shape":[1],"data":[0]}],
                        "outputs":[{"name":"output"}]})",
                    &request, &options)
                  .ok());
  EXPECT_EQ(request.id(), "r1");
  EXPECT_EQ(request.parameters().at("axis").int64_param(), 1);
  EXPECT_EQ(request.parameters().at("op").string_param(), "gather");
  EXPECT_EQ(request.parameters().at("scale").double_param(), 0.5);
  EXPECT_TRUE(options.binary_output);
  EXPECT_EQ(options.timeout_us, 5000);
  ASSERT_EQ(request.outputs_size(), 1);
  EXPECT_EQ(request.outputs(0).name(), "output");
}

TEST(KserveJson, OutputBinaryDataOverridesTheRequestParameter) {
  inference::ModelInferRequest request;
  HttpInferOptions options;
  ASSERT_TRUE(Parse(R"({"parameters":{"binary_data_output":true},"inputs":[],
                        "outputs":[{"name":"output","parameters":{"binary_data":false}}]})",
                    &request, &options)
                  .ok());
  EXPECT_FALSE(options.binary_output);
}

TEST(KserveJson, BinaryExtensionSplitsTheBodyAfterTheHeader) {
  const std::string json =
      R"({"inputs":[{"name":"params","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},)"
      R"({"name":"indices","datatype":"INT64","shape":[1],"data":[1]}]})";
  const std::string body = json + Raw<float>({1.0f, 2.0f});
  inference::ModelInferRequest request;
  const absl::Status status = Parse(body, &request, nullptr, static_cast<int64_t>(json.size()));
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(request.raw_input_contents_size(), 2);
  EXPECT_EQ(request.raw_input_contents(0), Raw<float>({1.0f, 2.0f}));
  EXPECT_EQ(request.raw_input_contents(1), Raw<int64_t>({1}));
}

TEST(KserveJson, BinaryDataSizesMustAddUp) {
  const std::string json =
      R"({"inputs":[{"name":"params","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]})";
  inference::ModelInferRequest request;
  EXPECT_THAT(Parse(json + "1234", &request, nullptr, static_cast<int64_t>(json.size())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("binary_data_size 8 but only 4 bytes")));
  inference::ModelInferRequest request2;
  EXPECT_THAT(Parse(json + "123456789", &request2, nullptr, static_cast<int64_t>(json.size())),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 bytes of binary data")));
  inference::ModelInferRequest request3;
  EXPECT_THAT(Parse(json, &request3, nullptr, 9999),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Inference-Header-Content-Length is 9999")));
}

TEST(KserveJson, BadJsonSaysWhere) {
  inference::ModelInferRequest request;
  EXPECT_THAT(Parse(R"({"inputs": [)", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(Parse("[]", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a JSON object")));
  EXPECT_THAT(Parse(R"({"inputs":{}})", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'inputs' must be an array")));
  EXPECT_THAT(Parse(R"({"inputs":[{"name":"params","datatype":"INT8","shape":[1]}]})", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("neither 'data'")));
  EXPECT_THAT(Parse(R"({"parameters":{"axis":[1]},"inputs":[]})", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter 'axis'")));
}

TEST(KserveJson, WrongElementsAreRefused) {
  inference::ModelInferRequest request;
  EXPECT_THAT(Parse(OneInput("INT32", "[2,2]", "[1,2,3]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape [2,2] has 4 elements but 'data' holds 3")));
  EXPECT_THAT(Parse(OneInput("INT8", "[1]", "[128]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data element 0 (128) does not fit INT8")));
  EXPECT_THAT(Parse(OneInput("UINT8", "[1]", "[-1]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit UINT8")));
  EXPECT_THAT(Parse(OneInput("INT32", "[1]", "[1.5]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not an integer for")));
  EXPECT_THAT(Parse(OneInput("BOOL", "[1]", "[1]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not true or false")));
  EXPECT_THAT(Parse(OneInput("BYTES", "[1]", "[1]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a string")));
  EXPECT_THAT(Parse(OneInput("FP32", "[1]", R"(["x"])"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a number for FP32")));
  EXPECT_THAT(Parse(OneInput("FP99", "[1]", "[1]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown datatype 'FP99'")));
}

// Nesting was accepted to any depth (without overflowing the stack); it is now refused where
// the 65th level opens, before the parser reads on.
TEST(KserveJson, DeepNestingIsRefusedAtOnce) {
  std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  inference::ModelInferRequest request;
  EXPECT_THAT(Parse(OneInput("INT8", "[1]", deep), &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the request: JSON nests deeper than 64 levels")));
}

TEST(KserveJson, DataNestsUpToTheBound) {
  // The request is level 1, "inputs" 2, the input 3: data arrays from level 4 to 64.
  const int levels = kMaxJsonDepth - 3;
  inference::ModelInferRequest request;
  const std::string deepest = std::string(levels, '[') + "7" + std::string(levels, ']');
  ASSERT_TRUE(Parse(OneInput("INT8", "[1]", deepest), &request).ok());
  EXPECT_EQ(request.raw_input_contents(0), Raw<int8_t>({7}));
  inference::ModelInferRequest request2;
  EXPECT_THAT(Parse(OneInput("INT8", "[1]", "[" + deepest + "]"), &request2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nests deeper than 64")));
}

TEST(KserveJson, DeepNestingInParametersIsRefused) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  inference::ModelInferRequest request;
  EXPECT_THAT(Parse(R"({"parameters":{"axis":)" + deep + R"(},"inputs":[]})", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nests deeper than 64")));
  EXPECT_THAT(Parse(R"({"inputs":[{"name":"p","parameters":{"x":)" + deep + "}}]}", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nests deeper than 64")));
  EXPECT_THAT(Parse(R"({"unknown":)" + deep + "}", &request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nests deeper than 64")));
  // Within the bound, a parameter that is not a scalar is quoted as before (keys sorted).
  EXPECT_THAT(Parse(R"({"parameters":{"axis":{"b":[1, 2],"a":null}},"inputs":[]})", &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(R"(parameter 'axis' must be a boolean, a number or a string, )"
                                 R"(not {"a":null,"b":[1,2]})")));
}

TEST(KserveJson, DataBeforeDatatypeAndShape) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(
      Parse(R"({"inputs":[{"data":[[1,2],[3,4]],"name":"p","datatype":"INT16","shape":[2,2]}]})",
            &request)
          .ok());
  EXPECT_EQ(request.raw_input_contents(0), Raw<int16_t>({1, 2, 3, 4}));
  EXPECT_THAT(request.inputs(0).shape(), ::testing::ElementsAre(2, 2));
  // The datatype first, the shape after the data.
  inference::ModelInferRequest request2;
  ASSERT_TRUE(Parse(R"({"inputs":[{"datatype":"BYTES","data":["a","bc"],"name":"p","shape":[2]}]})",
                    &request2)
                  .ok());
  EXPECT_EQ(request2.raw_input_contents(0), std::string("\1\0\0\0a\2\0\0\0bc", 11));
  // A bad element is named with the input's name, which comes after it.
  inference::ModelInferRequest request3;
  EXPECT_THAT(
      Parse(R"({"inputs":[{"data":[1,300],"shape":[2],"datatype":"INT8","name":"p"}]})", &request3),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("input 'p': data element 1 (300) does not fit INT8")));
  // An object element is quoted as the document decoder (kserve_json_reference.cc) dumped it.
  inference::ModelInferRequest request4;
  EXPECT_THAT(
      Parse(R"({"inputs":[{"data":[{"z":1,"a":[true]}],"shape":[1],"datatype":"FP32",)"
            R"("name":"p"}]})",
            &request4),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(R"(data element 0 ({"a":[true],"z":1}) is not a number for FP32)")));
}

TEST(KserveJson, ListsAreBounded) {
  std::vector<std::string> inputs(kMaxJsonListLength + 1,
                                  R"({"name":"i","datatype":"INT8","shape":[1],"data":[1]})");
  inference::ModelInferRequest request;
  EXPECT_THAT(
      Parse(R"({"inputs":[)" + absl::StrJoin(inputs, ",") + "]}", &request),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the request: more than 64 inputs")));
  std::vector<std::string> dims(kMaxJsonListLength + 1, "1");
  EXPECT_THAT(Parse(OneInput("INT8", "[" + absl::StrJoin(dims, ",") + "]", "[1]"), &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input 'params': 'shape' has more than 64 dimensions")));
  std::vector<std::string> params;
  for (int i = 0; i <= kMaxJsonListLength; ++i) params.push_back(absl::StrCat("\"p", i, "\":1"));
  EXPECT_THAT(Parse(R"({"inputs":[],"parameters":{)" + absl::StrJoin(params, ",") + "}}", &request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the request: more than 64 parameters")));
  std::vector<std::string> outputs(kMaxJsonListLength + 1, R"({"name":"o"})");
  EXPECT_THAT(
      Parse(R"({"inputs":[],"outputs":[)" + absl::StrJoin(outputs, ",") + "]}", &request),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the request: more than 64 outputs")));
  // At the bound, all is well.
  inputs.pop_back();
  EXPECT_TRUE(Parse(R"({"inputs":[)" + absl::StrJoin(inputs, ",") + "]}", &request).ok());
}

inference::ModelInferResponse Response(const std::string& datatype, std::vector<int64_t> shape,
                                       const std::string& raw) {
  inference::ModelInferResponse response;
  response.set_model_name("gather");
  response.set_model_version("1");
  response.set_id("x");
  auto* output = response.add_outputs();
  output->set_name("output");
  output->set_datatype(datatype);
  for (int64_t d : shape) output->add_shape(d);
  response.add_raw_output_contents(raw);
  return response;
}

TEST(KserveJson, ResponseAsJson) {
  const HttpBody body =
      WriteHttpInferResponse(Response("FP16", {2, 1}, Raw<uint16_t>({0x3c00, 0xc000})), false);
  EXPECT_FALSE(body.header_length.has_value());
  const Json j = Json::parse(body.body);
  EXPECT_EQ(j["model_name"], "gather");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "x");
  EXPECT_EQ(j["outputs"][0]["shape"], Json({2, 1}));
  EXPECT_EQ(j["outputs"][0]["data"], Json({1.0, -2.0}));
  const Json bytes = Json::parse(
      WriteHttpInferResponse(Response("BYTES", {2}, std::string("\1\0\0\0a\0\0\0\0", 9)), false)
          .body);
  EXPECT_EQ(bytes["outputs"][0]["data"], Json({"a", ""}));
  const Json u64 = Json::parse(
      WriteHttpInferResponse(Response("UINT64", {1}, Raw<uint64_t>({UINT64_MAX})), false).body);
  EXPECT_EQ(u64["outputs"][0]["data"][0].get<uint64_t>(), UINT64_MAX);
}

TEST(KserveJson, ResponseAsBinary) {
  const std::string raw = Raw<int32_t>({7, 8});
  const HttpBody body = WriteHttpInferResponse(Response("INT32", {2}, raw), true);
  ASSERT_TRUE(body.header_length.has_value());
  const Json j = Json::parse(body.body.substr(0, static_cast<size_t>(*body.header_length)));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(body.body.substr(static_cast<size_t>(*body.header_length)), raw);
}

TEST(KserveJson, ResponseAsBinaryViewedInPlace) {
  const std::string raw = Raw<int32_t>({7, 8, 9});
  const inference::ModelInferResponse response = Response("INT32", {3}, raw);
  const HttpBody body = WriteHttpInferResponse(response, true, /*append_binary=*/false);
  ASSERT_TRUE(body.header_length.has_value());
  EXPECT_EQ(static_cast<size_t>(*body.header_length), body.body.size());  // the JSON only
  EXPECT_EQ(Json::parse(body.body)["outputs"][0]["parameters"]["binary_data_size"], 12);
  ASSERT_EQ(body.binary.size(), 1u);
  EXPECT_EQ(body.binary[0], raw);
  EXPECT_EQ(body.binary[0].data(), response.raw_output_contents(0).data());  // not a copy
  // JSON output has nothing to view.
  EXPECT_TRUE(WriteHttpInferResponse(response, false, false).binary.empty());
}

TEST(KserveJson, MetadataAndErrors) {
  inference::ServerMetadataResponse server;
  server.set_name("tensorcompute");
  server.set_version("1.0");
  server.add_extensions("binary_tensor_data");
  EXPECT_EQ(Json::parse(ServerMetadataJson(server)),
            Json::parse(R"({"name":"tensorcompute","version":"1.0",
                            "extensions":["binary_tensor_data"]})"));
  EXPECT_EQ(Json::parse(ErrorJson("bad \"x\""))["error"], "bad \"x\"");
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(proto::HttpStatusOf(absl::StatusCode::kInternal), 500);
}

}  // namespace
}  // namespace tensorcompute::server::kserve
