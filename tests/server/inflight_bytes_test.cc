// max_inflight_bytes: a call is read only with a receive credit of the largest message; each
// accepted request then holds its message's and its output's bytes until its answer is sent;
// one that does not fit is refused at once with UNAVAILABLE ("server overloaded"), and the
// budget is given back when answers go out (server/admission/byte_budget.h).

#include <memory>
#include <optional>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "server/admission/byte_budget.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::AsyncGather;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A waiter that records its grant.
class Recorder : public ByteBudget::Waiter {
 public:
  void OnGranted() override { ++granted; }
  int granted = 0;
};

TEST(ByteBudgetTest, WorkReservationsStayWithinTheLimitAndALoneRequestIsAlwaysAdmitted) {
  ByteBudget budget(100);
  auto a = budget.TryReserve(60);
  auto b = budget.TryReserve(40);
  EXPECT_TRUE(a.has_value());
  EXPECT_TRUE(b.has_value());
  EXPECT_FALSE(budget.TryReserve(1).has_value());
  b.reset();  // gives its 40 back
  EXPECT_FALSE(budget.TryReserve(41).has_value());
  auto c = budget.TryReserve(40);
  EXPECT_TRUE(c.has_value());
  a.reset();
  c.reset();
  EXPECT_EQ(budget.used(), 0);
  auto alone = budget.TryReserve(1000);  // alone: admitted even over the limit
  EXPECT_TRUE(alone.has_value());
  EXPECT_FALSE(budget.TryReserve(1).has_value());
  EXPECT_TRUE(alone->TryGrow(5));  // still alone: may grow
  EXPECT_EQ(alone->bytes(), 1005);
  alone.reset();
  EXPECT_EQ(budget.used(), 0);
}

TEST(ByteBudgetTest, ReadingNeedsACreditOfTheLargestMessage) {
  ByteBudget budget(/*limit=*/100, /*max_message_bytes=*/30, /*max_waiting=*/2);
  EXPECT_EQ(budget.receive_credit(), 30);
  Recorder a, b, c, d, e, f;
  EXPECT_EQ(budget.AcquireReceive(&a), ByteBudget::Admission::kGranted);
  EXPECT_EQ(budget.AcquireReceive(&b), ByteBudget::Admission::kGranted);
  EXPECT_EQ(budget.AcquireReceive(&c), ByteBudget::Admission::kGranted);
  EXPECT_EQ(budget.used(), 90);
  // Room for work, but credits fill it: d and e wait in line; the line holds 2.
  EXPECT_EQ(budget.AcquireReceive(&d), ByteBudget::Admission::kQueued);
  EXPECT_EQ(budget.AcquireReceive(&e), ByteBudget::Admission::kQueued);
  EXPECT_EQ(budget.AcquireReceive(&f), ByteBudget::Admission::kRefused);
  EXPECT_EQ(budget.waiting(), 2);
  // a's message was 5 bytes: its credit becomes 5 bytes of work, and d gets the room.
  ByteBudget::Reservation a_work = budget.ReceiveDone(5);
  EXPECT_EQ(d.granted, 1);
  EXPECT_EQ(e.granted, 0);
  EXPECT_EQ(budget.used(), 5 + 90);
  // e leaves the line (its deadline passed): no grant comes, and it cannot leave twice.
  EXPECT_TRUE(budget.CancelWait(&e));
  EXPECT_FALSE(budget.CancelWait(&e));
  EXPECT_FALSE(budget.CancelWait(&d));  // already granted
  // Work of 5 + 70 of the output, accepted: 75 + 3 credits of 30 > 100.
  (void)budget.ReceiveDone(0);  // b's read failed
  (void)budget.ReceiveDone(0);  // c's too
  EXPECT_TRUE(a_work.TryGrow(40));
  EXPECT_EQ(budget.used(), 45 + 30);
  EXPECT_FALSE(a_work.TryGrow(30));  // 75 + 30 > 100, and not alone
  EXPECT_EQ(a_work.bytes(), 45);
  // Accepted work alone leaves no room for one more message: refused at once, not queued.
  (void)budget.ReceiveDone(0);        // d's read failed
  auto more = budget.TryReserve(30);  // 75 of work: no room for a 30-byte credit
  EXPECT_TRUE(more.has_value());
  Recorder g;
  EXPECT_EQ(budget.AcquireReceive(&g), ByteBudget::Admission::kRefused);
  EXPECT_EQ(g.granted, 0);
  a_work.Reset();
  more.reset();
  EXPECT_EQ(budget.used(), 0);
}

