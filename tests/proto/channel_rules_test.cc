// The rules that the clients and the server share about gRPC itself: status conversion both
// ways, compression names, the channels' service config (which gRPC must accept), and a
// method's index in its service.

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "proto/grpc_compression.h"
#include "proto/grpc_status.h"
#include "proto/method_index.h"
#include "proto/service_config.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::proto {
namespace {

using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

TEST(GrpcStatus, EveryCodeAndMessageGoesBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "why it failed");
    const grpc::Status wire = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "why it failed");
    EXPECT_EQ(FromGrpcStatus(wire), status);
  }
}

TEST(GrpcStatus, LongMessagesAreCutOnTheWayOut) {
  const grpc::Status wire =
      ToGrpcStatus(absl::InvalidArgumentError(std::string(kMaxErrorMessageBytes + 100, 'x')));
  EXPECT_EQ(wire.error_message().size(), kMaxErrorMessageBytes);
  EXPECT_EQ(wire.error_message().substr(kMaxErrorMessageBytes - 3), "...");
}

TEST(GrpcCompression, TheThreeNamesAndNothingElse) {
  EXPECT_THAT(CompressionNames(), ::testing::ElementsAre("none", "gzip", "deflate"));
  EXPECT_EQ(*ParseCompression("none"), GRPC_COMPRESS_NONE);
  EXPECT_EQ(*ParseCompression("gzip"), GRPC_COMPRESS_GZIP);
  EXPECT_EQ(*ParseCompression("deflate"), GRPC_COMPRESS_DEFLATE);
  EXPECT_THAT(ParseCompression("brotli").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("compression 'brotli' is not one of none, gzip, deflate")));
  EXPECT_TRUE(CheckCompression(GRPC_COMPRESS_GZIP).ok());
  EXPECT_THAT(CheckCompression(GRPC_COMPRESS_ALGORITHMS_COUNT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none, gzip, deflate")));
}

TEST(ServiceConfig, RoundRobinHealthCheckedAndRetriedWhenAsked) {
  const nlohmann::json plain = nlohmann::json::parse(ServiceConfigJson(false));
  EXPECT_EQ(plain.dump(), R"({"loadBalancingConfig":[{"round_robin":{}}]})");
  const nlohmann::json checked = nlohmann::json::parse(ServiceConfigJson(true));
  EXPECT_EQ(checked["healthCheckConfig"]["serviceName"], "tensorcompute.v1.TensorCompute");
  EXPECT_FALSE(checked.contains("methodConfig"));
  const nlohmann::json retried = nlohmann::json::parse(ServiceConfigJson(true, ChannelRetry{}));
  const nlohmann::json& policy = retried["methodConfig"][0]["retryPolicy"];
  EXPECT_EQ(retried["methodConfig"][0]["name"][0]["service"], "tensorcompute.v1.TensorCompute");
  EXPECT_EQ(policy["maxAttempts"], 5);
  EXPECT_EQ(policy["initialBackoff"], "0.02s");
  EXPECT_EQ(policy["maxBackoff"], "0.5s");
  EXPECT_EQ(policy["backoffMultiplier"], 2);
  EXPECT_EQ(policy["retryableStatusCodes"], nlohmann::json::array({"UNAVAILABLE"}));
}

TEST(ServiceConfig, GrpcAcceptsEveryForm) {
  // A service config gRPC rejects leaves the channel failing every call with its parse error.
  for (const std::string& config : {ServiceConfigJson(false), ServiceConfigJson(true),
                                    ServiceConfigJson(true, ChannelRetry{})}) {
    grpc::ChannelArguments args;
    args.SetServiceConfigJSON(config);
    auto channel =
        grpc::CreateCustomChannel("127.0.0.1:1", grpc::InsecureChannelCredentials(), args);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GatherRequest request;
    v1::GatherResponse reply;
    const grpc::Status status =
        v1::TensorCompute::NewStub(channel)->Gather(&context, request, &reply);
    // Nothing listens there: UNAVAILABLE (connection refused) or DEADLINE_EXCEEDED, never
    // an error about the config.
    EXPECT_THAT(status.error_message(), ::testing::Not(HasSubstr("service config"))) << config;
    EXPECT_NE(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << config;
  }
}

TEST(MethodIndex, EachMethodItsPlaceInTheService) {
  const std::string service(v1::TensorCompute::service_full_name());
  const auto* descriptor =
      v1::GatherRequest::descriptor()->file()->FindServiceByName("TensorCompute");
  ASSERT_NE(descriptor, nullptr);
  for (int i = 0; i < descriptor->method_count(); ++i) {
    EXPECT_EQ(MethodIndex(service, descriptor->method(i)->name()), i);
  }
  EXPECT_EQ(MethodIndex(service, "Gather"), 0);  // the first, as the .proto has it
}

TEST(MethodIndexDeathTest, AnUnknownMethodOrServiceAborts) {
  EXPECT_DEATH(MethodIndex(v1::TensorCompute::service_full_name(), "Gahter"),
               "no method Gahter in service tensorcompute.v1.TensorCompute");
  EXPECT_DEATH(MethodIndex("no.Such", "Gather"), "no method Gather in service no.Such");
}

}  // namespace
}  // namespace tensorcompute::proto
