// The load tester against real in-process servers: every measured call is counted once, by
// its code; invalid requests are answered INVALID_ARGUMENT; an overloaded server's
// UNAVAILABLE is counted, not fatal; the JSON report parses; EmbeddingBag requests are fixed
// bags of finite values, inline or by name.

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
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/client.h"
#include "core/half_float.h"
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
using ::testing::HasSubstr;
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

TEST(BuildLoadRequests, BodiesAreRequestsWithSharedParams) {
  LoadRequestSpec spec;
  spec.params_shape = {100, 8};
  spec.num_indices = 5;
  spec.distinct_requests = 10;
  spec.invalid_fraction = 0.3;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/tensorcompute.v1.TensorCompute/Gather");
  ASSERT_EQ(requests->bodies.size(), 10u);
  EXPECT_EQ(std::count(requests->valid.begin(), requests->valid.end(), false), 3);
  std::string first_params;
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    grpc::Slice slice;
    ASSERT_TRUE(requests->bodies[k].TrySingleSlice(&slice).ok() ||
                requests->bodies[k].DumpToSingleSlice(&slice).ok());
    v1::GatherRequest request;
    ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
    EXPECT_THAT(request.params().shape(), ElementsAre(100, 8));
    EXPECT_THAT(request.indices().shape(), ElementsAre(5));
    EXPECT_EQ(request.axis(), 0);
    if (k == 0) first_params = request.params().data();
    EXPECT_EQ(request.params().data(), first_params);
  }
}

TEST(BuildLoadRequests, ParamsNameSendsOnlyTheNameAndIndicesInRange) {
  for (bool nd : {false, true}) {
    LoadRequestSpec spec;
    spec.op = nd ? LoadOp::kGatherNd : LoadOp::kGather;
    spec.params_shape = {7, 3, 2};
    spec.index_depth = 2;
    spec.num_indices = 50;
    spec.distinct_requests = 4;
    spec.params_name = "emb";
    auto requests = BuildLoadRequests(spec);
    ASSERT_THAT(requests.status(), IsOk());
    for (const grpc::ByteBuffer& body : requests->bodies) {
      grpc::Slice slice;
      ASSERT_TRUE(body.DumpToSingleSlice(&slice).ok());
      v1::Tensor indices;
      if (nd) {
        v1::GatherNdRequest request;
        ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
        EXPECT_EQ(request.params_name(), "emb");
        EXPECT_FALSE(request.has_params());
        EXPECT_THAT(request.indices().shape(), ElementsAre(50, 2));
        indices = request.indices();
      } else {
        v1::GatherRequest request;
        ASSERT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
        EXPECT_EQ(request.params_name(), "emb");
        EXPECT_FALSE(request.has_params());
        EXPECT_THAT(request.indices().shape(), ElementsAre(50));
        indices = request.indices();
      }
      const auto* values = reinterpret_cast<const int32_t*>(indices.data().data());
      for (int i = 0; i < static_cast<int>(indices.data().size() / 4); ++i) {
        const int64_t dim = nd ? spec.params_shape[i % 2] : spec.params_shape[0];
        EXPECT_GE(values[i], 0);
        EXPECT_LT(values[i], dim) << "index " << i;
      }
    }
    // The params (7x3x2 float32: 168 data bytes) no longer travel; the name is a few bytes.
    spec.params_name.clear();
    auto inline_requests = BuildLoadRequests(spec);
    ASSERT_THAT(inline_requests.status(), IsOk());
    EXPECT_GE(inline_requests->request_bytes - requests->request_bytes, 168 - 8);
  }
}