TEST(ByteBudgetTest, TheLineIsServedInArrivalOrderAsBytesComeBack) {
  ByteBudget budget(/*limit=*/60, /*max_message_bytes=*/30);
  Recorder first, second, w1, w2, w3;
  ASSERT_EQ(budget.AcquireReceive(&first), ByteBudget::Admission::kGranted);
  ASSERT_EQ(budget.AcquireReceive(&second), ByteBudget::Admission::kGranted);
  ASSERT_EQ(budget.AcquireReceive(&w1), ByteBudget::Admission::kQueued);
  ASSERT_EQ(budget.AcquireReceive(&w2), ByteBudget::Admission::kQueued);
  ASSERT_EQ(budget.AcquireReceive(&w3), ByteBudget::Admission::kQueued);
  (void)budget.ReceiveDone(0);  // first's read failed: room for one credit, w1's
  EXPECT_EQ(w1.granted, 1);
  EXPECT_EQ(w2.granted + w3.granted, 0);
  // second's message: 10 of work + w1's 30, no room for 30 more
  ByteBudget::Reservation second_work = budget.ReceiveDone(10);
  EXPECT_EQ(w2.granted, 0);
  second_work.Reset();  // its answer went out
  EXPECT_EQ(w2.granted, 1);
  EXPECT_EQ(w3.granted, 0);
  EXPECT_TRUE(budget.CancelWait(&w3));
  (void)budget.ReceiveDone(0);  // w1
  (void)budget.ReceiveDone(0);  // w2
  EXPECT_EQ(budget.used(), 0);
  EXPECT_EQ(budget.waiting(), 0);
}

TEST(ByteBudgetTest, AReservationGivesItsBytesBackWhenDestroyedOrShrunk) {
  ByteBudget budget(/*limit=*/100);
  {
    auto held = budget.TryReserve(30);
    ASSERT_TRUE(held.has_value());
    held->Shrink(10);
    EXPECT_EQ(held->bytes(), 20);
    EXPECT_EQ(budget.used(), 20);
    ByteBudget::Reservation moved = *std::move(held);
    EXPECT_EQ(moved.bytes(), 20);
    EXPECT_EQ(budget.used(), 20);
  }
  EXPECT_EQ(budget.used(), 0);
}

TEST(ByteBudgetTest, ADecodedCostBeyondTheCreditNeedsRoomForTheRest) {
  ByteBudget budget(/*limit=*/100, /*receive_credit=*/20);
  Recorder a, b, c;
  ASSERT_EQ(budget.AcquireReceive(&a), ByteBudget::Admission::kGranted);
  ASSERT_EQ(budget.AcquireReceive(&b), ByteBudget::Admission::kGranted);
  // Alone (b's credit aside, nothing else): 70 fits beside b's 20.
  std::optional<ByteBudget::Reservation> a_work = budget.TryReceiveDone(70);
  ASSERT_TRUE(a_work.has_value());
  EXPECT_EQ(budget.used(), 90);
  // Within its credit: always.
  std::optional<ByteBudget::Reservation> b_small = budget.TryReceiveDone(15);
  ASSERT_TRUE(b_small.has_value());
  EXPECT_EQ(budget.used(), 85);
  ASSERT_EQ(budget.AcquireReceive(&c), ByteBudget::Admission::kRefused);
  b_small.reset();
  a_work->Shrink(60);  // 10 of work
  // Beyond its credit without room for the rest: refused, and its credit comes back.
  ASSERT_EQ(budget.AcquireReceive(&c), ByteBudget::Admission::kGranted);
  EXPECT_FALSE(budget.TryReceiveDone(95).has_value());
  EXPECT_EQ(budget.used(), 10);
  // Alone, it may exceed the limit (the caller refuses what exceeds the whole budget).
  a_work.reset();
  ASSERT_EQ(budget.AcquireReceive(&c), ByteBudget::Admission::kGranted);
  std::optional<ByteBudget::Reservation> alone = budget.TryReceiveDone(150);
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(budget.used(), 150);
  alone.reset();
  EXPECT_EQ(budget.used(), 0);
}

TEST(ByteBudgetTest, ACreditNeverExceedsTheLimit) {
  ByteBudget budget(/*limit=*/10, /*max_message_bytes=*/1000);
  EXPECT_EQ(budget.receive_credit(), 10);
}

// The first request of these tests (0.625 MiB of params, 1.875 MiB of output; messages of at
// most 2 MiB, so reading one needs 4 MiB free) waits for its batch to fill (max_queue_delay 4 s)
// while it holds its 2.5 MiB.
ServerOptions HeldRequestOptions(int64_t budget) {
  ServerOptions options = TestOptions();
  options.max_inflight_bytes = budget;
  options.max_message_bytes = int64_t{2} << 20;
  options.max_batch_size = 64;
  options.max_queue_delay_us = 4'000'000;
  return options;
}
constexpr int64_t kHeldRowBytes = 640 << 10;

