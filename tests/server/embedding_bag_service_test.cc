// The EmbeddingBag RPC through a real server: random requests over every mode, params dtype,
// index dtype, weights or not, offsets or fixed bags, padding_idx, answered with the same bytes
// as core::EmbeddingBag (itself checked against a slow reference in
// tests/core/embedding_bag_test.cc), inline and from a resident table; and the errors that the
// call adds (params and params_name, an unknown name) or passes through with their codes.

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/embedding_bag.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "proto/tensor_codec.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using core::DataType;
using core::EmbeddingBagMode;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using ::testing::HasSubstr;

// One request, in core's terms: what core::EmbeddingBag is called with.
struct BagCase {
  core::Tensor params;
  core::Tensor indices;
  std::optional<core::Tensor> offsets;
  std::optional<core::Tensor> weights;
  core::EmbeddingBagOptions options;

  std::string DebugString() const {
    return absl::StrCat(
        "params ", core::DataTypeName(params.dtype()), " ", core::ShapeToString(params.shape()),
        ", indices ", core::ShapeToString(indices.shape()), offsets ? ", offsets" : "",
        weights ? ", weights" : "", ", mode ", core::EmbeddingBagModeName(options.mode),
        options.include_last_offset ? ", include_last_offset" : "",
        options.padding_idx ? absl::StrCat(", padding_idx ", *options.padding_idx) : "");
  }

  absl::StatusOr<core::Tensor> Expected() const {
    std::optional<core::TensorView> o, w;
    if (offsets) o = offsets->view();
    if (weights) w = weights->view();
    return core::EmbeddingBag(params.view(), indices.view(), o ? &*o : nullptr, w ? &*w : nullptr,
                              options);
  }

  // The wire form; params inline, or `params_name` instead.
  v1::EmbeddingBagRequest ToProto(const std::string& params_name = "") const {
    v1::EmbeddingBagRequest request;
    if (params_name.empty()) {
      proto::ToProto(params.view(), request.mutable_params());
    } else {
      request.set_params_name(params_name);
    }
    proto::ToProto(indices.view(), request.mutable_indices());
    if (offsets) proto::ToProto(offsets->view(), request.mutable_offsets());
    if (weights) proto::ToProto(weights->view(), request.mutable_per_sample_weights());
    request.set_mode(static_cast<v1::EmbeddingBagRequest::Mode>(options.mode));
    request.set_include_last_offset(options.include_last_offset);
    if (options.padding_idx) request.set_padding_idx(*options.padding_idx);
    return request;
  }
};

// A random valid request (its index values in range, so the answer is OK).
BagCase RandomCase(Rng& rng) {
  static constexpr DataType kFloats[] = {DataType::kFloat16, DataType::kBfloat16,
                                         DataType::kFloat32, DataType::kFloat64};
  static constexpr EmbeddingBagMode kModes[] = {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean,
                                                EmbeddingBagMode::kMax, EmbeddingBagMode::kSqrtn};
  BagCase c;
  const DataType dtype = kFloats[UniformInt(rng, 0, 3)];
  const int64_t rows = UniformInt(rng, 1, 40);
  const int64_t dim = UniformInt(rng, 1, 70);
  c.params = RandomTensor(dtype, {rows, dim}, rng);
  c.options.mode = kModes[UniformInt(rng, 0, 3)];
  const DataType index_dtype = UniformInt(rng, 0, 1) ? DataType::kInt64 : DataType::kInt32;
  const int64_t bags = UniformInt(rng, 0, 300);
  std::vector<int64_t> values;
  if (UniformInt(rng, 0, 2) == 0) {  // fixed bags
    const int64_t n = UniformInt(rng, 0, 6);
    for (int64_t i = 0; i < bags * n; ++i) values.push_back(UniformInt(rng, -rows, rows - 1));
    c.indices = MakeIndices(index_dtype, {bags, n}, values);
  } else {
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < bags; ++b) {
      starts.push_back(static_cast<int64_t>(values.size()));
      const int64_t n = UniformInt(rng, 0, 9);
      for (int64_t i = 0; i < n; ++i) values.push_back(UniformInt(rng, -rows, rows - 1));
    }
    c.options.include_last_offset = UniformInt(rng, 0, 1) == 1;
    if (c.options.include_last_offset) starts.push_back(static_cast<int64_t>(values.size()));
    const DataType offsets_dtype = UniformInt(rng, 0, 1) ? DataType::kInt64 : DataType::kInt32;
    c.offsets = MakeIndices(offsets_dtype, {static_cast<int64_t>(starts.size())}, starts);
    c.indices = MakeIndices(index_dtype, {static_cast<int64_t>(values.size())}, values);
  }
  if (c.options.mode != EmbeddingBagMode::kMax && UniformInt(rng, 0, 1) == 1) {
    c.weights =
        RandomTensor(UniformInt(rng, 0, 1) ? dtype : DataType::kFloat32, c.indices.shape(), rng);
  }
  if (UniformInt(rng, 0, 3) == 0) c.options.padding_idx = UniformInt(rng, -rows, rows - 1);
  return c;
}

bool SameBytes(const core::Tensor& a, const core::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes().size() == b.bytes().size() &&
         std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()) == 0;
}

