// Load sweeps (client/load_sweep.h): lists are parsed strictly; each value runs one point with
// the base options and its own concurrency or rate; against a real in-process server a sweep
// yields one point per value with sane figures; the CSV has its header and one row per point,
// the JSON one report per point.

#include "client/load_sweep.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "client/client.h"
#include "client/load_tester.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kHeader[] =
    "mode,value,op,protocol,sent,not_sent,ok,errors,seconds,throughput_rps,sent_bytes_per_s,"
    "received_bytes_per_s,p50_us,p90_us,p99_us,p999_us,max_us";

// The values of a list that must parse.
std::vector<double> Values(SweepKind kind, const std::string& text) {
  absl::StatusOr<std::vector<double>> values = ParseSweepList(kind, text);
  EXPECT_THAT(values.status(), IsOk()) << text;
  return values.ok() ? *values : std::vector<double>();
}

TEST(ParseSweepList, ReadsConcurrenciesInTheOrderGiven) {
  EXPECT_THAT(Values(SweepKind::kConcurrency, "1,2,4,8,16,32,64,128,256"),
              ElementsAre(1, 2, 4, 8, 16, 32, 64, 128, 256));
  EXPECT_THAT(Values(SweepKind::kConcurrency, " 8 , 2,2 "), ElementsAre(8, 2, 2));
  EXPECT_THAT(Values(SweepKind::kConcurrency, "10000"), ElementsAre(kMaxLoadConcurrency));
}

