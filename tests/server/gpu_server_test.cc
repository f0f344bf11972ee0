// The server's choice of device (ServerOptions::device). Everywhere: "gpu" without a usable
// GPU fails to start with a clear message, "auto" without one serves from the CPU, and an
// unknown device is INVALID_ARGUMENT. With a GPU (skipped, visibly, without one): a server
// started with device "gpu" answers random Gather/GatherNd requests of every dtype exactly as
// the reference does (strings through the CPU fallback), gives the CPU's bad-index message,
// returns large outputs intact (chunked through the staging buffers), and reports SERVING.
// (A CPU and a GPU server answering alike: cpu_gpu_agreement_test.cc.)

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/cuda/cuda_executor.h"
#include "core/dtype.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::Call;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

ServerOptions WithDevice(const std::string& device) {
  ServerOptions options = TestOptions();
  options.device = device;
  return options;
}

TEST(ServerDevice, GpuWithoutAUsableGpuFailsToStart) {
  if (cuda::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  const auto server = Server::Start(WithDevice("gpu"));
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kUnimplemented));
  EXPECT_THAT(server.status().message(), HasSubstr("--device=gpu: no usable GPU"));
}

TEST(ServerDevice, AutoServesFromTheCpuWithoutAGpu) {
  auto server = Server::Start(WithDevice("auto"));
  ASSERT_THAT(server, IsOk());
  if (cuda::CudaDeviceCount() == 0) {
    EXPECT_EQ((*server)->device(), "cpu");
  } else {
    EXPECT_THAT((*server)->device(), StartsWith("cuda:"));
  }
  auto stub = MakeStub((*server)->port());
  EXPECT_THAT(SendGather(*stub, SmallGather()), IsOk());
}

TEST(ServerDevice, CpuNeverUsesTheGpu) {
  auto server = Server::Start(WithDevice("cpu"));
  ASSERT_THAT(server, IsOk());
  EXPECT_EQ((*server)->device(), "cpu");
  EXPECT_EQ((*server)->device_description(), "cpu");
}

TEST(ServerDevice, AnUnknownDeviceIsInvalidArgument) {
  EXPECT_THAT(Server::Start(WithDevice("tpu")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu")));
  ServerOptions no_streams = WithDevice("auto");
  no_streams.gpu_streams = 0;
  EXPECT_THAT(Server::Start(no_streams), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- with a GPU ----

class GpuServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::CudaDeviceDescription(0).status().message();
    }
    ServerOptions options = WithDevice("gpu");
    options.gpu_staging_bytes = int64_t{1} << 20;  // so that a few MiB are chunked
    auto server = Server::Start(options);
    ASSERT_THAT(server, IsOk());
    server_ = *std::move(server);
    stub_ = MakeStub(server_->port());
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<test_support::Stub> stub_;
};

TEST_F(GpuServerTest, RunsOnTheGpu) {
  EXPECT_THAT(server_->device(), StartsWith("cuda:"));
  EXPECT_THAT(server_->device_description(), HasSubstr("sm_"));
}

TEST_F(GpuServerTest, RandomRequestsOfEveryDtypeMatchTheReference) {
  Rng rng(0x9e0);
  for (int i = 0; i < 400; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype =
        (i / 16) % 2 ? core::DataType::kInt64 : core::DataType::kInt32;
    GatherRequest req = i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng)
                              : RandomGatherRequest(dtype, index_dtype, rng);
    if (i % 5 == 4 && req.indices.num_elements() > 0) InjectOutOfRangeIndices(req, 2, rng);
    ASSERT_TRUE(AgreesWithReference(Call(*stub_, req), RunReference(req)))
        << "case " << i << ": " << req.DebugString();
  }
}

TEST_F(GpuServerTest, LargeOutputsArriveIntact) {
  constexpr int64_t kRowBytes = int64_t{1} << 20;
  constexpr int64_t kRows = 24;  // 24 MiB out, through 512 KiB staging halves
  v1::GatherResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  const grpc::Status status =
      stub_->Gather(&context, LargeGatherRequest(kRowBytes, kRows), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(IsLargeGatherAnswer(response, kRowBytes, kRows));
}

}  // namespace
}  // namespace tensorcompute::server
