// The send limit of an answer (server/admission/send_deadline.h): a base plus the answer's
// bytes at the minimum rate; and what counts an answer given up (unsent_answers.h): by front
// end, its client's address taken from gRPC's peer names. The end-to-end behaviour, a client
// that never opens its window, is tests/server/unsent_answers_test.py.

#include "server/admission/send_deadline.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "server/admission/unsent_answers.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {
namespace {

TEST(SendLimit, IsTheBasePlusTheBytesAtTheMinimumRate) {
  const SendLimit limit{absl::Seconds(10), int64_t{1} << 20};
  EXPECT_EQ(limit.For(0), absl::Seconds(10));
  EXPECT_EQ(limit.For(int64_t{1} << 20), absl::Seconds(11));
  EXPECT_EQ(limit.For(int64_t{64} << 20), absl::Seconds(74));  // the largest default answer
  EXPECT_EQ(limit.For(int64_t{1} << 19), absl::Milliseconds(10500));
  EXPECT_EQ(limit.For(-5), absl::Seconds(10));
}

TEST(SendLimit, GrowsWithTheAnswerAndNeverOverflows) {
  const SendLimit limit{absl::Seconds(1), 3};
  EXPECT_LT(limit.For(1000), limit.For(1001));
  EXPECT_EQ(limit.For(3), absl::Seconds(2));
  const absl::Duration huge = limit.For(std::numeric_limits<int64_t>::max());
  EXPECT_GT(huge, absl::Hours(24 * 365 * 1000));  // saturated, not wrapped negative
}

TEST(SendLimit, ValidateNamesTheFlag) {
  EXPECT_TRUE(SendLimit().Validate("base", "rate").ok());
  EXPECT_EQ(SendLimit().For(0), absl::Seconds(10));  // the documented defaults
  EXPECT_EQ(SendLimit().min_bytes_per_s, int64_t{1} << 20);
  absl::Status zero_base = SendLimit{absl::ZeroDuration(), 1}.Validate("base", "rate");
  EXPECT_EQ(zero_base.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero_base.message(), "base must be positive");
  absl::Status zero_rate = SendLimit{absl::Seconds(1), 0}.Validate("base", "rate");
  EXPECT_EQ(zero_rate.message(), "rate must be positive");
}

TEST(PeerAddress, DropsTheSchemeAndThePort) {
  EXPECT_EQ(PeerAddress("ipv4:127.0.0.2:41234"), "127.0.0.2");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:41234"), "::1");
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:41234"), "::1");
  EXPECT_EQ(PeerAddress("10.1.2.3:80"), "10.1.2.3");
  EXPECT_EQ(PeerAddress("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(PeerAddress("fe80::1"), "fe80::1");
  EXPECT_EQ(PeerAddress("unix:/tmp/socket"), "unix:/tmp/socket");
}

TEST(UnsentAnswers, CountsEachByFrontEnd) {
  Metrics metrics;
  UnsentAnswers unsent(&metrics);
  unsent.Count(FrontEndKind::kNative, "Gather", "ipv4:127.0.0.2:1", 100, absl::Seconds(2));
  unsent.Count(FrontEndKind::kNative, "Gather", "ipv4:127.0.0.2:2", 100, absl::Seconds(2));
  unsent.Count(FrontEndKind::kKserveHttp, "ModelInfer", "127.0.0.3", 100, absl::Seconds(2));
  EXPECT_EQ(metrics.answers_not_taken(FrontEndKind::kNative), 2);
  EXPECT_EQ(metrics.answers_not_taken(FrontEndKind::kKserveGrpc), 0);
  EXPECT_EQ(metrics.answers_not_taken(FrontEndKind::kKserveHttp), 1);
  // Many addresses: still counted, the set of those logged bounded (it starts again).
  for (int i = 0; i < 2 * UnsentAnswers::kMaxPeers; ++i) {
    unsent.Count(FrontEndKind::kKserveGrpc, "ModelInfer", absl::StrCat("ipv4:10.0.", i, ":1"), 1,
                 absl::Seconds(1));
  }
  EXPECT_EQ(metrics.answers_not_taken(FrontEndKind::kKserveGrpc), 2 * UnsentAnswers::kMaxPeers);
}

}  // namespace
}  // namespace tensorcompute::server
