// --max_connection_age: gRPC sends GOAWAY to connections older than the age, so that clients
// behind one virtual address (a Kubernetes ClusterIP) reconnect and can land on new replicas.
// The channel is seen to leave READY by itself, and the next call reconnects and succeeds.

#include <memory>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/channel.h"
#include "gtest/gtest.h"

#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;

TEST(ConnectionAgeTest, OldConnectionsAreClosedAndClientsReconnect) {
  ServerOptions options = TestOptions();
  options.max_connection_age = absl::Milliseconds(300);
  options.max_connection_age_grace = absl::Milliseconds(300);
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());

  std::shared_ptr<grpc::Channel> channel = MakeChannel((*server)->port());
  auto stub = v1::TensorCompute::NewStub(channel);
  ASSERT_THAT(SendGather(*stub, SmallGather()), IsOk());
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  // GOAWAY at 300 ms (+-10%), closed at most 300 ms later: the channel goes IDLE.
  EXPECT_TRUE(
      WaitFor([&] { return channel->GetState(false) != GRPC_CHANNEL_READY; }, absl::Seconds(10)));
  EXPECT_THAT(SendGather(*stub, SmallGather()), IsOk());  // a new connection
}

TEST(ConnectionAgeTest, ByDefaultConnectionsStay) {
  auto server = Server::Start(TestOptions());
  ASSERT_THAT(server.status(), IsOk());
  std::shared_ptr<grpc::Channel> channel = MakeChannel((*server)->port());
  auto stub = v1::TensorCompute::NewStub(channel);
  ASSERT_THAT(SendGather(*stub, SmallGather()), IsOk());
  absl::SleepFor(absl::Seconds(1.5));
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
}

TEST(ConnectionAgeTest, NegativeAgeIsRefused) {
  ServerOptions options = TestOptions();
  options.max_connection_age = absl::Seconds(-1);
  EXPECT_THAT(Server::Start(options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tensorcompute::server