TEST(ParseSweepList, RejectsBadConcurrencies) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--sweep-concurrency: no value"},
      {"  ", "--sweep-concurrency: no value"},
      {"1,,2", "entry 2 ('') is not an integer"},
      {"1,2,", "entry 3 ('') is not an integer"},
      {"1,x", "entry 2 ('x') is not an integer"},
      {"1.5", "entry 1 ('1.5') is not an integer"},
      {"0", "entry 1: concurrency 0 is not an integer in [1, 10000]"},
      {"4,-1", "entry 2: concurrency -1 is not an integer in [1, 10000]"},
      {"10001", "concurrency 10001 is not an integer in [1, 10000]"},
      {"99999999999999999999", "is not an integer"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    EXPECT_THAT(ParseSweepList(SweepKind::kConcurrency, text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
  }
}

TEST(ParseSweepList, ReadsRatesAndRejectsBadOnes) {
  EXPECT_THAT(Values(SweepKind::kRate, "100, 250.5,1e3"), ElementsAre(100, 250.5, 1000));
  for (const char* text : {"0", "-5", "nan", "inf", "1e8", "100,fast", "100,"}) {
    SCOPED_TRACE(text);
    EXPECT_THAT(ParseSweepList(SweepKind::kRate, text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep-rate")));
  }
}

TEST(ParseSweepList, AcceptsAtMostMaxPoints) {
  std::vector<std::string> values(kMaxSweepPoints, "3");
  EXPECT_THAT(ParseSweepList(SweepKind::kConcurrency, absl::StrJoin(values, ",")), IsOk());
  values.push_back("3");
  EXPECT_THAT(ParseSweepList(SweepKind::kConcurrency, absl::StrJoin(values, ",")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 64 per sweep")));
}

TEST(RunSweep, RunsEachValueWithTheBaseOptions) {
  LoadOptions base;
  base.requests = 7;
  base.warmup = absl::Milliseconds(3);
  base.rate = 50;  // a concurrency sweep is closed loop whatever the base says
  std::vector<LoadOptions> seen;
  std::vector<std::string> events;
  const RunPointFn run = [&](const LoadOptions& o) -> absl::StatusOr<LoadReport> {
    seen.push_back(o);
    LoadReport report;
    report.sent = o.concurrency;
    return report;
  };
  SweepCallbacks callbacks;
  callbacks.on_point_start = [&](int index, int count, const LoadOptions& o) {
    events.push_back(absl::StrCat("start ", index, "/", count, " c", o.concurrency));
  };
  callbacks.on_point_done = [&](const SweepPoint& p) {
    events.push_back(absl::StrCat("done ", p.value, " sent ", p.report.sent));
  };
  auto points = RunSweep({SweepKind::kConcurrency, {1, 4, 2}}, base, run, callbacks);
  ASSERT_THAT(points.status(), IsOk());
  ASSERT_EQ(points->size(), 3u);
  ASSERT_EQ(seen.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].rate, 0);
    EXPECT_EQ(seen[i].requests, 7);
    EXPECT_EQ(seen[i].warmup, absl::Milliseconds(3));
    EXPECT_EQ((*points)[i].kind, SweepKind::kConcurrency);
  }
  EXPECT_EQ(seen[1].concurrency, 4);
  EXPECT_EQ((*points)[1].value, 4);
  EXPECT_EQ((*points)[1].report.sent, 4);
  EXPECT_THAT(events, ElementsAre("start 0/3 c1", "done 1 sent 1", "start 1/3 c4", "done 4 sent 4",
                                  "start 2/3 c2", "done 2 sent 2"));

  seen.clear();
  points = RunSweep({SweepKind::kRate, {10, 20.5}}, base, run);
  ASSERT_THAT(points.status(), IsOk());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].rate, 10);
  EXPECT_EQ(seen[1].rate, 20.5);
  EXPECT_EQ((*points)[1].kind, SweepKind::kRate);
}

TEST(RunSweep, StopsAtTheFirstErrorAndRejectsBadSweeps) {
  int calls = 0;
  const RunPointFn run = [&](const LoadOptions&) -> absl::StatusOr<LoadReport> {
    if (++calls == 2) return absl::InvalidArgumentError("no");
    return LoadReport();
  };
  EXPECT_THAT(RunSweep({SweepKind::kConcurrency, {1, 2, 3}}, LoadOptions(), run).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no"));
  EXPECT_EQ(calls, 2);
  calls = 0;
  EXPECT_THAT(RunSweep({SweepKind::kConcurrency, {}}, LoadOptions(), run).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RunSweep({SweepKind::kConcurrency, {2, 0.5}}, LoadOptions(), run).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RunSweep({SweepKind::kRate, {-1}}, LoadOptions(), run).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls, 0);
}

// The CSV's lines split into fields.
std::vector<std::vector<std::string>> CsvRows(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

TEST(RunSweep, AgainstAServerEachPointHasSaneFigures) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  const std::vector<std::shared_ptr<grpc::Channel>> channels = {
      MakeChannel(absl::StrCat("127.0.0.1:", server->port()), 64 << 20, 2000)};
  LoadOptions base;
  base.requests = 60;
  base.warmup = absl::ZeroDuration();
  const RunPointFn run = [&](const LoadOptions& o) { return RunLoad(channels, *requests, o); };
  auto points = RunSweep({SweepKind::kConcurrency, {1, 2, 4}}, base, run);
  ASSERT_THAT(points.status(), IsOk());
  ASSERT_EQ(points->size(), 3u);
  const int expected_concurrency[] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    const LoadReport& r = (*points)[i].report;
    SCOPED_TRACE(r.ToText());
    EXPECT_EQ((*points)[i].value, expected_concurrency[i]);
    EXPECT_EQ(r.mode, absl::StrCat("closed (concurrency ", expected_concurrency[i], ")"));
    EXPECT_EQ(r.sent, 60);
    EXPECT_THAT(r.by_code, ElementsAre(Pair("OK", 60)));
    EXPECT_GT(r.qps, 0);
    EXPECT_GT(r.latency_us_p50, 0);
    EXPECT_LE(r.latency_us_p50, r.latency_us_p99);
    EXPECT_LE(r.latency_us_p99, r.latency_us_max);
  }
  EXPECT_EQ(server->metrics().requests_total(), 180);

  auto csv = SweepCsv(*points, {"gather", "native"});
  ASSERT_THAT(csv.status(), IsOk());
  const auto rows = CsvRows(*csv);
  ASSERT_EQ(rows.size(), 4u) << *csv;
  EXPECT_EQ(absl::StrJoin(rows[0], ","), kHeader);
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE(*csv);
    ASSERT_EQ(rows[i].size(), rows[0].size());
    EXPECT_EQ(rows[i][0], "closed");
    EXPECT_EQ(rows[i][1], absl::StrCat(expected_concurrency[i - 1]));
    EXPECT_EQ(rows[i][2], "gather");
    EXPECT_EQ(rows[i][3], "native");
    EXPECT_EQ(rows[i][4], "60");  // sent
    EXPECT_EQ(rows[i][6], "60");  // ok
    EXPECT_EQ(rows[i][7], "0");   // errors
    double qps = 0, p50 = 0, p99 = 0, received = 0;
    ASSERT_TRUE(absl::SimpleAtod(rows[i][9], &qps));
    ASSERT_TRUE(absl::SimpleAtod(rows[i][11], &received));
    ASSERT_TRUE(absl::SimpleAtod(rows[i][12], &p50));
    ASSERT_TRUE(absl::SimpleAtod(rows[i][14], &p99));
    EXPECT_GT(qps, 0);
    EXPECT_GT(received, qps * 16 * 64 * 4 * 0.99);  // 16 rows of 64 floats per answer
    EXPECT_GT(p50, 0);
    EXPECT_LE(p50, p99);
  }

  const nlohmann::json json = nlohmann::json::parse(SweepJson(*points, {"gather", "kserve"}));
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(json[i]["sweep"], "concurrency");
    EXPECT_EQ(json[i]["value"], expected_concurrency[i]);
    EXPECT_EQ(json[i]["op"], "gather");
    EXPECT_EQ(json[i]["protocol"], "kserve");
    EXPECT_EQ(json[i]["sent"], 60);
    EXPECT_EQ(json[i]["latency_us_p99"], (*points)[i].report.latency_us_p99);
  }
}

