// Who a call's client is (server/admission/client_identity.h): gRPC's and HTTP's peer forms,
// x-forwarded-for from trusted proxies (addresses and CIDR blocks) and ignored from anyone else,
// spoofing attempts, tokens as identities, and --trusted_proxies values refused.

#include "server/admission/client_identity.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

ClientIdentity Trusting(const char* proxies) {
  absl::StatusOr<ClientIdentity> identity = ClientIdentity::Create(proxies, /*tokens=*/false);
  EXPECT_TRUE(identity.ok()) << identity.status();
  return identity.ok() ? *std::move(identity) : ClientIdentity();
}

TEST(ClientIdentity, IsTheAddressWithoutPortWrittenOneWay) {
  const ClientIdentity identity;
  EXPECT_EQ(identity.Of("ipv4:127.0.0.2:5555", "", std::nullopt), "127.0.0.2");
  EXPECT_EQ(identity.Of("ipv4:127.0.0.2:6666", "", std::nullopt), "127.0.0.2");
  EXPECT_EQ(identity.Of("ipv6:[::1]:5555", "", std::nullopt), "::1");
  EXPECT_EQ(identity.Of("ipv6:%5B::1%5D:5555", "", std::nullopt), "::1");
  EXPECT_EQ(identity.Of("ipv6:[0:0:0:0:0:0:0:1]:1", "", std::nullopt), "::1");
  EXPECT_EQ(identity.Of("ipv6:[2001:DB8::1]:1", "", std::nullopt), "2001:db8::1");
  // An IPv4 client of a dual-stack listener is that IPv4 client.
  EXPECT_EQ(identity.Of("ipv6:[::ffff:10.1.2.3]:80", "", std::nullopt), "10.1.2.3");
  // The HTTP front end's form: the socket's address alone.
  EXPECT_EQ(identity.Of("10.1.2.3", "", std::nullopt), "10.1.2.3");
  EXPECT_EQ(identity.Of("::1", "", std::nullopt), "::1");
  // Not an IP address: as gRPC names it.
  EXPECT_EQ(identity.Of("unix:/run/tc.sock", "", std::nullopt), "unix:/run/tc.sock");
}

TEST(ClientIdentity, IgnoresForwardedForFromPeersNotTrusted) {
  const ClientIdentity nobody;
  EXPECT_EQ(nobody.Of("ipv4:127.0.0.1:1", "203.0.113.5", std::nullopt), "127.0.0.1");
  const ClientIdentity edge = Trusting("127.0.0.1");
  // A client naming itself someone else, or naming the trusted proxy.
  EXPECT_EQ(edge.Of("ipv4:127.0.0.2:1", "203.0.113.5", std::nullopt), "127.0.0.2");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.2:1", "127.0.0.1", std::nullopt), "127.0.0.2");
  EXPECT_EQ(edge.Of("ipv6:[::1]:1", "203.0.113.5", std::nullopt), "::1");
}

TEST(ClientIdentity, BelievesTheRightMostAddressATrustedProxyDidNotWrite) {
  const ClientIdentity edge = Trusting("127.0.0.1, ::1");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv6:[::1]:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  // The same host as IPv4-mapped: the same proxy.
  EXPECT_EQ(edge.Of("ipv6:[::ffff:127.0.0.1]:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  // What the client wrote itself is left of what the proxy appended, and never reached.
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "6.6.6.6, 203.0.113.5", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "127.0.0.1,203.0.113.5", std::nullopt), "203.0.113.5");
  // Two trusted proxies in a row: the address before them.
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "6.6.6.6, 203.0.113.5, 127.0.0.1", std::nullopt),
            "203.0.113.5");
  // Entries with ports, IPv6 in brackets, spaces.
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", " 203.0.113.5:4711 ", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "[2001:db8::7]:443", std::nullopt), "2001:db8::7");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "2001:DB8::7", std::nullopt), "2001:db8::7");
  // No header, an empty one, or only trusted proxies: the left-most, here the proxy itself.
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "", std::nullopt), "127.0.0.1");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "::1, 127.0.0.1", std::nullopt), "::1");
}

