// The server's choice of device (ServerOptions::device). Everywhere: "gpu" without a usable
// GPU fails to start with a clear message, "auto" without one serves from the CPU, and an
// unknown device is INVALID_ARGUMENT. With a GPU (skipped, visibly, without one): a server
// started with device "gpu" answers random Gather/GatherNd requests of every dtype exactly as
// the reference does (strings through the CPU fallback), gives the CPU's bad-index message,
// returns large outputs intact (chunked through the staging buffers), and reports SERVING;
// and a GPU server and a CPU server give the same bytes (or the same error, word for word) for
// random Gather, GatherNd and EmbeddingBag requests, inline and by name.

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/cuda/cuda_executor.h"
#include "core/dtype.h"
#include "proto/tensor_codec.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::Call;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::PutTensor;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::ToEmbeddingBagProto;
using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::EmbeddingBagCase;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomEmbeddingBagCase;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomRequestOptions;
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

// The same request to a CPU server and to the GPU server: the same status (code and words)
// and, when OK, the same output bytes.
class CpuAndGpuServersTest : public GpuServerTest {
 protected:
  void SetUp() override {
    GpuServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto cpu = Server::Start(WithDevice("cpu"));
    ASSERT_THAT(cpu, IsOk());
    cpu_ = *std::move(cpu);
    cpu_stub_ = MakeStub(cpu_->port());
  }

  template <typename Request, typename Response, typename Method>
  ::testing::AssertionResult Agree(const Request& request, Method method) {
    absl::StatusOr<core::Tensor> answers[2];
    test_support::Stub* stubs[2] = {cpu_stub_.get(), stub_.get()};
    for (int i = 0; i < 2; ++i) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      Response response;
      const grpc::Status status = (stubs[i]->*method)(&context, request, &response);
      answers[i] = status.ok() ? proto::FromProto(response.output(), "output", INT64_MAX)
                               : absl::StatusOr<core::Tensor>(ToAbsl(status));
    }
    const absl::StatusOr<core::Tensor>& cpu = answers[0];
    const absl::StatusOr<core::Tensor>& gpu = answers[1];
    if (cpu.ok() != gpu.ok() || (!cpu.ok() && cpu.status() != gpu.status())) {
      return ::testing::AssertionFailure() << "CPU: " << cpu.status() << "\nGPU: " << gpu.status();
    }
    if (cpu.ok() && !core::IdenticalTensors(cpu->view(), gpu->view())) {
      return ::testing::AssertionFailure() << "the outputs differ";
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<Server> cpu_;
  std::unique_ptr<test_support::Stub> cpu_stub_;
};

TEST_F(CpuAndGpuServersTest, RandomGathersAgreeByteForByte) {
  Rng rng(0x6b2);
  for (int i = 0; i < 1200; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype =
        (i / 7) % 2 ? core::DataType::kInt64 : core::DataType::kInt32;
    RandomRequestOptions options;
    if (i % 10 == 3) {  // large outputs (up to 16 MiB): through several staging chunks
      options.max_params_rank = 3;
      options.max_indices_rank = 2;  // bounds the indices where the output is empty
      options.max_dim = 1024;
      options.max_elements = int64_t{1} << 20;
    }
    if (i % 10 == 5) options.zero_probability = 0.3;  // empty params, indices and outputs
    GatherRequest req = i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng, options)
                              : RandomGatherRequest(dtype, index_dtype, rng, options);
    if (i % 4 == 1 && req.indices.num_elements() > 0) InjectOutOfRangeIndices(req, 3, rng);
    if (req.nd) {
      ASSERT_TRUE((Agree<v1::GatherNdRequest, v1::GatherNdResponse>(
          test_support::ToGatherNdProto(req), &test_support::Stub::GatherNd)))
          << "case " << i << ": " << req.DebugString();
    } else {
      ASSERT_TRUE((Agree<v1::GatherRequest, v1::GatherResponse>(test_support::ToGatherProto(req),
                                                                &test_support::Stub::Gather)))
          << "case " << i << ": " << req.DebugString();
    }
  }
}

TEST_F(CpuAndGpuServersTest, RandomEmbeddingBagsAgreeByteForByteInlineAndByName) {
  Rng rng(0xba9);
  for (int i = 0; i < 300; ++i) {
    EmbeddingBagCase c = RandomEmbeddingBagCase(rng);
    if (i % 5 == 2 && c.indices.num_elements() > 0) {  // a bad index: the same error
      testing::SetIndexValue(c.indices, testing::UniformInt(rng, 0, c.indices.num_elements() - 1),
                             c.params.shape()[0] + 3);
    }
    ASSERT_TRUE((Agree<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(
        ToEmbeddingBagProto(c), &test_support::Stub::EmbeddingBag)))
        << "case " << i << " inline: " << c.DebugString();
    ASSERT_THAT(PutTensor(*cpu_stub_, "table", c.params), IsOk());
    ASSERT_THAT(PutTensor(*stub_, "table", c.params), IsOk());
    ASSERT_TRUE((Agree<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(
        ToEmbeddingBagProto(c, "table"), &test_support::Stub::EmbeddingBag)))
        << "case " << i << " by name: " << c.DebugString();
  }
}

}  // namespace
}  // namespace tensorcompute::server
