// The load tester against real in-process servers: every measured call is counted once, by
// its code; invalid requests are answered INVALID_ARGUMENT; an overloaded server's
// UNAVAILABLE is counted, not fatal; the JSON report parses; EmbeddingBag calls are answered,
// inline or by name. (The requests themselves: load_requests_test.cc.)

#include "client/load_tester.h"

#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "client/client.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::Server;
using ::tensorcompute::server::ServerOptions;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Key;
using ::testing::Pair;

std::vector<std::shared_ptr<grpc::Channel>> Channels(const std::vector<int>& ports) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < static_cast<int>(ports.size()); ++i) {
    channels.push_back(MakeChannel("127.0.0.1:" + std::to_string(ports[i]), 64 << 20, 1000 + i));
  }
  return channels;
}

int64_t Answered(const LoadReport& r) {
  int64_t n = 0;
  for (const auto& [code, count] : r.by_code) n += count;
  return n;
}

LoadOptions Requests(int64_t n, int concurrency) {
  LoadOptions options;
  options.requests = n;
  options.concurrency = concurrency;
  options.warmup = absl::ZeroDuration();
  return options;
}

TEST(RunLoad, EmbeddingBagCallsAreAnsweredInlineAndByName) {
  auto server = StartServer();
  LoadRequestSpec spec;
  spec.op = LoadOp::kEmbeddingBag;
  spec.params_shape = {300, 32};
  spec.num_indices = 64;
  spec.bag_size = 16;
  spec.invalid_fraction = 0.5;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  auto report = RunLoad(Channels({server->port()}), *requests, Requests(64, 4));
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("INVALID_ARGUMENT", 32), Pair("OK", 32)));
  EXPECT_EQ(report->unexpected, 0);
  EXPECT_EQ(server->metrics().requests_total(), 64);
  // Each answer holds 4 bags of 32 floats (and a few bytes of framing), not 64 rows.
  EXPECT_GE(report->bytes_received, 32 * 4 * 32 * 4);
  EXPECT_LT(report->bytes_received, 32 * 64 * 32 * 4);

  ClientOptions client_options;
  client_options.target = "127.0.0.1:" + std::to_string(server->port());
  auto client = Client::Create(client_options);
  ASSERT_THAT(client.status(), IsOk());
  const core::Tensor table = *core::Tensor::Allocate(core::DataType::kFloat32, {300, 32});
  ASSERT_THAT((*client)->PutTensor("table", table.view()).status(), IsOk());
  spec.params_name = "table";
  spec.invalid_fraction = 0;
  requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  report = RunLoad(Channels({server->port()}), *requests, Requests(40, 2));
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("OK", 40)));
  EXPECT_LT(report->bytes_sent, 40 * (64 * 4 + 64));  // the indices and the name only
}

TEST(RunLoad, ClosedLoopCountsEveryCallOnce) {
  auto server = StartServer();
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  auto report = RunLoad(Channels({server->port()}), *requests, Requests(200, 4));
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_EQ(report->sent, 200);
  EXPECT_THAT(report->by_code, ElementsAre(Pair("OK", 200)));
  EXPECT_EQ(report->errors, 0);
  EXPECT_EQ(report->unexpected, 0);
  EXPECT_EQ(server->metrics().requests_total(), 200);
  EXPECT_EQ(report->bytes_sent, 200 * requests->request_bytes);
  EXPECT_GT(report->bytes_received, 200 * 16 * 64 * 4);  // 16 rows of 64 floats each
  EXPECT_GT(report->qps, 0);
  EXPECT_LE(report->latency_us_min, report->latency_us_p50);
  EXPECT_LE(report->latency_us_p50, report->latency_us_p90);
  EXPECT_LE(report->latency_us_p90, report->latency_us_p99);
  EXPECT_LE(report->latency_us_p99, report->latency_us_p999);
  EXPECT_LE(report->latency_us_p999, report->latency_us_max);
}

TEST(RunLoad, InvalidRequestsAreAnsweredInvalidArgument) {
  auto server = StartServer();
  LoadRequestSpec spec;
  spec.op = LoadOp::kGatherNd;
  spec.index_depth = 2;
  spec.dtype = core::DataType::kString;
  spec.params_shape = {16, 4, 3};
  spec.invalid_fraction = 0.5;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  auto report = RunLoad(Channels({server->port()}), *requests, Requests(64, 2));
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("INVALID_ARGUMENT", 32), Pair("OK", 32)));
  EXPECT_EQ(report->errors, 32);
  EXPECT_EQ(report->unexpected, 0);
}

TEST(RunLoad, OverloadIsCountedAsUnavailable) {
  ServerOptions options = TestOptions();
  options.cpu_threads = 1;
  options.max_batch_size = 1;
  options.queue_capacity = 1;
  auto server = StartServer(options);
  LoadRequestSpec spec;
  spec.dtype = core::DataType::kUint8;
  spec.params_shape = {64, 64 << 10};  // 4 MiB of params; each output 4 MiB
  spec.num_indices = 64;
  spec.distinct_requests = 2;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  auto report = RunLoad(Channels({server->port()}), *requests, Requests(120, 16));
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_EQ(report->sent, 120);
  EXPECT_EQ(Answered(*report), 120);
  EXPECT_THAT(report->by_code, Contains(Key("UNAVAILABLE")));
  EXPECT_EQ(report->unexpected, 0);
}

