#include "server/admission/client_identity.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/server_context.h"
#include <arpa/inet.h>
#include <openssl/sha.h>

#include "server/admission/token_auth.h"
#include "server/admission/unsent_answers.h"

namespace tensorcompute::server {
namespace {

constexpr absl::string_view kTokenPrefix = "token:";

// `text` without a port: "A:P" (one colon: IPv4) and "[A]:P" / "[A]"; a bare IPv6 address
// (several colons) as it is.
absl::string_view WithoutPort(absl::string_view text) {
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    return close == absl::string_view::npos ? absl::string_view() : text.substr(1, close - 1);
  }
  const size_t colon = text.find(':');
  if (colon != absl::string_view::npos && text.find(':', colon + 1) == absl::string_view::npos) {
    return text.substr(0, colon);
  }
  return text;
}

bool InBlock(const IpAddress& address, const ClientIdentity::Block& block) {
  const int whole = block.prefix_bits / 8;
  if (std::memcmp(address.bytes.data(), block.address.bytes.data(), whole) != 0) return false;
  const int rest = block.prefix_bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (address.bytes[whole] & mask) == (block.address.bytes[whole] & mask);
}

std::string TokenName(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat(kTokenPrefix, absl::BytesToHexString(absl::string_view(
                                        reinterpret_cast<const char*>(digest), 4)));
}

}  // namespace

std::string IpAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (v4) {
    inet_ntop(AF_INET, bytes.data() + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, bytes.data(), text, sizeof(text));
  }
  return text;
}

std::optional<IpAddress> ParseIpAddress(absl::string_view text) {
  const std::string bare(WithoutPort(absl::StripAsciiWhitespace(text)));
  IpAddress address;
  if (inet_pton(AF_INET, bare.c_str(), address.bytes.data() + 12) == 1) {
    address.bytes[10] = address.bytes[11] = 0xff;
    address.v4 = true;
    return address;
  }
  if (inet_pton(AF_INET6, bare.c_str(), address.bytes.data()) != 1) return std::nullopt;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  address.v4 = std::memcmp(address.bytes.data(), kMapped, sizeof(kMapped)) == 0;
  return address;
}

absl::StatusOr<ClientIdentity> ClientIdentity::Create(absl::string_view trusted_proxies,
                                                      bool tokens) {
  ClientIdentity identity;
  identity.tokens_ = tokens;
  for (absl::string_view entry : absl::StrSplit(trusted_proxies, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, absl::MaxSplits('/', 1));
    // No port here: a proxy is an address, and "::1" must not lose its last group.
    const bool has_port = parts[0].find('[') != absl::string_view::npos ||
                          std::count(parts[0].begin(), parts[0].end(), ':') == 1;
    std::optional<IpAddress> address = has_port ? std::nullopt : ParseIpAddress(parts[0]);
    int bits = address.has_value() && address->v4 ? 32 : 128;
    const int max_bits = bits;
    if (!address.has_value() || (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &bits) ||
                                                       bits < 0 || bits > max_bits))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trusted_proxies: \"", entry,
          "\" is not an IP address or a CIDR block (e.g. 127.0.0.1, ::1, 10.0.0.0/8, fd00::/8)"));
    }
    identity.trusted_.push_back({*address, address->v4 ? bits + 96 : bits});
  }
  return identity;
}

bool ClientIdentity::Trusted(const IpAddress& address) const {
  for (const Block& block : trusted_) {
    if (InBlock(address, block)) return true;
  }
  return false;
}

std::string ClientIdentity::Of(absl::string_view peer, absl::string_view forwarded,
                               std::optional<absl::string_view> authorization) const {
  if (tokens_ && authorization.has_value()) {
    if (std::optional<absl::string_view> token = TokenAuth::BearerToken(*authorization)) {
      return TokenName(*token);
    }
  }
  const absl::string_view address_text = PeerAddress(peer);
  const std::optional<IpAddress> address = ParseIpAddress(address_text);
  if (!address.has_value()) return std::string(address_text);
  if (!forwarded.empty() && Trusted(*address)) return FromForwarded(*address, forwarded);
  return address->ToString();
}

std::string ClientIdentity::FromForwarded(const IpAddress& proxy,
                                          absl::string_view forwarded) const {
  IpAddress client = proxy;  // the last address believed
  const std::vector<absl::string_view> hops = absl::StrSplit(forwarded, ',');
  for (auto hop = hops.rbegin(); hop != hops.rend(); ++hop) {
    std::optional<IpAddress> address = ParseIpAddress(*hop);
    if (!address.has_value()) break;  // unreadable: nothing left of it is believed
    client = *address;
    if (!Trusted(client)) break;  // the first one no trusted proxy vouches for
  }
  return client.ToString();
}

std::string ClientIdentity::Of(const grpc::CallbackServerContext& context) const {
  std::string forwarded;
  std::optional<absl::string_view> authorization;
  const auto& metadata = context.client_metadata();
  // The metadata lookups only when they can matter.
  if (tokens_) {
    const auto it = metadata.find("authorization");
    if (it != metadata.end())
      authorization = absl::string_view(it->second.data(), it->second.size());
  }
  if (!trusted_.empty()) {
    const auto [begin, end] = metadata.equal_range(kForwardedForKey);
    std::vector<absl::string_view> values;
    for (auto it = begin; it != end; ++it)
      values.emplace_back(it->second.data(), it->second.size());
    forwarded = absl::StrJoin(values, ",");
  }
  return Of(context.peer(), forwarded, authorization);
}

}  // namespace tensorcompute::server
