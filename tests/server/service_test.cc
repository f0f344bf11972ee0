// Correct answers through a real server: every dtype, Gather and GatherNd with every way of
// spelling axis and batch_dims, large outputs, compared with tests/testing's reference.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/dtype.h"
#include "core/tensor.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using core::DataType;
using ::tensorcompute::server::test_support::Call;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::TensorDebugString;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = Server::Start(TestOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = MakeStub(server_->port());
  }

  // Sends `request` and checks the answer against the reference (identical tensors, or the
  // same INVALID_ARGUMENT). Returns whether the answer was OK.
  bool ExpectAgreesWithReference(const GatherRequest& request) {
    const absl::StatusOr<core::Tensor> actual = Call(*stub_, request);
    const absl::StatusOr<core::Tensor> expected = RunReference(request);
    EXPECT_TRUE(AgreesWithReference(actual, expected)) << request.DebugString();
    return actual.ok();
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Stub> stub_;
};

TEST_F(ServiceTest, GatherAnswersEveryDtypeLikeTheReference) {
  Rng rng(301);
  int ok = 0;
  for (DataType dtype : core::kAllDataTypes) {
    for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
      for (int i = 0; i < 4; ++i) {
        ok += ExpectAgreesWithReference(RandomGatherRequest(dtype, index_dtype, rng));
      }
    }
  }
  EXPECT_GT(ok, 16 * 2 * 4 / 2);  // mostly valid requests: the comparison is not vacuous
}

TEST_F(ServiceTest, GatherNdAnswersEveryDtypeLikeTheReference) {
  Rng rng(302);
  int ok = 0;
  for (DataType dtype : core::kAllDataTypes) {
    for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
      for (int i = 0; i < 4; ++i) {
        ok += ExpectAgreesWithReference(RandomGatherNdRequest(dtype, index_dtype, rng));
      }
    }
  }
  EXPECT_GT(ok, 16 * 2 * 4 / 2);
}

TEST_F(ServiceTest, GatherAnswersTheTensorFlowDocExample) {
  // tf.gather([[1, 2, 3], [4, 5, 6]], [2, 0], axis=1) == [[3, 1], [6, 4]]
  GatherRequest request;
  request.params = MakeTensor<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  request.indices = MakeIndices(DataType::kInt64, {2}, {2, 0});
  request.axis = 1;
  const absl::StatusOr<core::Tensor> output = Call(*stub_, request);
  ASSERT_THAT(output, IsOk());
  const core::Tensor expected = MakeTensor<int32_t>({2, 2}, {3, 1, 6, 4});
  EXPECT_TRUE(core::IdenticalTensors(output->view(), expected.view()))
      << TensorDebugString(output->view());
}

TEST_F(ServiceTest, GatherHonoursAxisNegativeAxisUnsetAxisAndBatchDims) {
  Rng rng(303);
  const core::Shape params_shape = {2, 3, 4, 5};
  struct Case {
    std::optional<int64_t> axis;
    int64_t batch_dims;
    int64_t indexed_dim;        // params.shape[normalised axis]
    core::Shape indices_shape;  // starts with params.shape[:batch_dims]
  };
  const std::vector<Case> cases = {
      {2, 0, 4, {3, 2}},             // positive axis
      {-1, 0, 5, {6}},               // negative axis: the last dimension
      {std::nullopt, 0, 2, {4}},     // unset axis, batch_dims 0: axis 0
      {std::nullopt, 1, 3, {2, 4}},  // unset axis = batch_dims = 1
      {-2, 1, 4, {2, 3}},            // negative axis with batch_dims
      {3, -1, 5, {2, 3, 7}},         // negative batch_dims counts from rank(indices): 2
      {0, 0, 2, {}},                 // scalar indices drop the axis
  };
  for (const Case& c : cases) {
    GatherRequest request;
    request.params = RandomTensor(DataType::kFloat32, params_shape, rng);
    request.indices = RandomIndices(DataType::kInt64, c.indices_shape, {c.indexed_dim}, rng);
    request.axis = c.axis;
    request.batch_dims = c.batch_dims;
    const absl::StatusOr<core::Tensor> actual = Call(*stub_, request);
    ASSERT_THAT(actual, IsOk()) << request.DebugString();
    const absl::StatusOr<core::Tensor> expected = RunReference(request);
    ASSERT_THAT(expected, IsOk());
    EXPECT_TRUE(core::IdenticalTensors(actual->view(), expected->view())) << request.DebugString();
  }
}

