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
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using core::DataType;
using core::EmbeddingBagMode;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::PutTensor;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::ToEmbeddingBagProto;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using ::testing::HasSubstr;

using BagCase = ::tensorcompute::testing::EmbeddingBagCase;

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

  absl::Status Put(const std::string& name, const core::Tensor& tensor) {
    return PutTensor(*stub_, name, tensor);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Stub> stub_;
};

TEST_F(EmbeddingBagServiceTest, RandomRequestsGetCoresBytesInlineAndByName) {
  Rng rng(2301);
  for (int i = 0; i < 120; ++i) {
    const BagCase c = ::tensorcompute::testing::RandomEmbeddingBagCase(rng);
    SCOPED_TRACE(c.DebugString());
    const absl::StatusOr<core::Tensor> expected = c.Expected();
    ASSERT_THAT(expected, IsOk());
    const absl::StatusOr<core::Tensor> inline_answer = Send(ToEmbeddingBagProto(c));
    ASSERT_THAT(inline_answer, IsOk());
    EXPECT_TRUE(SameBytes(*inline_answer, *expected));
    ASSERT_THAT(Put("table", c.params), IsOk());
    const absl::StatusOr<core::Tensor> by_name = Send(ToEmbeddingBagProto(c, "table"));
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
  const absl::StatusOr<core::Tensor> answer = Send(ToEmbeddingBagProto(c, "big"));
  ASSERT_THAT(answer, IsOk());
  EXPECT_TRUE(SameBytes(*answer, *expected));
}

TEST_F(EmbeddingBagServiceTest, ErrorsCarryTheirCodesAndWords) {
  const BagCase c = ErrorCase();
  EXPECT_THAT(
      Send(ToEmbeddingBagProto(c)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices[1] = 9 is not in [-4, 4)")));

  v1::EmbeddingBagRequest both = ToEmbeddingBagProto(c);
  both.set_params_name("table");
  EXPECT_THAT(Send(both), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("either params (the tensor inline) or params_name")));
  EXPECT_THAT(
      Send(ToEmbeddingBagProto(c, "nothing-here")),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("no resident tensor named 'nothing-here'")));

  v1::EmbeddingBagRequest bad_mode = ToEmbeddingBagProto(c);
  bad_mode.set_mode(static_cast<v1::EmbeddingBagRequest::Mode>(7));
  EXPECT_THAT(Send(bad_mode), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mode")));

  BagCase ints = ErrorCase();
  ints.params = MakeTensor<int32_t>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THAT(Send(ToEmbeddingBagProto(ints)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params must be float16, bfloat16, float32 or float64")));

  BagCase decreasing = ErrorCase();
  decreasing.indices = MakeIndices(DataType::kInt64, {3}, {0, 1, 2});
  decreasing.offsets = MakeIndices(DataType::kInt64, {3}, {0, 2, 1});
  EXPECT_THAT(Send(ToEmbeddingBagProto(decreasing)),
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
  EXPECT_THAT(Send(ToEmbeddingBagProto(huge)), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace tensorcompute::server
