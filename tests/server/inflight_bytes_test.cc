// max_inflight_bytes: each accepted request holds its message's and its output's bytes until
// its answer is sent; one that does not fit is refused at once with UNAVAILABLE ("server
// overloaded"), and the budget is given back when answers go out.

#include <memory>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/byte_budget.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::AsyncGather;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ByteBudgetTest, ReservesWithinTheLimitAndAlwaysAdmitsALoneRequest) {
  ByteBudget budget(100);
  EXPECT_TRUE(budget.TryReserve(60));
  EXPECT_TRUE(budget.TryReserve(40));
  EXPECT_FALSE(budget.TryReserve(1));
  budget.Release(40);
  EXPECT_FALSE(budget.TryReserve(41));
  EXPECT_TRUE(budget.TryReserve(40));
  budget.Release(100);
  EXPECT_EQ(budget.used(), 0);
  EXPECT_TRUE(budget.TryReserve(1000));  // alone: admitted even over the limit
  EXPECT_FALSE(budget.TryReserve(0 + 1));
  budget.Release(1000);
  EXPECT_EQ(budget.used(), 0);
}

TEST(InflightBytesTest, RequestBeyondTheBudgetIsRefusedUntilTheFirstIsAnswered) {
  // The first request (1 MiB of params, 2 MiB of output) waits for its batch to fill
  // (max_queue_delay 2 s) while holding its bytes; a second one does not fit a 4 MiB budget.
  ServerOptions options = TestOptions();
  options.max_inflight_bytes = int64_t{4} << 20;
  options.max_batch_size = 64;
  options.max_queue_delay_us = 2'000'000;
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());
  auto stub = MakeStub((*server)->port());
  const int64_t row_bytes = 1 << 20;
  AsyncGather held(*stub, LargeGatherRequest(row_bytes, 2));
  ASSERT_TRUE(WaitFor([&] { return (*server)->batcher().queue_depth() == 1; }));

  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(row_bytes, 2)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("server overloaded: this request needs ")));
  // A small request still fits beside it.
  AsyncGather small(*stub, SmallGather());

  ASSERT_TRUE(held.Wait());
  ASSERT_TRUE(held.status().ok()) << held.status().error_message();
  EXPECT_TRUE(IsLargeGatherAnswer(held.response(), row_bytes, 2));
  ASSERT_TRUE(small.Wait());
  EXPECT_TRUE(small.status().ok()) << small.status().error_message();
  // Answered and sent: the budget is free again, and the same request now runs.
  EXPECT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == 0; }));
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(row_bytes, 2)), IsOk());
}

}  // namespace
}  // namespace tensorcompute::server