TEST_F(ServiceTest, GatherNdHonoursDepthAndBatchDims) {
  Rng rng(304);
  const core::Shape params_shape = {2, 3, 4};
  struct Case {
    int64_t batch_dims;
    core::Shape indices_shape;  // last dimension = depth
    std::vector<int64_t> indexed_dims;
  };
  const std::vector<Case> cases = {
      {0, {5, 3}, {2, 3, 4}},  // full depth: elements
      {0, {2, 2, 1}, {2}},     // depth 1: slices of [3, 4]
      {1, {2, 4, 2}, {3, 4}},  // one batch dimension
      {2, {2, 3, 1}, {4}},     // two batch dimensions
  };
  for (const Case& c : cases) {
    GatherRequest request;
    request.nd = true;
    request.params = RandomTensor(DataType::kString, params_shape, rng);
    request.indices = RandomIndices(DataType::kInt32, c.indices_shape, c.indexed_dims, rng);
    request.batch_dims = c.batch_dims;
    const absl::StatusOr<core::Tensor> actual = Call(*stub_, request);
    ASSERT_THAT(actual, IsOk()) << request.DebugString();
    const absl::StatusOr<core::Tensor> expected = RunReference(request);
    ASSERT_THAT(expected, IsOk());
    EXPECT_TRUE(core::IdenticalTensors(actual->view(), expected->view())) << request.DebugString();
  }
}

TEST_F(ServiceTest, LargeOutputArrivesIntact) {
  // 48 MiB: split across the pool, written straight into the response, sent under the default
  // 64 MiB message limit.
  const int64_t row_bytes = int64_t{1} << 20;
  const int64_t rows = 48;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GatherResponse response;
  const grpc::Status status =
      stub_->Gather(&context, LargeGatherRequest(row_bytes, rows), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(IsLargeGatherAnswer(response, row_bytes, rows));
}

TEST_F(ServiceTest, MetricsCountAnswersByRpcAndCode) {
  GatherRequest gather;
  gather.params = MakeTensor<int32_t>({3}, {1, 2, 3});
  gather.indices = MakeIndices(DataType::kInt32, {2}, {0, 7});
  GatherRequest gather_nd;
  gather_nd.nd = true;
  gather_nd.params = MakeTensor<int32_t>({3}, {1, 2, 3});
  gather_nd.indices = MakeIndices(DataType::kInt32, {2, 1}, {2, -3});
  EXPECT_FALSE(Call(*stub_, gather).ok());  // index 7 is out of range
  EXPECT_THAT(Call(*stub_, gather_nd), IsOk());
  EXPECT_THAT(Call(*stub_, gather_nd), IsOk());

  const Metrics& metrics = server_->metrics();
  EXPECT_EQ(metrics.requests(Rpc::kGather, absl::StatusCode::kInvalidArgument), 1);
  EXPECT_EQ(metrics.requests(Rpc::kGather, absl::StatusCode::kOk), 0);
  EXPECT_EQ(metrics.requests(Rpc::kGatherNd, absl::StatusCode::kOk), 2);
  EXPECT_EQ(metrics.requests_total(), 3);
  EXPECT_EQ(metrics.batched_requests(), 3);  // the bad index is found while computing
}

}  // namespace
}  // namespace tensorcompute::server