// The small rows and bag of the error cases: params float32 [4, 2], indices {0, 9, 1} (9 out
// of range), offsets {0, 1}.
BagCase ErrorCase() {
  BagCase c;
  c.params = MakeTensor<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  c.indices = MakeIndices(DataType::kInt64, {3}, {0, 9, 1});
  c.offsets = MakeIndices(DataType::kInt64, {2}, {0, 1});
  return c;
}

class EmbeddingBagServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = Server::Start(TestOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = MakeStub(server_->port());
  }

  absl::StatusOr<core::Tensor> Send(const v1::EmbeddingBagRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::EmbeddingBagResponse response;
    const grpc::Status status = stub_->EmbeddingBag(&context, request, &response);
    if (!status.ok()) return ToAbsl(status);
    return proto::FromProto(response.output(), "output", INT64_MAX);
  }

  // Stores `tensor` as `name` (replacing), in one PutTensor message.
  absl::Status Put(const std::string& name, const core::Tensor& tensor) {
    grpc::ClientContext context;
    v1::PutTensorResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
        stub_->PutTensor(&context, &response);
    v1::PutTensorRequest message;
    message.set_name(name);
    message.set_dtype(proto::ToProtoDataType(tensor.dtype()));
    for (int64_t d : tensor.shape()) message.add_shape(d);
    message.set_replace(true);
    message.set_data(reinterpret_cast<const char*>(tensor.bytes().data()), tensor.bytes().size());
    writer->Write(message);
    writer->WritesDone();
    return ToAbsl(writer->Finish());
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Stub> stub_;
};

TEST_F(EmbeddingBagServiceTest, RandomRequestsGetCoresBytesInlineAndByName) {
  Rng rng(2301);
  for (int i = 0; i < 120; ++i) {
    const BagCase c = RandomCase(rng);
    SCOPED_TRACE(c.DebugString());
    const absl::StatusOr<core::Tensor> expected = c.Expected();
    ASSERT_THAT(expected, IsOk());
    const absl::StatusOr<core::Tensor> inline_answer = Send(c.ToProto());
    ASSERT_THAT(inline_answer, IsOk());
    EXPECT_TRUE(SameBytes(*inline_answer, *expected));
    ASSERT_THAT(Put("table", c.params), IsOk());
    const absl::StatusOr<core::Tensor> by_name = Send(c.ToProto("table"));
    ASSERT_THAT(by_name, IsOk());
    EXPECT_TRUE(SameBytes(*by_name, *expected));
  }
}

// Large enough to be split across the server's pool, and still the same bytes.
TEST_F(EmbeddingBagServiceTest, ALargeRequestGetsCoresBytes) {
  Rng rng(2302);
  BagCase c;
  c.params = RandomTensor(DataType::kFloat32, {5000, 64}, rng);
  std::vector<int64_t> values(4096 * 32);
  for (int64_t& v : values) v = UniformInt(rng, -5000, 4999);
  c.indices = MakeIndices(DataType::kInt64, {4096, 32}, values);
  c.options.mode = EmbeddingBagMode::kMean;
  const absl::StatusOr<core::Tensor> expected = c.Expected();
  ASSERT_THAT(expected, IsOk());
  ASSERT_THAT(Put("big", c.params), IsOk());
  const absl::StatusOr<core::Tensor> answer = Send(c.ToProto("big"));
  ASSERT_THAT(answer, IsOk());
  EXPECT_TRUE(SameBytes(*answer, *expected));
}

TEST_F(EmbeddingBagServiceTest, ErrorsCarryTheirCodesAndWords) {
  const BagCase c = ErrorCase();
  EXPECT_THAT(Send(c.ToProto()), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("indices[1] = 9 is not in [-4, 4)")));

  v1::EmbeddingBagRequest both = c.ToProto();
  both.set_params_name("table");
  EXPECT_THAT(Send(both), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("either params (the tensor inline) or params_name")));
  EXPECT_THAT(
      Send(c.ToProto("nothing-here")),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("no resident tensor named 'nothing-here'")));

  v1::EmbeddingBagRequest bad_mode = c.ToProto();
  bad_mode.set_mode(static_cast<v1::EmbeddingBagRequest::Mode>(7));
  EXPECT_THAT(Send(bad_mode), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mode")));

  BagCase ints = ErrorCase();
  ints.params = MakeTensor<int32_t>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THAT(Send(ints.ToProto()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params must be float16, bfloat16, float32 or float64")));

  BagCase decreasing = ErrorCase();
  decreasing.indices = MakeIndices(DataType::kInt64, {3}, {0, 1, 2});
  decreasing.offsets = MakeIndices(DataType::kInt64, {3}, {0, 2, 1});
  EXPECT_THAT(Send(decreasing.ToProto()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offsets[2]")));

  // An output over the server's limit: 2^20 bags of a 1024-float row from 8 KiB of request.
  BagCase huge;
  huge.params = MakeTensor<float>({1, 1024}, std::vector<float>(1024, 1.0f));
  huge.indices = MakeIndices(DataType::kInt32, {int64_t{1} << 20, 0}, {});
  ServerOptions small = TestOptions();
  small.max_output_bytes = int64_t{64} << 20;
  auto limited = Server::Start(small);
  ASSERT_TRUE(limited.ok()) << limited.status();
  stub_ = MakeStub((*limited)->port());
  EXPECT_THAT(Send(huge.ToProto()), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace tensorcompute::server
