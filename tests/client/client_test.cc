// client::Client against real in-process servers: results equal the reference (core's, for
// EmbeddingBag), errors pass through verbatim, round-robin reaches every replica, retries move
// past a dead one.

#include "client/client.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/server.h"
#include "tests/client/test_client.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::Server;
using ::tensorcompute::server::ServerOptions;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Client> MakeClient(const std::string& target, int max_attempts = 1) {
  ClientOptions options = test_support::TestClientOptions(target);
  options.retry.max_attempts = max_attempts;
  return test_support::MakeClient(options);
}

std::string Local(int port) { return absl::StrCat("127.0.0.1:", port); }

TEST(SplitTargets, SplitsPlainListsAndKeepsUris) {
  EXPECT_THAT(*SplitTargets("a:1"), ElementsAre("a:1"));
  EXPECT_THAT(*SplitTargets(" a:1, b:2 ,"), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(*SplitTargets("ipv4:10.0.0.1:5,10.0.0.2:5"),
              ElementsAre("ipv4:10.0.0.1:5,10.0.0.2:5"));
  EXPECT_THAT(*SplitTargets("dns:///tc.default.svc:50051"),
              ElementsAre("dns:///tc.default.svc:50051"));
  EXPECT_THAT(SplitTargets(" , "),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target is empty")));
}

TEST(ClientCreate, RejectsBadOptions) {
  ClientOptions options;
  options.retry.max_attempts = 0;
  EXPECT_THAT(Client::Create(options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  options = ClientOptions();
  options.connections_per_target = 0;
  EXPECT_THAT(Client::Create(options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  options = ClientOptions();
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(Client::Create(options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Client, GatherAndGatherNdMatchTheReference) {
  auto server = StartServer();
  auto client = MakeClient(Local(server->port()));
  testing::Rng rng(7);
  for (int i = 0; i < 40; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype = i % 2 ? core::DataType::kInt32 : core::DataType::kInt64;
    testing::GatherRequest request = i % 3 == 0
                                         ? testing::RandomGatherNdRequest(dtype, index_dtype, rng)
                                         : testing::RandomGatherRequest(dtype, index_dtype, rng);
    SCOPED_TRACE(request.DebugString());
    absl::StatusOr<core::Tensor> got =
        request.nd
            ? client->GatherNd(request.params.view(), request.indices.view(), request.batch_dims)
            : client->Gather(request.params.view(), request.indices.view(), request.axis,
                             request.batch_dims);
    EXPECT_TRUE(testing::AgreesWithReference(got, testing::RunReference(request)));
  }
}

TEST(Client, PassesServerErrorsThrough) {
  auto server = StartServer();
  auto client = MakeClient(Local(server->port()));
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {2}, {0, 7});
  EXPECT_THAT(client->Gather(params.view(), indices.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1] = 7 is not in [-3, 3)"));
  EXPECT_THAT(client->Gather(params.view(), indices.view(), 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("axis")));
}

// The client's arguments for `c`, with views into it kept in *offsets and *weights.
EmbeddingBagArgs ArgsOf(const testing::EmbeddingBagCase& c,
                        std::optional<core::TensorView>* offsets,
                        std::optional<core::TensorView>* weights) {
  EmbeddingBagArgs args;
  args.mode = c.options.mode;
  args.include_last_offset = c.options.include_last_offset;
  args.padding_idx = c.options.padding_idx;
  if (c.offsets) args.offsets = &offsets->emplace(c.offsets->view());
  if (c.weights) args.per_sample_weights = &weights->emplace(c.weights->view());
  return args;
}

TEST(Client, EmbeddingBagMatchesCoreInlineAndByName) {
  auto server = StartServer();
  auto client = MakeClient(Local(server->port()));
  testing::Rng rng(2327);
  for (int i = 0; i < 40; ++i) {
    const testing::EmbeddingBagCase c = testing::RandomEmbeddingBagCase(rng);
    SCOPED_TRACE(c.DebugString());
    const absl::StatusOr<core::Tensor> expected = c.Expected();
    ASSERT_THAT(expected.status(), IsOk());
    std::optional<core::TensorView> offsets, weights;
    const EmbeddingBagArgs args = ArgsOf(c, &offsets, &weights);
    EXPECT_TRUE(testing::AgreesWithReference(
        client->EmbeddingBag(c.params.view(), c.indices.view(), args), expected));
    if (i % 4 == 0) {  // by name: the same bytes from a resident table
      PutOptions replace;
      replace.replace = true;
      ASSERT_THAT(client->PutTensor("table", c.params.view(), replace).status(), IsOk());
      EXPECT_TRUE(testing::AgreesWithReference(
          client->EmbeddingBagByName("table", c.indices.view(), args), expected));
    }
  }
}

TEST(Client, EmbeddingBagPassesServerErrorsThrough) {
  auto server = StartServer();
  auto client = MakeClient(Local(server->port()));
  const core::Tensor params = testing::MakeTensor<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt64, {3}, {0, 9, 1});
  const core::Tensor offsets = testing::MakeIndices(core::DataType::kInt64, {2}, {0, 1});
  const core::TensorView offsets_view = offsets.view();
  EmbeddingBagArgs args;
  args.offsets = &offsets_view;
  EXPECT_THAT(client->EmbeddingBag(params.view(), indices.view(), args).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1] = 9 is not in [-4, 4)"));
  const core::Tensor fixed = testing::MakeIndices(core::DataType::kInt64, {1, 2}, {0, 1});
  const core::Tensor ones = testing::MakeTensor<float>({1, 2}, {1, 1});
  const core::TensorView ones_view = ones.view();
  EmbeddingBagArgs max_weighted;
  max_weighted.mode = core::EmbeddingBagMode::kMax;
  max_weighted.per_sample_weights = &ones_view;
  EXPECT_THAT(client->EmbeddingBag(params.view(), fixed.view(), max_weighted).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mode MAX")));
  EXPECT_THAT(client->EmbeddingBagByName("nothing-here", fixed.view()).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nothing-here'")));
}

TEST(Client, HealthIsServing) {
  auto server = StartServer();
  auto client = MakeClient(Local(server->port()));
  absl::StatusOr<std::string> health = client->Health();
  ASSERT_THAT(health.status(), IsOk());
  EXPECT_EQ(*health, "SERVING");
  EXPECT_THAT(client->Health(5).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Client, UnreachableTargetIsUnavailable) {
  auto client = MakeClient("127.0.0.1:1");
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {0});
  EXPECT_THAT(client->Gather(params.view(), indices.view()).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(Client, ReceiveLimitIsEnforced) {
  auto server = StartServer();
  ClientOptions options;
  options.target = Local(server->port());
  options.max_message_bytes = 1024;
  auto client = Client::Create(options);
  ASSERT_THAT(client.status(), IsOk());
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices =
      testing::MakeIndices(core::DataType::kInt32, {1000}, std::vector<int64_t>(1000, 1));
  EXPECT_THAT((*client)->Gather(params.view(), indices.view()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// Two replicas behind one comma-separated target: calls alternate between them.
TEST(Client, RoundRobinReachesBothServers) {
  auto a = StartServer();
  auto b = StartServer();
  auto client = MakeClient(absl::StrCat(Local(a->port()), ",", Local(b->port())));
  ASSERT_EQ(client->targets().size(), 2u);
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {2});
  for (int i = 0; i < 10; ++i) {
    auto out = client->Gather(params.view(), indices.view());
    ASSERT_THAT(out.status(), IsOk());
    EXPECT_EQ(out->values<int32_t>()[0], 30);
  }
  EXPECT_EQ(a->metrics().requests_total(), 5);
  EXPECT_EQ(b->metrics().requests_total(), 5);
}

// One gRPC URI naming both replicas: gRPC's round_robin policy spreads calls once both
// connections are up.
TEST(Client, RoundRobinPolicyOverOneUriReachesBothServers) {
  auto a = StartServer();
  auto b = StartServer();
  auto client = MakeClient(absl::StrCat("ipv4:", Local(a->port()), ",", Local(b->port())));
  ASSERT_EQ(client->targets().size(), 1u);
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {2});
  EXPECT_TRUE(WaitFor([&] {
    EXPECT_THAT(client->Gather(params.view(), indices.view()).status(), IsOk());
    return a->metrics().requests_total() > 0 && b->metrics().requests_total() > 0;
  }));
}

// One replica is gone (nothing listens on port 1): without retries about half the calls fail
// with UNAVAILABLE; with two attempts each failed one moves to the live replica.
TEST(Client, RetriesMovePastADeadReplica) {
  auto live = StartServer();
  const std::string target = absl::StrCat("127.0.0.1:1,", Local(live->port()));
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {2});

  auto no_retry = MakeClient(target, 1);
  int unavailable = 0;
  for (int i = 0; i < 6; ++i) {
    unavailable += no_retry->Gather(params.view(), indices.view()).status().code() ==
                   absl::StatusCode::kUnavailable;
  }
  EXPECT_EQ(unavailable, 3);

  auto retrying = MakeClient(target, 2);
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(retrying->Gather(params.view(), indices.view()).status(), IsOk());
  }
}

// Client-side health checking: once a replica starts draining (health NOT_SERVING, notice
// period before it closes), gRPC's round_robin stops picking it. Every call then goes to the
// other replica and succeeds without a retry, and the draining one sees none of them.
TEST(Client, DrainingReplicaIsSkippedWithoutRetries) {
  ServerOptions draining_options = TestOptions();
  draining_options.drain_notice = absl::Seconds(5);
  auto draining = Server::Start(draining_options);
  ASSERT_THAT(draining.status(), IsOk());
  auto live = StartServer();
  auto client =
      MakeClient(absl::StrCat("ipv4:", Local((*draining)->port()), ",", Local(live->port())));
  const core::Tensor params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {2});
  ASSERT_TRUE(WaitFor([&] {  // both connections up and used
    EXPECT_THAT(client->Gather(params.view(), indices.view()).status(), IsOk());
    return (*draining)->metrics().requests_total() > 0 && live->metrics().requests_total() > 0;
  }));

  std::thread drain([&] { (*draining)->Drain(); });
  // Health itself still asks the draining server (not skipped like calls): the answer is
  // NOT_SERVING, not UNAVAILABLE.
  auto direct = MakeClient(Local((*draining)->port()));
  EXPECT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> health = direct->Health();
    return health.ok() && *health == "NOT_SERVING";
  }));
  absl::SleepFor(absl::Milliseconds(500));  // the client's health watch hears it too
  const int64_t drained_before = (*draining)->metrics().requests_total();
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT(client->Gather(params.view(), indices.view()).status(), IsOk());
  }
  EXPECT_EQ((*draining)->metrics().requests_total(), drained_before);
  drain.join();
}

TEST(Client, SendsTheAuthToken) {
  const std::string tokens = ::testing::TempDir() + "/client_test_tokens";
  std::ofstream(tokens, std::ios::trunc) << "# tokens\nclient-token\n";
  ServerOptions server_options = TestOptions();
  server_options.auth_token_file = tokens;
  auto server = Server::Start(server_options);
  ASSERT_THAT(server.status(), IsOk());
  const std::vector<int32_t> params_values = {10, 20, 30}, index_values = {2};
  const core::Tensor params = core::Tensor::FromValues<int32_t>(core::DataType::kInt32, {3},
                                                                absl::MakeConstSpan(params_values));
  const core::Tensor indices = core::Tensor::FromValues<int32_t>(core::DataType::kInt32, {1},
                                                                 absl::MakeConstSpan(index_values));
  ClientOptions options;
  options.target = Local((*server)->port());
  auto without = Client::Create(options);
  ASSERT_THAT(without.status(), IsOk());
  EXPECT_THAT((*without)->Gather(params.view(), indices.view()).status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Bearer")));
  absl::StatusOr<std::string> health = (*without)->Health();
  ASSERT_THAT(health.status(), IsOk());
  EXPECT_EQ(*health, "SERVING");
  options.auth_token = "client-token";
  auto with = Client::Create(options);
  ASSERT_THAT(with.status(), IsOk());
  EXPECT_THAT((*with)->Gather(params.view(), indices.view()).status(), IsOk());
}

TEST(Client, TlsOptionsAreChecked) {
  ClientOptions options;
  options.tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(Client::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need tls enabled")));
  options.tls.enabled = true;
  EXPECT_THAT(Client::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls ca_file /nonexistent/ca.pem: cannot read")));
  options.tls.ca_file = "";
  options.tls.cert_file = "/nonexistent/client.pem";
  EXPECT_THAT(Client::Create(options).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                         HasSubstr("both cert_file and key_file")));
  options.auth_token = "two\nlines";
  options.tls = TlsOptions();
  EXPECT_THAT(Client::Create(options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tensorcompute::client