TEST(RunLoad, OpenLoopKeepsItsSchedule) {
  auto server = StartServer();
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  LoadOptions options;
  options.rate = 400;
  options.duration = absl::Milliseconds(500);
  options.warmup = absl::Milliseconds(100);
  auto report = RunLoad(Channels({server->port()}), *requests, options);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_EQ(report->sent + report->not_sent, 200);  // 400 QPS for 0.5 s, on schedule
  EXPECT_EQ(Answered(*report), report->sent);
  EXPECT_THAT(report->by_code, ElementsAre(Pair("OK", report->sent)));
}

TEST(RunLoad, DurationModeRunsForItsDurationAndSpreadsOverTargets) {
  auto a = StartServer();
  auto b = StartServer();
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  LoadOptions options;
  options.concurrency = 4;
  options.duration = absl::Milliseconds(300);
  options.warmup = absl::Milliseconds(50);
  int progress_calls = 0;
  options.progress_interval = absl::Milliseconds(50);
  options.on_progress = [&](const LoadProgress&) { ++progress_calls; };
  auto report = RunLoad(Channels({a->port(), b->port()}), *requests, options);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_GE(report->seconds, 0.3);
  EXPECT_GT(report->sent, 0);
  EXPECT_EQ(Answered(*report), report->sent);
  EXPECT_GT(a->metrics().requests_total(), report->sent / 4);
  EXPECT_GT(b->metrics().requests_total(), report->sent / 4);
  EXPECT_GE(progress_calls, 3);
}

// One replica is gone (nothing listens on port 1): without retries half the calls fail with
// UNAVAILABLE; with two attempts each failed one moves to the live replica and succeeds.
TEST(RunLoad, RetriesMovePastADeadReplica) {
  auto live = StartServer();
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  const auto channels = Channels({1, live->port()});
  auto no_retry = RunLoad(channels, *requests, Requests(40, 2));
  ASSERT_THAT(no_retry.status(), IsOk());
  EXPECT_THAT(no_retry->by_code, ElementsAre(Pair("OK", 20), Pair("UNAVAILABLE", 20)));
  EXPECT_EQ(no_retry->retries, 0);

  LoadOptions options = Requests(40, 2);
  options.max_attempts = 2;
  auto retried = RunLoad(channels, *requests, options);
  ASSERT_THAT(retried.status(), IsOk());
  EXPECT_EQ(retried->sent, 40);
  EXPECT_THAT(retried->by_code, ElementsAre(Pair("OK", 40)));
  EXPECT_EQ(retried->retries, 20);
}

TEST(LoadReport, JsonHasEveryField) {
  LoadReport r;
  r.sent = 3;
  r.by_code = {{"OK", 2}, {"UNAVAILABLE", 1}};
  r.latency_us_p99 = 12.5;
  const nlohmann::json j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["sent"], 3);
  EXPECT_EQ(j["by_code"]["UNAVAILABLE"], 1);
  EXPECT_EQ(j["latency_us_p99"], 12.5);
  for (const char* key :
       {"not_sent", "errors", "unexpected", "seconds", "qps", "bytes_sent", "bytes_received",
        "sent_mb_per_s", "received_mb_per_s", "latency_us_min", "latency_us_p50", "latency_us_p90",
        "latency_us_p999", "latency_us_max", "latency_us_mean", "mode", "targets", "channels"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_THAT(r.ToText(), ::testing::HasSubstr("UNAVAILABLE"));
}

TEST(RunLoad, RejectsBadOptions) {
  LoadRequests requests = *BuildLoadRequests(LoadRequestSpec());
  EXPECT_THAT(RunLoad({}, requests, LoadOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  LoadOptions options;
  options.concurrency = 0;
  EXPECT_THAT(RunLoad(Channels({1}), requests, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A token file with `token`, for a server's auth_token_file.
std::string TokenFile(const std::string& token) {
  const std::string path = ::testing::TempDir() + "/load_tester_test_tokens";
  std::ofstream(path, std::ios::trunc) << token << "\n";
  return path;
}

TEST(RunLoad, SendsTheAuthToken) {
  ServerOptions server_options = TestOptions();
  server_options.auth_token_file = TokenFile("load-token");
  std::unique_ptr<Server> server = StartServer(server_options);
  LoadRequests requests = *BuildLoadRequests(LoadRequestSpec());
  LoadOptions options = Requests(30, 3);
  options.auth_token = "load-token";
  auto report = RunLoad(Channels({server->port()}), requests, options);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("OK", 30)));
  options.auth_token = "";
  report = RunLoad(Channels({server->port()}), requests, options);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("UNAUTHENTICATED", 30)));
  options.auth_token = "wrong-token";
  report = RunLoad(Channels({server->port()}), requests, options);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_THAT(report->by_code, ElementsAre(Pair("UNAUTHENTICATED", 30)));
}

}  // namespace
}  // namespace tensorcompute::client
