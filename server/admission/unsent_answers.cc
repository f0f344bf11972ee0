#include "server/admission/unsent_answers.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tensorcompute::server {

absl::string_view PeerAddress(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:")) return peer;  // a path: every client the same
  absl::ConsumePrefix(&peer, "ipv4:") || absl::ConsumePrefix(&peer, "ipv6:");
  // An IPv6 address with a port is in brackets, which gRPC may write percent-encoded.
  for (const auto& [open, close] : {std::pair{"[", "]"}, std::pair{"%5B", "%5D"}}) {
    if (absl::ConsumePrefix(&peer, open)) return peer.substr(0, peer.find(close));
  }
  // One colon: ADDRESS:PORT. None, or several (a bare IPv6 address): the address as it is.
  const size_t colon = peer.find(':');
  if (colon != absl::string_view::npos && peer.find(':', colon + 1) == absl::string_view::npos) {
    return peer.substr(0, colon);
  }
  return peer;
}

void UnsentAnswers::Count(FrontEndKind front_end, absl::string_view rpc, absl::string_view peer,
                          int64_t bytes, absl::Duration limit) {
  metrics_.CountAnswerNotTaken(front_end);
  const absl::string_view address = PeerAddress(peer);
  {
    absl::MutexLock lock(&mu_);
    if (logged_.size() >= static_cast<size_t>(kMaxPeers)) logged_.clear();
    if (!logged_.emplace(address).second) return;
  }
  log_.Log(rpc, absl::CancelledError(absl::StrCat(
                    "the answer (", bytes, " bytes) was not taken by ", address, " within ",
                    absl::FormatDuration(limit), " (its send limit: --answer_send_timeout_s or ",
                    "--http_write_timeout_s, + size / --answer_send_min_bytes_per_s); the call is ",
                    "given up and its budget freed. Further ones from ", address,
                    " are counted in tensorcompute_answers_cancelled_unsent_total{front_end=\"",
                    FrontEndName(front_end), "\"}, not logged")));
}

}  // namespace tensorcompute::server
