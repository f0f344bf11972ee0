// The fair share of the in-flight budget (server/admission/client_shares.h, ByteBudget's share,
// --max_inflight_share): when the budget is contended (another client in flight now or within
// kPresence), what a client may hold, its only call and a client alone always let through, the
// refusal's status and text, receive credits not counted, entries gone with their last call.

#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/admission/byte_budget.h"
#include "server/admission/client_shares.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ClientShares, ContendedWhileAnotherIsInFlightOrWasWithinThePresence) {
  ClientShares shares(100);
  ClientShares::Client* a = shares.Enter("a", kT0);
  EXPECT_FALSE(shares.Contended(*a, kT0)) << "alone";
  ClientShares::Client* b = shares.Enter("b", kT0);
  EXPECT_TRUE(shares.Contended(*a, kT0));
  EXPECT_TRUE(shares.Contended(*b, kT0));
  shares.Leave(b, kT0 + absl::Milliseconds(10));
  EXPECT_TRUE(shares.Contended(*a, kT0 + absl::Milliseconds(900))) << "b was here 890 ms ago";
  EXPECT_FALSE(shares.Contended(*a, kT0 + absl::Milliseconds(1011))) << "b left over 1 s ago";
  // a's own comings and goings never make it contended for a.
  ClientShares::Client* a2 = shares.Enter("a", kT0 + absl::Seconds(2));
  shares.Leave(a2, kT0 + absl::Seconds(2));
  EXPECT_FALSE(shares.Contended(*a, kT0 + absl::Seconds(2)));
  // ...but b sees them.
  ClientShares::Client* b2 = shares.Enter("b", kT0 + absl::Seconds(3));
  EXPECT_TRUE(shares.Contended(*b2, kT0 + absl::Seconds(3)));
  shares.Leave(a, kT0 + absl::Seconds(3));
  EXPECT_TRUE(shares.Contended(*b2, kT0 + absl::Seconds(3) + absl::Milliseconds(999)));
  EXPECT_FALSE(shares.Contended(*b2, kT0 + absl::Seconds(4) + absl::Milliseconds(1)));
  shares.Leave(b2, kT0 + absl::Seconds(5));
}

TEST(ClientShares, EntriesLastAsLongAsTheirCalls) {
  ClientShares shares(100);
  ClientShares::Client* a = shares.Enter("a", kT0);
  EXPECT_EQ(shares.Enter("a", kT0), a) << "one entry per client";
  ClientShares::Client* b = shares.Enter("b", kT0);
  EXPECT_EQ(shares.clients(), 2);
  shares.Leave(a, kT0);
  EXPECT_EQ(shares.clients(), 2) << "a has another call";
  shares.Leave(a, kT0);
  shares.Leave(b, kT0);
  EXPECT_EQ(shares.clients(), 0);
}

TEST(ClientShares, AllowsWithinTheShareItsOnlyCallOrWhenNotContended) {
  ClientShares shares(100);
  ClientShares::Client* a = shares.Enter("a", kT0);
  a->held = 90;
  EXPECT_TRUE(shares.Allows(*a, 0, 500, kT0)) << "alone";
  ClientShares::Client* b = shares.Enter("b", kT0);
  EXPECT_TRUE(shares.Allows(*a, 0, 10, kT0)) << "90 + 10 is its share";
  EXPECT_FALSE(shares.Allows(*a, 0, 11, kT0));
  EXPECT_TRUE(shares.Allows(*a, 90, 500, kT0)) << "the asking reservation is all it holds";
  EXPECT_TRUE(shares.AllowsArrival(*a, kT0));
  a->held = 100;
  EXPECT_FALSE(shares.AllowsArrival(*a, kT0));
  shares.Leave(b, kT0);
  EXPECT_TRUE(shares.AllowsArrival(*a, kT0 + absl::Seconds(2)));
  a->held = 0;
  shares.Leave(a, kT0 + absl::Seconds(2));
}

// The rule through the budget: 1,000 bytes, a share of a quarter (250).
class BudgetShare : public ::testing::Test {
 protected:
  ByteBudget budget_{1000, /*receive_credit=*/100, /*max_waiting=*/8, /*max_share=*/0.25};
};

TEST_F(BudgetShare, AClientAloneMayUseTheWholeBudget) {
  EXPECT_EQ(budget_.share_bytes(), 250);
  absl::StatusOr<ByteBudget::Reservation> first = budget_.Reserve(400, "a");
  absl::StatusOr<ByteBudget::Reservation> second = budget_.Reserve(400, "a");
  ASSERT_THAT(first.status(), IsOk());
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_THAT(second->Grow(200), IsOk());
  EXPECT_EQ(budget_.used(), 1000);
  EXPECT_EQ(budget_.share_refusals(), 0);
}

