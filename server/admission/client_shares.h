// File: server/admission/client_shares.h
//
// The fair share of the in-flight budget (byte_budget.h; --max_inflight_share): what each client
// (client_identity.h names them) holds of the budget's work, and whether it may take more.
//
// The rule: while the budget is *contended* for a client, that client may hold at most
// `share` x limit bytes of work (its requests' decoded messages and outputs); beyond it, its new
// calls are refused (UNAVAILABLE, ByteBudget::ShareError) and its others' outputs are not
// allocated, while other clients' calls go on. A client's only call is never refused by the
// share (as a request alone always runs), and a client alone may use the whole budget.
//
// Contended, for client C: another client has a call in flight now (waiting for a receive
// credit, being read, computed, or its answer sent), or had one within the last kPresence.
// Not "the budget is full": by then the client over its share holds the room the others
// need, and a refusal comes too late for them (a call that finds no room is refused at once,
// not queued). Not only "now" either: a client with a few calls at a time has none in flight
// between them, for microseconds, and an attack that arrives in such a gap must not take the
// whole budget for the length of its answers' send limit. A client that comes back after more
// than kPresence away finds the budget as its last user left it, and what that one holds beyond
// the share is freed as its calls end (at the latest at their send limit); meanwhile that
// client's new calls are refused, since the newcomer's arrival makes the budget contended.
//
// Receive credits (the room reserved to read a message) are not counted: every call holds the
// same one, for as long as reading its message takes, so counting them would cap a client's
// calls being read at once (two, with the defaults) rather than what it keeps.
//
// Bookkeeping: an entry per client with a call in flight (a reference per call, counted by the
// budget's Reservations and credits), removed when its last call ends; so there are never more
// entries than calls in flight. "Who was here last" is two (name, time) slots, not a history.
//
// Thread-safety: none; ByteBudget calls it under its mutex. Times are passed in (tests use
// their own).

#ifndef TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_SHARES_H_
#define TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_SHARES_H_

#include <cstdint>
#include <string>

#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

class ClientShares {
 public:
  // How long a client that had a call in flight still counts as present.
  static constexpr absl::Duration kPresence = absl::Seconds(1);

  struct Client {
    std::string name;
    int64_t held = 0;  // bytes of work
    int64_t refs = 0;  // its calls' references
  };

  // `share_bytes`: what a client may hold while contended; >= the budget's limit turns the rule
  // off.
  explicit ClientShares(int64_t share_bytes) : share_bytes_(share_bytes) {}

  int64_t share_bytes() const { return share_bytes_; }
  // Clients with a call in flight.
  int64_t clients() const { return static_cast<int64_t>(clients_.size()); }

  // A call of client `name` arrived: its entry (made if new), with one more reference. The
  // pointer stays valid until the reference is given back.
  Client* Enter(absl::string_view name, absl::Time now);
  // Another reference to `client`'s entry (a Reservation copied out of a credit).
  static void AddRef(Client* client) { ++client->refs; }
  // Gives a reference back; the entry goes with the last one. REQUIRES: client->held is 0 then.
  void Leave(Client* client, absl::Time now);

  // Whether the budget is contended for `client` (see above).
  bool Contended(const Client& client, absl::Time now) const;
  // Whether `client`, of whose holding `own` bytes are the asking reservation's, may add `more`
  // bytes: within its share, or not contended, or the reservation is all it holds.
  bool Allows(const Client& client, int64_t own, int64_t more, absl::Time now) const;
  // Whether a new call of `client` may start: it holds less than its share, or not contended.
  bool AllowsArrival(const Client& client, absl::Time now) const;

 private:
  void Saw(absl::string_view name, absl::Time now);

  const int64_t share_bytes_;
  absl::node_hash_map<std::string, Client> clients_;  // node: Client* stays valid
  // The client seen last (a call arrived or its last call ended) and when, and when a client
  // other than that one was seen last: enough to tell, for any client, when another was.
  std::string last_name_;
  absl::Time last_ = absl::InfinitePast();
  absl::Time other_ = absl::InfinitePast();
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_ADMISSION_CLIENT_SHARES_H_
