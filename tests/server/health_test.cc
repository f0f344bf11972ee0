// The standard gRPC health service (grpc.health.v1): SERVING once Start returns, NOT_SERVING
// as soon as a drain begins.

#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

#include "server/server.h"
#include "tests/server/test_server.h"

namespace tensorcompute::server {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::tensorcompute::server::test_support::Backlog;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::TestOptions;

// Check(service) on a new connection: the status, or UNKNOWN with the RPC's error in *error.
HealthCheckResponse::ServingStatus Check(int port, grpc::Status* error = nullptr,
                                         const std::string& service = "") {
  auto health = Health::NewStub(MakeChannel(port));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  if (error != nullptr) *error = status;
  return status.ok() ? response.status() : HealthCheckResponse::UNKNOWN;
}

TEST(Health, ReportsServingOnceStarted) {
  auto server = Server::Start(TestOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::Status error;
  EXPECT_EQ(Check((*server)->port(), &error), HealthCheckResponse::SERVING)
      << error.error_message();
}

TEST(Health, ReportsTheServiceByName) {
  auto server = Server::Start(TestOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::Status error;
  EXPECT_EQ(Check((*server)->port(), &error, "tensorcompute.v1.TensorCompute"),
            HealthCheckResponse::SERVING)
      << error.error_message();
  EXPECT_EQ(Check((*server)->port(), &error, "no.such.Service"), HealthCheckResponse::UNKNOWN);
  EXPECT_EQ(error.error_code(), grpc::StatusCode::NOT_FOUND);
  (*server)->Drain();
}

TEST(Health, WatchTurnsNotServingWhenTheDrainBegins) {
  // Accepted work on a one-thread executor keeps the drain going for a while.
  ServerOptions options = TestOptions();
  options.cpu_threads = 1;
  options.max_batch_size = 1;
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto health = Health::NewStub(MakeChannel(port));
  grpc::ClientContext watch_context;
  watch_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto watch = health->Watch(&watch_context, HealthCheckRequest());
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  auto stub = MakeStub(port);
  Backlog accepted(*stub, **server, 8);
  std::thread drain([&] { (*server)->Drain(); });
  ASSERT_TRUE(watch->Read(&update)) << watch->Finish().error_message();
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  // A new Check during the drain: NOT_SERVING, or refused outright once gRPC shuts down.
  grpc::Status error;
  const HealthCheckResponse::ServingStatus during = Check(port, &error);
  EXPECT_TRUE(during == HealthCheckResponse::NOT_SERVING ||
              error.error_code() == grpc::StatusCode::UNAVAILABLE)
      << during << " " << error.error_message();

  EXPECT_EQ(accepted.WaitAllCorrect(), 8) << accepted.first_failure();
  watch_context.TryCancel();
  drain.join();
}

}  // namespace
}  // namespace tensorcompute::server
