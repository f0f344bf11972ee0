// File: server/admission/client_identity.h
//
// Who a call's client is, for the fair share of the in-flight budget (byte_budget.h,
// --max_inflight_share): the one rule, used by every front end (native and KServe gRPC through
// UnaryReactor, KServe HTTP through its session). A client is named by
//
//   - its token, when the server requires tokens (--auth_token_file): "token:" and the first 8
//     hex digits of the token's SHA-256, never the token itself (the name goes into error
//     messages). Only then: a token the server does not check could be a new made-up one on
//     every call, a new client each time.
//   - otherwise its address: the connection's remote address (gRPC's peer(), "ipv4:A:P" or
//     "ipv6:[A]:P", or the HTTP socket's), without the port, so that a client's connections are
//     one client, and written one way (inet_ntop; an IPv4-mapped IPv6 address as IPv4), so that
//     "::1" and "0:0::1" are one client too. A peer that is not an IP address (a unix socket)
//     is named by what gRPC calls it.
//   - behind a proxy it trusts (--trusted_proxies: addresses and CIDR blocks, e.g.
//     "127.0.0.1,::1,10.0.0.0/8"): when the connection comes from one of them, the
//     x-forwarded-for values (every field, in order, comma-separated; an entry may carry a port,
//     "A:P" or "[A]:P") are read from the right, since each proxy appends the address it got the
//     request from (nginx's $proxy_add_x_forwarded_for): the first address that is not itself a
//     trusted proxy is the client. Only a trusted proxy wrote what is right of it, so an address
//     the client put in the header itself, further left, is never reached. An entry that is not
//     an address ends the walk: the trusted proxy right of it is the client (a header that cannot
//     be read names no one else). All of them trusted: the left-most is the client. From a peer
//     that is not trusted the header is ignored, so a client cannot name itself someone else.
//
// Thread-safety: immutable once built; Of may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_IDENTITY_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_IDENTITY_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class CallbackServerContext;
}  // namespace grpc

namespace tensorcompute::server {

// The header a proxy names the client in (lower case: gRPC metadata keys are).
inline constexpr char kForwardedForKey[] = "x-forwarded-for";

// An IP address: IPv4 ones as IPv4-mapped IPv6 (::ffff:a.b.c.d), so that both kinds compare
// alike.
struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  bool v4 = false;

  bool operator==(const IpAddress& other) const { return bytes == other.bytes; }
  // inet_ntop's text: "127.0.0.1", "2001:db8::1".
  std::string ToString() const;
};

// `text` as an address: "1.2.3.4", "1.2.3.4:80", "::1", "[::1]", "[::1]:80", "::ffff:1.2.3.4"
// (read as 1.2.3.4), surrounding spaces ignored. nullopt when it is none of these.
std::optional<IpAddress> ParseIpAddress(absl::string_view text);

class ClientIdentity {
 public:
  // A block of addresses: an address and how many of its leading bits match.
  struct Block {
    IpAddress address;
    int prefix_bits = 128;
  };

  // Nobody trusted, no tokens: every client is its address.
  ClientIdentity() = default;

  // `trusted_proxies`: --trusted_proxies, comma-separated addresses and CIDR blocks ("" none).
  // `tokens`: the server requires tokens (--auth_token_file), so a call's token is checked
  // before it reaches the budget. INVALID_ARGUMENT, naming the entry, for one that is neither.
  static absl::StatusOr<ClientIdentity> Create(absl::string_view trusted_proxies, bool tokens);

  // The name of the client of a call from `peer` (see above), with `forwarded` its
  // x-forwarded-for values joined by commas ("" without) and `authorization` its
  // "authorization" value (nullopt without).
  std::string Of(absl::string_view peer, absl::string_view forwarded,
                 std::optional<absl::string_view> authorization) const;
  // The same for a gRPC call.
  std::string Of(const grpc::CallbackServerContext& context) const;

  bool Trusted(const IpAddress& address) const;
  bool trusts_proxies() const { return !trusted_.empty(); }

 private:
  std::string FromForwarded(const IpAddress& proxy, absl::string_view forwarded) const;

  std::vector<Block> trusted_;
  bool tokens_ = false;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_IDENTITY_H_
