// GrpcAcceptor's binding and DescriptorHeadroom's rule (server/grpc_acceptor.h,
// server/descriptor_headroom.h). The acceptor out of descriptors, against the real binary:
// tests/server/grpc_descriptors_test.py.

#include "server/grpc_acceptor.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/descriptor_headroom.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// A process with `open` descriptors under a limit of `limit`, at a time the test moves.
struct FakeProcess {
  int64_t open = 0;
  int64_t limit = 100;
  absl::Time now = absl::FromUnixSeconds(1000);
  int recounts = 0;

  DescriptorHeadroom::Sources sources() {
    DescriptorHeadroom::Sources s;
    s.open = [this] {
      ++recounts;
      return open;
    };
    s.limit = [this] { return limit; };
    s.now = [this] { return now; };
    return s;
  }
};

TEST(DescriptorHeadroom, AdmitsWhileTheReserveStaysFree) {
  FakeProcess process;
  DescriptorHeadroom headroom(/*reserve=*/10, process.sources());
  process.open = 89;  // with the one being admitted: 11 free
  EXPECT_TRUE(headroom.Admit());
  process.now += absl::Seconds(1);
  process.open = 90;  // 10 free: still the reserve
  EXPECT_TRUE(headroom.Admit());
  process.now += absl::Seconds(1);
  process.open = 91;  // 9 free
  EXPECT_FALSE(headroom.Admit());
}

TEST(DescriptorHeadroom, CountsWhatItAdmittedBetweenCounts) {
  FakeProcess process;
  DescriptorHeadroom headroom(/*reserve=*/10, process.sources());
  process.open = 80;
  EXPECT_TRUE(headroom.Admit());  // counted: 80 with it
  EXPECT_EQ(process.recounts, 1);
  // The same instant: no recount; each admission counts one more, up to 90.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(headroom.Admit()) << i;
  EXPECT_FALSE(headroom.Admit());  // would be 91
  EXPECT_EQ(process.recounts, 1);  // a refusal recounts at most every 5 ms
  // Descriptors closed meanwhile are seen by the recount a refusal makes 5 ms later.
  process.open = 50;
  process.now += absl::Milliseconds(5);
  EXPECT_TRUE(headroom.Admit());
  EXPECT_EQ(process.recounts, 2);
}

TEST(DescriptorHeadroom, RecountsEveryHundredMilliseconds) {
  FakeProcess process;
  DescriptorHeadroom headroom(/*reserve=*/0, process.sources());
  EXPECT_TRUE(headroom.Admit());
  process.now += absl::Milliseconds(99);
  EXPECT_TRUE(headroom.Admit());
  EXPECT_EQ(process.recounts, 1);
  process.now += absl::Milliseconds(1);
  EXPECT_TRUE(headroom.Admit());
  EXPECT_EQ(process.recounts, 2);
}

TEST(DescriptorHeadroom, WithoutACountOrALimitAdmitsEverything) {
  FakeProcess process;
  process.limit = -1;
  process.open = 1000;
  DescriptorHeadroom no_limit(/*reserve=*/10, process.sources());
  EXPECT_TRUE(no_limit.Admit());
  FakeProcess unreadable;
  unreadable.open = -1;
  DescriptorHeadroom no_count(/*reserve=*/1000, unreadable.sources());
  EXPECT_TRUE(no_count.Admit());
}

TEST(DescriptorHeadroom, ThisProcessCountsItsDescriptors) {
  const int64_t before = OpenDescriptors();
  ASSERT_GT(before, 2);  // at least stdin, stdout, stderr
  const int fd = dup(0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(OpenDescriptors(), before + 1);
  close(fd);
  EXPECT_GT(DescriptorLimit(), before);
}

TEST(GrpcAcceptor, BindsAPortItPicksAndRefusesATakenOne) {
  auto first = GrpcAcceptor::Listen("127.0.0.1:0", {});
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_GT((*first)->port(), 0);
  GrpcAcceptor::Options options;
  options.flag = "health_listen";
  EXPECT_THAT(GrpcAcceptor::Listen(absl::StrCat("127.0.0.1:", (*first)->port()), options).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("(health_listen): Address already in use")));
}

TEST(GrpcAcceptor, ANameIsEveryAddressItResolvesToOnOnePort) {
  auto both = GrpcAcceptor::Listen("localhost:0", {});
  ASSERT_THAT(both.status(), IsOk());
  // 127.0.0.1 is taken on that port (and ::1 too, where the host has IPv6).
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>((*both)->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
}

TEST(GrpcAcceptor, RefusesWhatIsNotHostPort) {
  for (const std::string address : {"", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000"}) {
    EXPECT_THAT(GrpcAcceptor::Listen(address, {}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not host:port")))
        << address;
  }
  EXPECT_THAT(GrpcAcceptor::Listen("no-such-host.invalid:0", {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot listen on")));
}

}  // namespace
}  // namespace tensorcompute::server