TEST(ClientIdentity, AnUnreadableEntryEndsTheWalkAtTheProxyRightOfIt) {
  const ClientIdentity edge = Trusting("127.0.0.1,10.0.0.0/8");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "203.0.113.5, unknown", std::nullopt), "127.0.0.1");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "203.0.113.5, garbage, 10.9.9.9", std::nullopt),
            "10.9.9.9");
  EXPECT_EQ(edge.Of("ipv4:127.0.0.1:1", "203.0.113.5,,", std::nullopt), "127.0.0.1");
  // A made-up name never becomes a client of its own: an attacker could vary it per call.
  EXPECT_THAT(edge.Of("ipv4:127.0.0.1:1", "evil-1", std::nullopt), Not(HasSubstr("evil")));
}

TEST(ClientIdentity, MatchesCidrBlocks) {
  const ClientIdentity edge = Trusting("10.0.0.0/8,fd00::/8,192.168.1.128/25");
  EXPECT_EQ(edge.Of("ipv4:10.200.3.4:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv6:[fd12::1]:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv4:192.168.1.200:1", "203.0.113.5", std::nullopt), "203.0.113.5");
  EXPECT_EQ(edge.Of("ipv4:192.168.1.127:1", "203.0.113.5", std::nullopt), "192.168.1.127");
  EXPECT_EQ(edge.Of("ipv4:11.0.0.1:1", "203.0.113.5", std::nullopt), "11.0.0.1");
  EXPECT_EQ(edge.Of("ipv6:[fe00::1]:1", "203.0.113.5", std::nullopt), "fe00::1");
  // A client inside a trusted block behind the proxy: the walk goes on past it.
  EXPECT_EQ(edge.Of("ipv4:10.0.0.1:1", "203.0.113.5, 10.0.0.2", std::nullopt), "203.0.113.5");
  const ClientIdentity everyone = Trusting("0.0.0.0/0");
  EXPECT_EQ(everyone.Of("ipv4:1.2.3.4:1", "5.6.7.8", std::nullopt), "5.6.7.8");
}

TEST(ClientIdentity, RefusesWhatIsNotAnAddressOrABlock) {
  for (const char* bad : {"foo", "10.0.0.0/33", "::1/129", "10.0.0.0/-1", "10.0.0.0/x",
                          "127.0.0.1:80", "[::1]", "1.2.3", "127.0.0.1,nope"}) {
    EXPECT_THAT(ClientIdentity::Create(bad, false).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trusted_proxies")))
        << bad;
  }
  for (const char* good : {"", "127.0.0.1", " 127.0.0.1 , ::1 ", "10.0.0.0/8", "::/0"}) {
    EXPECT_TRUE(ClientIdentity::Create(good, false).ok()) << good;
  }
}

TEST(ClientIdentity, IsTheTokenWhenTokensAreRequired) {
  absl::StatusOr<ClientIdentity> tokens = ClientIdentity::Create("", /*tokens=*/true);
  ASSERT_TRUE(tokens.ok());
  const std::string a = tokens->Of("ipv4:10.0.0.1:1", "", "Bearer secret-a");
  EXPECT_THAT(a, StartsWith("token:"));
  EXPECT_EQ(a.size(), 6u + 8u);
  EXPECT_THAT(a, Not(HasSubstr("secret")));
  // The same token from elsewhere is the same client; another token, another.
  EXPECT_EQ(tokens->Of("ipv4:10.0.0.2:1", "", "bearer  secret-a "), a);
  EXPECT_NE(tokens->Of("ipv4:10.0.0.1:1", "", "Bearer secret-b"), a);
  // Without a Bearer token (a call the gate refuses anyway): the address.
  EXPECT_EQ(tokens->Of("ipv4:10.0.0.1:1", "", std::nullopt), "10.0.0.1");
  EXPECT_EQ(tokens->Of("ipv4:10.0.0.1:1", "", "Basic eA=="), "10.0.0.1");
  // Tokens not required: not checked either, so not believed.
  EXPECT_EQ(ClientIdentity().Of("ipv4:10.0.0.1:1", "", "Bearer secret-a"), "10.0.0.1");
}

}  // namespace
}  // namespace tensorcompute::server