TEST(RunSweep, OpenLoopPointsKeepTheirRates) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto requests = BuildLoadRequests(LoadRequestSpec());
  ASSERT_THAT(requests.status(), IsOk());
  const std::vector<std::shared_ptr<grpc::Channel>> channels = {
      MakeChannel(absl::StrCat("127.0.0.1:", server->port()), 64 << 20, 2001)};
  LoadOptions base;
  base.requests = 40;
  base.warmup = absl::ZeroDuration();
  const RunPointFn run = [&](const LoadOptions& o) { return RunLoad(channels, *requests, o); };
  auto points = RunSweep({SweepKind::kRate, {100, 400}}, base, run);
  ASSERT_THAT(points.status(), IsOk());
  ASSERT_EQ(points->size(), 2u);
  EXPECT_EQ((*points)[0].report.mode, "open (100 QPS)");
  EXPECT_EQ((*points)[1].report.mode, "open (400 QPS)");
  // 40 calls at 100/s take ~0.4 s, at 400/s ~0.1 s.
  EXPECT_GT((*points)[0].report.seconds, 0.3);
  EXPECT_LT((*points)[1].report.seconds, (*points)[0].report.seconds);
  for (const SweepPoint& p : *points) {
    EXPECT_EQ(p.report.sent + p.report.not_sent, 40);
  }
  auto csv = SweepCsv(*points, {"gather", "native"});
  ASSERT_THAT(csv.status(), IsOk());
  const auto rows = CsvRows(*csv);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1][0], "open");
  EXPECT_EQ(rows[1][1], "100");
  EXPECT_EQ(rows[2][1], "400");
}

TEST(SweepCsv, RefusesLabelsThatNeedQuoting) {
  for (const char* op : {"a,b", "a\"b", "a\nb"}) {
    EXPECT_THAT(SweepCsv({}, {op, "native"}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  auto empty = SweepCsv({}, {"gather", "native"});
  ASSERT_THAT(empty.status(), IsOk());
  EXPECT_EQ(*empty, absl::StrCat(kHeader, "\n"));
}

TEST(SweepPointSummary, NamesThePointAndItsFigures) {
  SweepPoint point;
  point.kind = SweepKind::kRate;
  point.value = 250;
  point.report.qps = 249.5;
  point.report.latency_us_p50 = 310;
  point.report.latency_us_p99 = 802;
  point.report.errors = 3;
  EXPECT_EQ(SweepPointSummary(point), "rate 250: 249.5 QPS, p50 310.0 us, p99 802.0 us, 3 errors");
}

}  // namespace
}  // namespace tensorcompute::client
