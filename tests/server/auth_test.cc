// Bearer tokens (TokenAuth, ServerOptions::auth_token_file), the health-only listener
// (ServerOptions::health_listen) and the security options' validation, on in-process servers.
// TLS handshakes themselves are tested end to end with certificates made by openssl
// (tests/client/security_test.py).

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

#include "server/admission/peer_token.h"
#include "server/admission/token_auth.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A file under the test's temporary directory holding `text`; returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/auth_test_", name);
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

// Gather(SmallGather()) with `authorization` as the metadata (none when empty).
absl::Status Gather(int port, const std::string& authorization) {
  auto stub = MakeStub(port);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::GatherResponse response;
  return ToAbsl(stub->Gather(&context, SmallGather(), &response));
}

std::string CheckHealth(int port, const std::string& service = "") {
  auto health = Health::NewStub(MakeChannel(port));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  if (!status.ok()) return absl::StrCat("error ", status.error_code());
  return HealthCheckResponse::ServingStatus_Name(response.status());
}

// A unary call of `method` with an empty body; its status code.
grpc::StatusCode RawCall(int port, const std::string& method) {
  grpc::GenericStub stub(MakeChannel(port));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Slice empty;  // an empty but valid message (a default ByteBuffer is none)
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status.error_code();
}

TEST(TokenAuth, ReadsOneTokenPerLineSkippingBlanksAndComments) {
  const std::string path = WriteFile("tokens", "# comment\n\n  alpha  \r\nbeta\n#gamma\n");
  auto tokens = TokenAuth::ReadTokens(path);
  ASSERT_THAT(tokens.status(), IsOk());
  EXPECT_THAT(*tokens, ElementsAre("alpha", "beta"));
  EXPECT_THAT(TokenAuth::ReadTokens(WriteFile("none", "# only\n\n")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no token")));
  EXPECT_THAT(TokenAuth::ReadTokens("/nonexistent/tokens").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot read")));
}

TEST(TokenAuth, AcceptsOnlyListedBearerTokens) {
  auto auth = TokenAuth::Create(WriteFile("check", "alpha\nbeta\n"));
  ASSERT_THAT(auth.status(), IsOk());
  EXPECT_THAT((*auth)->Check("Bearer alpha"), IsOk());
  EXPECT_THAT((*auth)->Check("Bearer beta"), IsOk());
  EXPECT_THAT((*auth)->Check("bearer beta"), IsOk());  // the scheme is case-insensitive
  EXPECT_THAT((*auth)->Check(std::nullopt),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("missing credentials: expected the call metadata "
                                 "\"authorization: Bearer <token>\"")));
  for (const char* wrong : {"Bearer alph", "Bearer alphaa", "Bearer ", "Bearer Alpha"}) {
    EXPECT_THAT((*auth)->Check(wrong),
                StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("invalid token")))
        << wrong;
  }
  const absl::Status basic = (*auth)->Check("Basic c2VjcmV0LXdyb25n");
  EXPECT_THAT(basic, StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not a Bearer")));
  EXPECT_THAT(std::string(basic.message()), Not(HasSubstr("c2VjcmV0LXdyb25n")));
}

TEST(TokenAuth, ReloadReplacesTokensAndAFailedReloadKeepsThem) {
  const std::string path = WriteFile("reload", "old\n");
  auto auth = TokenAuth::Create(path);
  ASSERT_THAT(auth.status(), IsOk());
  WriteFile("reload", "new\nnewer\n");
  absl::StatusOr<int> reloaded = (*auth)->Reload();
  ASSERT_THAT(reloaded.status(), IsOk());
  EXPECT_EQ(*reloaded, 2);
  EXPECT_THAT((*auth)->Check("Bearer old"), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT((*auth)->Check("Bearer new"), IsOk());
  WriteFile("reload", "\n");
  EXPECT_THAT((*auth)->Reload().status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*auth)->Check("Bearer newer"), IsOk());
}

TEST(PeerToken, SendsTheFilesFirstTokenAndAFailedReloadKeepsIt) {
  const std::string path = WriteFile("peer", "# the shards' token first\n  first \nsecond\n");
  auto token = PeerToken::Create(path);
  ASSERT_THAT(token.status(), IsOk());
  EXPECT_EQ((*token)->Authorization(), "Bearer first");
  WriteFile("peer", "next\n");
  ASSERT_THAT((*token)->Reload(), IsOk());
  EXPECT_EQ((*token)->Authorization(), "Bearer next");
  WriteFile("peer", "# none\n");
  EXPECT_THAT((*token)->Reload(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard_peer_token_file=")));
  EXPECT_EQ((*token)->Authorization(), "Bearer next");
  EXPECT_THAT(PeerToken::Create("/nonexistent/peer").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shard_peer_token_file=/nonexistent/peer: cannot read")));
}

TEST(ServerAuth, RequiresTheTokenOnEveryRpcButHealthAndCountsRefusals) {
  ServerOptions options = TestOptions();
  options.auth_token_file = WriteFile("server", "# rotate by listing both\ns3cret\n");
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());
  const int port = (*server)->port();
  EXPECT_THAT(Gather(port, ""), StatusIs(absl::StatusCode::kUnauthenticated,
                                         HasSubstr("authorization: Bearer <token>")));
  EXPECT_THAT(Gather(port, "Bearer wrong"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("invalid token")));
  EXPECT_THAT(Gather(port, "Bearer s3cret"), IsOk());
  EXPECT_EQ((*server)->metrics().requests(Rpc::kGather, absl::StatusCode::kUnauthenticated), 2);
  EXPECT_EQ((*server)->metrics().requests(Rpc::kGather, absl::StatusCode::kOk), 1);
  EXPECT_EQ(CheckHealth(port), "SERVING");
  // Reflection cannot check tokens, so it is not served.
  EXPECT_EQ(RawCall(port, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            grpc::StatusCode::UNIMPLEMENTED);

  WriteFile("server", "n3w\n");
  absl::StatusOr<int> reloaded = (*server)->ReloadAuthTokens();
  ASSERT_THAT(reloaded.status(), IsOk());
  EXPECT_EQ(*reloaded, 1);
  EXPECT_THAT(Gather(port, "Bearer s3cret"), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Gather(port, "Bearer n3w"), IsOk());
}

TEST(ServerAuth, ReloadWithoutATokenFileIsAFailedPrecondition) {
  auto server = Server::Start(TestOptions());
  ASSERT_THAT(server.status(), IsOk());
  EXPECT_THAT((*server)->ReloadAuthTokens().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Gather((*server)->port(), ""), IsOk());  // no tokens needed
}

TEST(HealthListener, ServesHealthOnlyAndMirrorsTheDrain) {
  ServerOptions options = TestOptions();
  options.health_listen = "127.0.0.1:0";
  options.drain_notice = absl::Seconds(2);
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());
  const int port = (*server)->health_port();
  ASSERT_NE(port, 0);
  EXPECT_EQ(CheckHealth(port), "SERVING");
  EXPECT_EQ(CheckHealth(port, "tensorcompute.v1.TensorCompute"), "SERVING");
  EXPECT_THAT(Gather(port, ""),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("serves grpc.health.v1 only")));
  EXPECT_EQ(RawCall(port, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            grpc::StatusCode::UNIMPLEMENTED);
  std::thread drain([&] { (*server)->Drain(); });
  EXPECT_TRUE(test_support::WaitFor([&] { return CheckHealth(port) == "NOT_SERVING"; }));
  EXPECT_EQ(CheckHealth(port, "tensorcompute.v1.TensorCompute"), "NOT_SERVING");
  drain.join();
}

TEST(Listeners, APortAnotherServerHoldsFailsStartRatherThanBeingShared) {
  // gRPC's own listener would set SO_REUSEPORT; grpc_acceptor.h binds without it: a second
  // server on a port would otherwise start and take half of the first one's connections.
  ServerOptions first_options = TestOptions();
  first_options.health_listen = "127.0.0.1:0";
  auto first = Server::Start(first_options);
  ASSERT_THAT(first.status(), IsOk());
  ServerOptions same_port = TestOptions();
  same_port.listen = absl::StrCat("127.0.0.1:", (*first)->port());
  EXPECT_THAT(Server::Start(same_port).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot listen on")));
  ServerOptions same_health_port = TestOptions();
  same_health_port.health_listen = absl::StrCat("127.0.0.1:", (*first)->health_port());
  EXPECT_THAT(Server::Start(same_health_port).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(health_listen)")));
  EXPECT_THAT(Gather((*first)->port(), ""), IsOk());
  EXPECT_EQ(CheckHealth((*first)->health_port()), "SERVING");
}

TEST(SecurityOptions, BadCombinationsAndFilesFailStart) {
  auto start = [](auto edit) {
    ServerOptions options = TestOptions();
    edit(options);
    return Server::Start(options).status();
  };
  EXPECT_THAT(start([](ServerOptions& o) { o.tls_cert = "/nonexistent/cert.pem"; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("both tls_cert and tls_key")));
  EXPECT_THAT(start([](ServerOptions& o) { o.tls_client_ca = "/nonexistent/ca.pem"; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
  EXPECT_THAT(start([](ServerOptions& o) {
                o.tls_cert = "/nonexistent/cert.pem";
                o.tls_key = "/nonexistent/key.pem";
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls_cert=/nonexistent/cert.pem: cannot read")));
  const std::string junk = WriteFile("junk.pem", "not a certificate\n");
  EXPECT_THAT(start([&](ServerOptions& o) {
                o.tls_cert = junk;
                o.tls_key = junk;
              }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no PEM certificate")));
  EXPECT_THAT(start([](ServerOptions& o) { o.auth_token_file = "/nonexistent/tokens"; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auth_token_file")));
}

}  // namespace
}  // namespace tensorcompute::server