TEST_F(BudgetShare, BeyondItsShareWhileAnotherIsInFlightItIsRefusedNotTheOther) {
  ByteBudget::Reservation other = budget_.Open("b");  // b's call, in flight
  absl::StatusOr<ByteBudget::Reservation> first = budget_.Reserve(200, "a");
  ASSERT_THAT(first.status(), IsOk());
  absl::StatusOr<ByteBudget::Reservation> second = budget_.Reserve(100, "a");
  EXPECT_THAT(second.status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       "server overloaded: this client (a) holds 200 bytes of the "
                       "max_inflight_bytes budget of 1000, and may hold 250 "
                       "(--max_inflight_share) while other clients use it; retry with backoff"));
  EXPECT_EQ(budget_.share_refusals(), 1);
  absl::StatusOr<ByteBudget::Reservation> fits = budget_.Reserve(50, "a");
  EXPECT_THAT(fits.status(), IsOk()) << "up to its share";
  // b's calls go on, in the room a left.
  EXPECT_THAT(other.Grow(500), IsOk());
  // An output that would take a past its share is not allocated; the reservation is unchanged.
  EXPECT_THAT(fits->Grow(1),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("this client (a)")));
  EXPECT_EQ(fits->bytes(), 50);
  EXPECT_FALSE(fits->TryGrow(1));
  EXPECT_EQ(budget_.share_refusals(), 3);
  // What a gives back is room for it again.
  *first = ByteBudget::Reservation();
  EXPECT_THAT(fits->Grow(200), IsOk());
  EXPECT_EQ(budget_.used(), 750);
}

TEST_F(BudgetShare, AClientsOnlyCallIsNeverRefusedByTheShare) {
  ByteBudget::Reservation other = budget_.Open("b");
  ASSERT_THAT(other.Grow(100), IsOk());
  absl::StatusOr<ByteBudget::Reservation> only = budget_.Reserve(600, "a");
  ASSERT_THAT(only.status(), IsOk());
  EXPECT_THAT(only->Grow(100), IsOk());
  // The budget's own room still applies to it.
  EXPECT_THAT(only->Grow(400),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("this request needs 1100 bytes")));
  EXPECT_EQ(budget_.share_refusals(), 0);
}

class NoOpWaiter : public ByteBudget::Waiter {
 public:
  void OnGranted() override { ++granted; }
  int granted = 0;
};

TEST_F(BudgetShare, ANewCallOfAClientHoldingItsShareIsRefusedOnArrival) {
  ByteBudget::Reservation other = budget_.Open("b");
  absl::StatusOr<ByteBudget::Reservation> held = budget_.Reserve(250, "a");
  ASSERT_THAT(held.status(), IsOk());
  NoOpWaiter waiter;
  ByteBudget::Reservation call = budget_.Open("a");
  EXPECT_EQ(budget_.AcquireReceive(&waiter, call), ByteBudget::Admission::kOverShare);
  EXPECT_THAT(budget_.ShareError(call),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("holds 250 bytes")));
  EXPECT_EQ(budget_.used(), 250) << "no credit taken";
  // b's new call is read.
  ByteBudget::Reservation b_call = budget_.Open("b");
  EXPECT_EQ(budget_.AcquireReceive(&waiter, b_call), ByteBudget::Admission::kGranted);
  EXPECT_THAT(budget_.ReserveDecoded(300, "b's message", &b_call), IsOk());
  EXPECT_EQ(b_call.bytes(), 300);
  EXPECT_EQ(budget_.used(), 550);
}

TEST_F(BudgetShare, CreditsAreNotCountedButTheDecodedMessageIs) {
  ByteBudget::Reservation other = budget_.Open("b");
  absl::StatusOr<ByteBudget::Reservation> held = budget_.Reserve(200, "a");
  ASSERT_THAT(held.status(), IsOk());
  NoOpWaiter waiter;
  // Three calls of a being read at once: 300 bytes of credits beside its 200, all admitted.
  ByteBudget::Reservation calls[3] = {budget_.Open("a"), budget_.Open("a"), budget_.Open("a")};
  for (ByteBudget::Reservation& call : calls) {
    EXPECT_EQ(budget_.AcquireReceive(&waiter, call), ByteBudget::Admission::kGranted);
  }
  EXPECT_EQ(budget_.used(), 500);
  EXPECT_THAT(budget_.ReserveDecoded(50, "m", &calls[0]), IsOk());
  // A decoded message past its share is refused, and its credit given back.
  EXPECT_THAT(budget_.ReserveDecoded(10, "m", &calls[1]),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("holds 250 bytes")));
  EXPECT_EQ(calls[1].bytes(), 0);
  EXPECT_EQ(budget_.used(), 350);
  (void)budget_.ReceiveDone(0);
  EXPECT_EQ(budget_.used(), 250);
}

TEST(BudgetShareOff, AShareOfOneRefusesNothing) {
  ByteBudget budget(1000, 100, 8, /*max_share=*/1.0);
  ByteBudget::Reservation other = budget.Open("b");
  absl::StatusOr<ByteBudget::Reservation> a = budget.Reserve(600, "a");
  absl::StatusOr<ByteBudget::Reservation> more = budget.Reserve(300, "a");
  EXPECT_THAT(a.status(), IsOk());
  EXPECT_THAT(more.status(), IsOk());
  EXPECT_EQ(budget.share_refusals(), 0);
}

TEST_F(BudgetShare, ReservationsOfNoClientAreInNoShare) {
  ByteBudget::Reservation other = budget_.Open("b");
  std::optional<ByteBudget::Reservation> plain = budget_.TryReserve(600);
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->TryGrow(100));
  // A Reset reservation leaves its client: b no longer makes the budget contended (once its
  // presence has passed: not waited for here).
  other.Reset();
  EXPECT_EQ(budget_.used(), 700);
}

}  // namespace
}  // namespace tensorcompute::server