TEST(BuildLoadRequests, RejectsImpossibleSpecs) {
  LoadRequestSpec spec;
  spec.params_shape = {0, 8};
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = LoadRequestSpec();
  spec.op = LoadOp::kGatherNd;
  spec.index_depth = 3;
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = LoadRequestSpec();
  spec.invalid_fraction = 2;
  EXPECT_THAT(BuildLoadRequests(spec).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Body `k` of `requests` parsed as a `Request`.
template <typename Request>
Request Parse(const LoadRequests& requests, size_t k) {
  grpc::Slice slice;
  EXPECT_TRUE(requests.bodies[k].DumpToSingleSlice(&slice).ok());
  Request request;
  EXPECT_TRUE(request.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
  return request;
}

TEST(BuildLoadRequests, EmbeddingBagBodiesAreFixedBagsOfFiniteRows) {
  LoadRequestSpec spec;
  spec.op = LoadOp::kEmbeddingBag;
  spec.dtype = core::DataType::kFloat16;
  spec.params_shape = {50, 6};
  spec.num_indices = 24;
  spec.bag_size = 4;
  spec.distinct_requests = 8;
  spec.invalid_fraction = 0.25;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  EXPECT_EQ(requests->method, "/tensorcompute.v1.TensorCompute/EmbeddingBag");
  ASSERT_EQ(requests->bodies.size(), 8u);
  EXPECT_EQ(std::count(requests->valid.begin(), requests->valid.end(), false), 2);
  for (size_t k = 0; k < requests->bodies.size(); ++k) {
    const auto request = Parse<v1::EmbeddingBagRequest>(*requests, k);
    EXPECT_EQ(request.mode(), v1::EmbeddingBagRequest::SUM);
    EXPECT_FALSE(request.has_offsets());
    EXPECT_FALSE(request.has_per_sample_weights());
    EXPECT_FALSE(request.include_last_offset());
    EXPECT_THAT(request.indices().shape(), ElementsAre(6, 4));  // 24 lookups, bags of 4
    EXPECT_EQ(request.params().dtype(), v1::DT_FLOAT16);
    EXPECT_THAT(request.params().shape(), ElementsAre(50, 6));
    ASSERT_EQ(request.params().data().size(), 50u * 6 * 2);
    const auto* halves = reinterpret_cast<const uint16_t*>(request.params().data().data());
    for (int i = 0; i < 50 * 6; ++i) {
      const float v = core::HalfToFloat(halves[i]);
      EXPECT_TRUE(v >= -1.0f && v <= 1.0f) << "params element " << i << " = " << v;
    }
    const auto* values = reinterpret_cast<const int32_t*>(request.indices().data().data());
    int out_of_range = 0;
    for (int i = 0; i < 24; ++i) out_of_range += values[i] < 0 || values[i] >= 50;
    EXPECT_EQ(out_of_range, requests->valid[k] ? 0 : 1) << "request " << k;
  }

  spec.params_name = "table";
  auto by_name = BuildLoadRequests(spec);
  ASSERT_THAT(by_name.status(), IsOk());
  const auto request = Parse<v1::EmbeddingBagRequest>(*by_name, 0);
  EXPECT_EQ(request.params_name(), "table");
  EXPECT_FALSE(request.has_params());
  EXPECT_THAT(request.indices().shape(), ElementsAre(6, 4));
}

TEST(BuildLoadRequests, EmbeddingBagRejectsImpossibleSpecs) {
  auto spec = [] {
    LoadRequestSpec s;
    s.op = LoadOp::kEmbeddingBag;
    return s;
  };
  LoadRequestSpec rank3 = spec();
  rank3.params_shape = {4, 4, 4};
  EXPECT_THAT(BuildLoadRequests(rank3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[rows, dim]")));
  LoadRequestSpec ints = spec();
  ints.dtype = core::DataType::kInt32;
  EXPECT_THAT(BuildLoadRequests(ints).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got int32")));
  LoadRequestSpec ragged = spec();
  ragged.num_indices = 10;
  ragged.bag_size = 4;
  EXPECT_THAT(BuildLoadRequests(ragged).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("10 lookups per request do not make whole bags of 4")));
  LoadRequestSpec empty_bags = spec();
  empty_bags.bag_size = 0;
  EXPECT_THAT(BuildLoadRequests(empty_bags).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // KServe (gRPC or HTTP) has no embedding_bag form on this branch yet.
  for (bool http : {false, true}) {
    LoadRequestSpec kserve = spec();
    kserve.kserve = true;
    kserve.http = http;
    EXPECT_THAT(BuildLoadRequests(kserve).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("native protocol only")));
  }
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