TEST(InflightBytesTest, WhenAcceptedWorkLeavesNoRoomNewCallsAreRefusedUnreadUntilItIsAnswered) {
  // 2.5 MiB held of a 6 MiB budget: no 4 MiB free, so any new call, large or small, is refused
  // at once, its message never read.
  auto server = Server::Start(HeldRequestOptions(int64_t{6} << 20));
  ASSERT_THAT(server.status(), IsOk());
  auto stub = MakeStub((*server)->port());
  AsyncGather held(*stub, LargeGatherRequest(kHeldRowBytes, 3));
  ASSERT_TRUE(WaitFor([&] { return (*server)->batcher().queue_depth() == 1; }));
  const std::string refusal =
      "of the max_inflight_bytes budget of 6291456 bytes are in use, and reading a request "
      "needs 4194304 bytes free (twice max_message_bytes); retry with backoff";
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(kHeldRowBytes, 3)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(refusal)));
  EXPECT_THAT(SendGather(*stub, SmallGather()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("server overloaded: "), HasSubstr(refusal))));

  ASSERT_TRUE(held.Wait());
  ASSERT_TRUE(held.status().ok()) << held.status().error_message();
  EXPECT_TRUE(IsLargeGatherAnswer(held.response(), kHeldRowBytes, 3));
  // Answered and sent: the budget is free again, and the same requests now run.
  EXPECT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == 0; }));
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(kHeldRowBytes, 3)), IsOk());
  // Its bytes come back when the server's side of the call is done, a moment after the client
  // has the answer (under load, long enough for the next call to find them still held).
  EXPECT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == 0; }));
  EXPECT_THAT(SendGather(*stub, SmallGather()), IsOk());
}

TEST(InflightBytesTest, WithRoomLeftTheNextCallIsReadAndAnsweredBesideTheFirst) {
  // 2.5 MiB held of a 7 MiB budget: 4.5 MiB free, enough to read another call.
  auto server = Server::Start(HeldRequestOptions(int64_t{7} << 20));
  ASSERT_THAT(server.status(), IsOk());
  auto stub = MakeStub((*server)->port());
  AsyncGather held(*stub, LargeGatherRequest(kHeldRowBytes, 3));
  ASSERT_TRUE(WaitFor([&] { return (*server)->batcher().queue_depth() == 1; }));
  AsyncGather second(*stub, LargeGatherRequest(kHeldRowBytes, 3));
  ASSERT_TRUE(second.Wait());
  ASSERT_TRUE(held.Wait());
  EXPECT_TRUE(held.status().ok()) << held.status().error_message();
  EXPECT_TRUE(second.status().ok()) << second.status().error_message();
  EXPECT_TRUE(IsLargeGatherAnswer(second.response(), kHeldRowBytes, 3));
  EXPECT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == 0; }));
}

TEST(InflightBytesTest, ACallWaitingForRoomToBeReadEndsAtItsDeadline) {
  // One credit only (budget = max message = 2 MiB), held by a call whose client sends its
  // headers and then nothing: the next call waits in line, and its deadline ends it there.
  ServerOptions options = TestOptions();
  options.max_inflight_bytes = int64_t{2} << 20;
  options.max_message_bytes = int64_t{2} << 20;
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());
  auto channel = MakeChannel((*server)->port());
  grpc::GenericStub generic(channel);
  // A streaming call on the Gather method: headers go out, no message follows.
  grpc::ClientContext silent_context;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> silent =
      generic.PrepareCall(&silent_context, "/tensorcompute.v1.TensorCompute/Gather", &cq);
  silent->StartCall(reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == (int64_t{2} << 20); }));

  auto stub = MakeStub((*server)->port());
  EXPECT_THAT(SendGather(*stub, SmallGather(), absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(WaitFor([&] {
    return (*server)->metrics().requests(Rpc::kGather, absl::StatusCode::kDeadlineExceeded) == 1;
  }));
  EXPECT_EQ((*server)->inflight_budget().waiting(), 0);

  // The silent client hangs up: its credit comes back and calls are read again.
  silent_context.TryCancel();
  grpc::Status finish_status;
  silent->Finish(&finish_status, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_TRUE(WaitFor([&] { return (*server)->inflight_budget().used() == 0; }));
  EXPECT_THAT(SendGather(*stub, SmallGather()), IsOk());
}

TEST(InflightBytesTest, ACallThatEndsWithoutAMessageIsInvalidArgument) {
  ServerOptions options = TestOptions();
  auto server = Server::Start(options);
  ASSERT_THAT(server.status(), IsOk());
  grpc::GenericStub generic(MakeChannel((*server)->port()));
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&context, "/tensorcompute.v1.TensorCompute/GatherNd", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->WritesDone(reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "the call carried no tensorcompute.v1.GatherNdRequest message (a unary RPC sends "
            "exactly one)");
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_TRUE(WaitFor([&] {
    return (*server)->metrics().requests(Rpc::kGatherNd, absl::StatusCode::kInvalidArgument) == 1;
  }));
  EXPECT_EQ((*server)->inflight_budget().used(), 0);
}

}  // namespace
}  // namespace tensorcompute::server
